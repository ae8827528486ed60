#!/usr/bin/env bash
# Weights kept in their GGUF blocks on the GPU (#21), in one call on the GPU
# machine: build for sm_90a, the quantized paths' tests (the block reader,
# the few-row GEMM against the CPU, the engine's logits against bf16), the
# few-row GEMM's microbenchmark (bench/quant_gemm_sweep.sh), then end to end
# bf16 against quantized on SmolLM2-135M and Gemma-3-270M (where
# assets/models has them: scripts/fetch_model.sh) and on
# random-weight models of Llama-3.2-1B, Qwen3-1.7B (Q4_K_M and Q8_0),
# Qwen3-0.6B and Gemma-3-270M's shapes (Q4_K_M).
# Logs and tables under $OUT.
#   usage: bash bench/gpu_quant_run.sh [tests|sweep|e2e|all]   (default all)
# Each part takes a few minutes after the first build; where one command may
# run 10 minutes, run the parts as separate calls (the build is kept).
# The machine has no doctest package: carry the header in .device-carry/doctest/.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/flashscope-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv | tee "$OUT/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DFLASHSCOPE_DOCTEST_INCLUDE_DIR="$PWD/.device-carry" >"$OUT/build.log" 2>&1 &&
  ninja -C build-gpu -j16 flashscope-tests flashscope-cli >>"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cli=build-gpu/cli/flashscope-cli

if [[ $what == tests || $what == all ]]; then
  build-gpu/tests/flashscope-tests --duration=true \
    -tc="quant blocks*,quant gemm gpu*,quant gemv*,cuda quant*,skinny gemm*,cuda families*,cuda model: the fused few-token*,dequant*,synthetic models*,make-model*" \
    >"$OUT/quant_tests.log" 2>&1
  echo "tests exit $?"; grep -E "^\[doctest\] (test cases|assertions)|ERROR|FAILED" "$OUT/quant_tests.log" | head -30
fi

if [[ $what == sweep || $what == all ]]; then
  OUT="$OUT" bash bench/quant_gemm_sweep.sh >"$OUT/quant_gemm_sweep.log" 2>&1
  echo "sweep exit $?"; cat "$OUT/quant_gemm_sweep.md"
fi

if [[ $what == e2e || $what == all ]]; then
  # The generated models (0.2-0.8 GB each) stay out of $OUT: they are not results.
  gen=${MODELS_DIR:-/tmp/flashscope-models}
  mkdir -p "$gen"
  models=()
  for f in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
    [[ -f assets/models/$f ]] && models+=("assets/models/$f")
  done
  for preset in llama3.2-1b qwen3-1.7b qwen3-0.6b gemma3-270m; do
    for type in q4_k_m q8_0; do
      [[ $type == q8_0 && $preset != llama3.2-1b && $preset != qwen3-1.7b ]] && continue  # #21's shapes only
      f=$gen/$preset-$type.gguf
      [[ -f $f ]] || $cli make-model --out "$f" --preset $preset --type $type
      [[ -f $f ]] && models+=("$f")
    done
  done
  for m in "${models[@]}"; do
    for w in bf16 quantized; do
      $cli bench e2e -m "$m" --weights "$w" --batch 1,8 --runs 5 2>&1 | tee -a "$OUT/quant_e2e.txt"
    done
    # The int8 GEMV (kernels/model/quant_gemv_q8.cuh) for steps of 1-8 rows, and for 1-row steps only
    # (the tiles above: the sweep's split), beside the default above.
    for q8 in q8 q8:1; do
      echo "## FLASHSCOPE_QUANT_GEMV=$q8" | tee -a "$OUT/quant_e2e.txt"
      FLASHSCOPE_QUANT_GEMV=$q8 $cli bench e2e -m "$m" --weights quantized --batch 1,8 --runs 5 2>&1 |
        tee -a "$OUT/quant_e2e.txt"
    done
  done
fi
