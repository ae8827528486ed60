#!/usr/bin/env bash
# A same-run A/B on the GPU machine: this tree ("after") against an older one
# ("before", a `git archive` tarball), both built for sm_90a outside the
# repository (/tmp) so a later call's copy of the tree does not wipe them.
#   usage: bash bench/gpu_ab.sh BEFORE.tar.gz STEP...   steps: build tests ab-prefill ab-rest
# The machine has no doctest or nlohmann-json: carry their headers and CMake
# configs in .device-carry/prefix (CMAKE_PREFIX_PATH). Logs go under $OUT.
set -uo pipefail
before_tar=$1; shift
OUT=${OUT:-/tmp/flashscope-ab}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
here=$PWD
prefix=$here/.device-carry/prefix
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
cli_before=/tmp/ab-before/build/cli/flashscope-cli
cli_after=/tmp/ab-after/build/cli/flashscope-cli

configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$prefix" -DFLASHSCOPE_BUILD_APP=OFF
}

for step in "$@"; do
  case $step in
    build)
      nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$OUT/gpu.txt"
      rm -rf /tmp/ab-before/src && mkdir -p /tmp/ab-before/src /tmp/ab-after
      tar xzf "$before_tar" -C /tmp/ab-before/src
      rm -rf /tmp/ab-after/src && cp -r "$here" /tmp/ab-after/src && rm -rf /tmp/ab-after/src/build*
      { configure /tmp/ab-before/src /tmp/ab-before/build && ninja -C /tmp/ab-before/build -j8; } \
        >"$OUT/build-before.log" 2>&1 &
      { configure /tmp/ab-after/src /tmp/ab-after/build && ninja -C /tmp/ab-after/build -j8; } \
        >"$OUT/build-after.log" 2>&1
      after_rc=$?
      wait $!; before_rc=$?
      echo "build: before rc $before_rc, after rc $after_rc"
      ((before_rc == 0)) || tail -30 "$OUT/build-before.log"
      ((after_rc == 0)) || { tail -60 "$OUT/build-after.log"; exit 1; }
      ;;
    tests)
      (cd /tmp/ab-after/src && /tmp/ab-after/build/tests/flashscope-tests --duration=true) >"$OUT/tests.log" 2>&1
      echo "tests exit $?"
      grep -E "^\[doctest\] (test cases|assertions)|ERROR|FAILED" "$OUT/tests.log" | head -30
      ;;
    ab-prefill)
      python3 bench/ab_builds.py --before $cli_before --after $cli_after --only prefill \
        --kernels "${AB_KERNELS:-auto,v5,v6}" --rounds "${AB_ROUNDS:-5}" --out "$OUT/ab-prefill.json" \
        | tee "$OUT/ab-prefill.md"
      ;;
    ab-rest)
      python3 bench/ab_builds.py --before $cli_before --after $cli_after --only decode,e2e ${AB_MODEL:+--model "$AB_MODEL"} \
        --rounds "${AB_ROUNDS:-5}" --out "$OUT/ab-rest.json" | tee "$OUT/ab-rest.md"
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
