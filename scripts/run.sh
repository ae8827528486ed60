#!/usr/bin/env bash
# Sets up a fresh machine and runs FlashScope: installs missing packages,
# builds, fetches the default model, then runs the desktop app where there is
# a display (once built), else the chat in the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
if has_gpu && command -v nvcc >/dev/null 2>&1; then
  cuda=(-DFLASHSCOPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${FLASHSCOPE_CUDA_ARCHS:-native}")
else
  cuda=(-DFLASHSCOPE_CUDA=OFF)  # no GPU here: the CPU path runs everything
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" >/dev/null
cmake --build build -j "$jobs"
[[ -x scripts/fetch_model.sh ]] && bash scripts/fetch_model.sh
cli=build/cli/flashscope-cli
app=build/app/flashscope
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x $app ]]; then
  exec $app  # the desktop app: chat on the left, the kernels on the right
fi
$cli info
if [[ -t 0 ]]; then
  exec $cli chat  # no display: chat in the terminal (/help for commands)
fi
# Not interactive (a pipe, CI): one answer, to show the whole path works.
$cli generate --chat -n 96 -p "In two sentences, what does the attention mechanism in a transformer do?"
