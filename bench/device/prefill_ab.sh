#!/usr/bin/env bash
# `bench prefill` of several builds on the same shapes, interleaved, on the
# leased GPU (after `session.sh start` built "before" and "after").
#   CLIS="before after" ROUNDS=3 bash bench/device/prefill_ab.sh   -> $OUT/prefill_ab.jsonl
# CLIS: before / after, or paths to flashscope-cli binaries. SHAPES: one
# `bench prefill` argument string a line (default: the window shapes of
# issue #20 with dense controls).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=/tmp/w
cli_of() { case $1 in before | after) echo $W/$1/build/cli/flashscope-cli ;; *) echo "$1" ;; esac; }
default_shapes="--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 512
--batch 1 --q-heads 32 --kv-heads 8 --q-len 8192 --kv-len 8192 --head-dim 128 --causal --window 512
--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 1024
--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --causal --window 2048
--batch 1 --q-heads 16 --kv-heads 16 --q-len 16384 --kv-len 16384 --head-dim 128 --window 256
--batch 16 --q-heads 9 --kv-heads 3 --q-len 1024 --kv-len 1024 --head-dim 64 --causal
--batch 1 --q-heads 16 --kv-heads 16 --q-len 8192 --kv-len 8192 --head-dim 128 --causal"
mapfile -t shapes <<< "${SHAPES:-$default_shapes}"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for s in "${shapes[@]}"; do
    for name in ${CLIS:-before after}; do
      line=$($(cli_of "$name") bench prefill $s --kernel auto --iters "${ITERS:-30}" --json 2>&1 | tail -n 1)
      echo "{\"round\":$r,\"cli\":\"$name\",\"args\":\"$s\",\"out\":$line}"
    done
  done
done | tee -a "$OUT/prefill_ab.jsonl" | cut -c1-50
