#!/usr/bin/env bash
# Where a batch-1 decode step's time goes, kernel by kernel, on the GPU
# machine (bench/device/README.md). Two ncu passes over `generate`:
#   1. every launch of the last decode steps with the GPU's own clocks and a
#      warm L2 (--clock-control none --cache-control none): each kernel's
#      duration and DRAM bytes as the step sees them, except that ncu runs
#      the launches one at a time (no programmatic overlap); the sum beside
#      `bench e2e`'s step time is what the overlap and the gaps are worth.
#   2. the int8 GEMV's launches of one step with the warp-state, occupancy
#      and memory sections: why its warps wait.
# Then bench/ncu_decode_step.py turns the CSVs into tables.
#   usage: CLI=path MODEL=path [STEPS=4] bash bench/device/ncu_decode_step.sh  -> $OUT/ncu-*.csv
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# ncu with the options after N over `generate` of N tokens.
profile() {
  local n=$1
  shift
  ncu "$@" "$CLI" generate -m "$MODEL" -p "The capital of France is" -n "$n" --temp 0 --device cuda
}
profile "${STEPS:-4}" --graph-profiling node --clock-control none --cache-control none --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
  > "$OUT/ncu-times.csv" 2> "$OUT/ncu-times.err"
echo "pass 1 exit $? ($(grep -c '"gpu__time_duration.sum"' "$OUT/ncu-times.csv") kernel rows)"
# Every int8 GEMV launch of two decode steps (the prompt's rows take the tiles, not this kernel).
profile 3 --graph-profiling node --clock-control none --cache-control none --csv --page details -k regex:quant_gemv_q8 \
  --section WarpStateStats --section Occupancy --section SpeedOfLight --section LaunchStats --section SchedulerStats \
  > "$OUT/ncu-gemv.csv" 2> "$OUT/ncu-gemv.err"
echo "pass 2 exit $?"
