#!/usr/bin/env bash
# O through the Q slot (hopper_layout.cuh's kOThroughQSlot) on the short
# causal D64 tiles: after (this tree: on) against a build of the same tree
# with it off (FLASHSCOPE_HOPPER_SHORT64_O_THROUGH_Q_SLOT=0), each a build
# folder of its own (its own libflashscope.so). The window tiles take it in
# both.
#   bash bench/device/o_through_q_slot.sh start   (after `session.sh start`: the off build, in the background)
#   bash bench/device/o_through_q_slot.sh time    (waits for it, then ROUNDS interleaved rounds -> $OUT/o_through_q_slot.jsonl)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
W=/tmp/w
C=$(cd "$(dirname "$0")/../.." && pwd)/.device-carry
case $1 in
  start)
    rm -f $W/b-off.rc
    setsid nohup bash -c "cmake -S $W/after/src -B $W/b-off -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_PREFIX_PATH=$C/prefix -DFLASHSCOPE_BUILD_APP=OFF \
      -DFLASHSCOPE_BUILD_TESTS=OFF '-DCMAKE_CUDA_FLAGS=-DFLASHSCOPE_HOPPER_SHORT64_O_THROUGH_Q_SLOT=0' &&
      ninja -C $W/b-off -j${JV:-5} flashscope-cli; echo \$? > $W/b-off.rc" > $W/b-off.log 2>&1 < /dev/null &
    ;;
  time)
    for i in $(seq 1 120); do [[ -f $W/b-off.rc ]] && break; sleep 5; done
    echo "off build: rc $(cat $W/b-off.rc 2>/dev/null)"; tail -n 2 $W/b-off.log
    shapes=(
      "--batch 16 --q-heads 9 --kv-heads 3 --q-len 1024 --kv-len 1024 --head-dim 64 --causal"
      "--batch 1 --q-heads 9 --kv-heads 3 --q-len 512 --kv-len 512 --head-dim 64 --causal"
      "--batch 4 --q-heads 9 --kv-heads 3 --q-len 256 --kv-len 256 --head-dim 64 --causal"
      "--batch 4 --q-heads 16 --kv-heads 16 --q-len 1024 --kv-len 1024 --head-dim 64 --causal"
      "--batch 4 --q-heads 16 --kv-heads 16 --q-len 4096 --kv-len 4096 --head-dim 64 --causal"
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 512"
      "--batch 1 --q-heads 32 --kv-heads 8 --q-len 8192 --kv-len 8192 --head-dim 128 --causal --window 512"
      "--batch 1 --q-heads 16 --kv-heads 16 --q-len 8192 --kv-len 8192 --head-dim 128 --causal"
    )
    for r in $(seq 1 ${ROUNDS:-3}); do
      for s in "${shapes[@]}"; do
        for c in $W/after/build/cli/flashscope-cli $W/b-off/cli/flashscope-cli; do
          [[ -x $c ]] || continue
          line=$($c bench prefill $s --kernel auto --iters 30 --json 2>&1 | tail -n 1)
          echo "{\"round\":$r,\"cli\":\"$c\",\"args\":\"$s\",\"out\":$line}"
        done
      done
    done | tee -a $OUT/o_through_q_slot.jsonl | cut -c1-40
    ;;
esac
