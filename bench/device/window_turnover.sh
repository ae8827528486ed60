#!/usr/bin/env bash
# EXPERIMENT (branch wip/window-epilogue): the short-window tiles' turnover
# variants, all in after's one library, picked per run by
# FLASHSCOPE_WINDOW_TURNOVER (hopper_config.cuh): 0 main's, 1 O through the
# Q slot + TMA store, 2 the next work tile's S(0) in the last turn, 3 both.
#   bash .device-carry/window_turnover.sh tests   (the window and hopper cases under each variant)
#   bash .device-carry/window_turnover.sh time    (ROUNDS interleaved rounds -> $OUT/turnover.jsonl)
#   bash .device-carry/window_turnover.sh ncu V.. (source-level stall samples of the W512 kernel)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
W=/tmp/w
cli=$W/after/build/cli/flashscope-cli
step=$1
shift
case $step in
  tests)
    for v in 0 1 2 3; do
      (cd $W/after/src && FLASHSCOPE_WINDOW_TURNOVER=$v timeout 200 $W/after/build/tests/flashscope-tests \
        -tc='*window*,*hopper*' -tce='*CPU*,*cpu*,reference*') > $OUT/tests-v$v.log 2>&1
      echo "variant $v: exit $? $(grep -E '^\[doctest\] (test cases|assertions)' $OUT/tests-v$v.log | tr -s ' ' | tr '\n' ' ')"
      grep -E "ERROR|FAILED" $OUT/tests-v$v.log | head -5
    done
    ;;
  time)
    shapes=(
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 512"
      "--batch 1 --q-heads 32 --kv-heads 8 --q-len 8192 --kv-len 8192 --head-dim 128 --causal --window 512"
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 1024"
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 2048"
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --window 256"
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 8192 --kv-len 8192 --head-dim 128 --causal"
    )
    for r in $(seq 1 ${ROUNDS:-2}); do
      for s in "${shapes[@]}"; do
        for v in ${VARIANTS:-0 1 2 3}; do
          line=$(FLASHSCOPE_WINDOW_TURNOVER=$v $cli bench prefill $s --kernel auto --iters 30 --json 2>&1 | tail -n 1)
          echo "{\"round\":$r,\"variant\":$v,\"args\":\"$s\",\"out\":$line}"
        done
      done
    done | tee -a $OUT/turnover.jsonl | cut -c1-60
    ;;
  ncu)
    s="--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 512"
    for v in "$@"; do
      FLASHSCOPE_WINDOW_TURNOVER=$v timeout 240 /usr/local/cuda/bin/ncu --kernel-name regex:hopper_attention \
        --launch-skip 3 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
        --import-source no -o $OUT/ncu-v$v -f $cli bench prefill $s --kernel auto --iters 5 > $OUT/ncu-v$v.log 2>&1
      echo "ncu v$v: exit $?"
      /usr/local/cuda/bin/ncu -i $OUT/ncu-v$v.ncu-rep --page source --csv --print-source sass > $OUT/ncu-v$v-sass.csv 2>&1
      /usr/local/cuda/bin/ncu -i $OUT/ncu-v$v.ncu-rep --page details --print-details all > $OUT/ncu-v$v-details.txt 2>&1
      ls -la $OUT/ncu-v$v* | awk '{print $5, $9}'
    done
    ;;
esac
