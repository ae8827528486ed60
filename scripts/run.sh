#!/usr/bin/env bash
# Sets up a fresh machine and runs FlashScope: installs missing packages,
# builds what it runs (the desktop app where there is a display, else the
# CLI; not the tests) in the folder test.sh shares, fetches the default
# model, then runs the app, else the chat in the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
if has_gpu && command -v nvcc >/dev/null 2>&1; then
  cuda=(-DFLASHSCOPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${FLASHSCOPE_CUDA_ARCHS:-native}" "$(hopper_option)")
else
  cuda=(-DFLASHSCOPE_CUDA=OFF)  # no GPU here: the CPU path runs everything
fi
build=build
configure $build "${cuda[@]}"
cli=$build/cli/flashscope-cli
app=$build/app/flashscope
display=${DISPLAY:-}${WAYLAND_DISPLAY:-}
targets=(flashscope-cli)
# The app is built only where its libraries were found (app/CMakeLists.txt).
# (grep reads to the end: -q would stop early and fail the pipe under pipefail.)
if [[ -n $display ]] && cmake --build $build --target help | grep '^flashscope-app:' >/dev/null; then
  targets+=(flashscope-app)
fi
cmake --build $build -j "$jobs" --target "${targets[@]}"
[[ -x scripts/fetch_model.sh ]] && bash scripts/fetch_model.sh
if [[ -n $display && -x $app ]]; then
  exec $app  # the desktop app: chat on the left, the kernels on the right
fi
$cli info
if [[ -t 0 ]]; then
  exec $cli chat  # no display: chat in the terminal (/help for commands)
fi
# Not interactive (a pipe, CI): one answer, to show the whole path works.
$cli generate --chat -n 96 -p "In two sentences, what does the attention mechanism in a transformer do?"
