#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/, clang with ASan and UBSan) and
# runs each for SECONDS (default 60) from its committed seed corpus; fails on
# the first finding (a crash, a sanitizer report, a leak, a timeout or an
# out-of-memory), leaving the input that caused it in build-fuzz/findings/.
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 1800 gguf
# New corpus entries go to build-fuzz/corpus/ (not the committed seeds).
# FLASHSCOPE_FUZZ_BUILD overrides the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(gguf model tokenizer trace npy conversation chat_template)
build=${FLASHSCOPE_FUZZ_BUILD:-build-fuzz}
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[[ -n $cxx && -n $cc ]] || { echo "fuzz.sh: clang is not installed (scripts/install_deps.sh)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target "${harnesses[@]/#/fuzz_}"

mkdir -p "$build/findings"
# Sanitizer reports abort the run (libFuzzer then saves the input); leaks count.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for h in "${harnesses[@]}"; do
  corpus="$build/corpus/$h"
  mkdir -p "$corpus"
  log="$build/fuzz_$h.log"
  echo "fuzz: $h for ${seconds}s"
  # -rss_limit_mb: a file may not make a reader take more than 2 GB; -timeout:
  # nor one input take 10 s.
  if "$build/fuzz_$h" "$corpus" "tests/fuzz/corpus/$h" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$build/findings/${h}-" >"$log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^Done [0-9]+ runs" "$log" | tail -1 | sed "s/^/  /"
  else
    echo "fuzz: $h FAILED; the log is $log, the input in $build/findings/" >&2
    grep -E "ERROR|runtime error|Test unit written" "$log" | head -5 >&2 || true
    failed+=("$h")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings (${harnesses[*]}, ${seconds}s each)"
