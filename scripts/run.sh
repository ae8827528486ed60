#!/usr/bin/env bash
# Sets up a fresh machine and runs FlashScope: installs missing packages,
# builds, fetches the default model, then runs the CLI — device facts and a
# prefill benchmark on the GPU if there is one, else on the CPU path.
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
$cli info
if has_gpu; then
  $cli bench prefill --kernel all
else
  $cli bench prefill --device cpu --q-heads 9 --kv-heads 3 --q-len 512 --kv-len 512 --head-dim 64 --causal --iters 5
fi
