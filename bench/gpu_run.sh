#!/usr/bin/env bash
# One full call on the GPU machine: build for sm_90a, run every test (the GPU
# cases included), then the benchmarks with PyTorch's peers in the same run.
# Logs and results go under $OUT (the device tool brings them back).
#   usage: bash bench/gpu_run.sh [tests|bench|profile|all]   (default all)
# The machine has no doctest package: carry the header in .device-carry/doctest/.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/flashscope-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv | tee "$OUT/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DFLASHSCOPE_DOCTEST_INCLUDE_DIR="$PWD/.device-carry" >"$OUT/build.log" 2>&1 &&
  ninja -C build-gpu -j16 >>"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cli=build-gpu/cli/flashscope-cli
$cli info | tee "$OUT/info.txt"

if [[ $what == tests || $what == all ]]; then
  build-gpu/tests/flashscope-tests --duration=true >"$OUT/tests.log" 2>&1
  echo "tests exit $?"; grep -E "^\[doctest\] (test cases|assertions)|ERROR|FAILED" "$OUT/tests.log" | head -30
fi

if [[ $what == bench || $what == all ]]; then
  python3 bench/compare_torch.py --cli "$cli" --kernel all --gqa --out-dir "$OUT" 2>&1 | tee "$OUT/compare.log" | tail -40
fi

if [[ $what == profile || $what == all ]]; then
  # What limits the default kernel on the seed shape: tensor-pipe and shared-memory utilization, warp stalls.
  ncu --clock-control none -k regex:attention_kernel -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    $cli bench prefill --kernel auto --iters 1 --warmup 0 >"$OUT/ncu_auto_seed.txt" 2>&1
  echo "ncu exit $?"; grep -E "Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Shared Memory Configuration|Issue Slots Busy|Stall|One or More|Bank" "$OUT/ncu_auto_seed.txt" | head -30
fi
