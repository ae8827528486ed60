#!/usr/bin/env bash
# Regenerates cpu-example.fstrace: a causal GQA prefill captured by the CPU
# path with its probes (flashscope-cli trace prefill), the trace the app's
# headless tests replay. Inputs are seeded random bf16, so the numbers
# (masses, softmax states, probabilities) are the same every run; the times
# are whatever this machine measured.
#
# usage: assets/traces/make_cpu_example.sh [path/to/flashscope-cli]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cli=${1:-$here/../../build/cli/flashscope-cli}
"$cli" trace prefill --batch 1 --q-heads 8 --kv-heads 2 --q-len 512 --kv-len 512 --head-dim 64 --causal \
  --trace-head 1 --rows 0,40,63,64,130,250,384,511 --sample-tiles 7:0,7:7,5:3,2:2 --seed 7 \
  --out "$here/cpu-example.fstrace"
