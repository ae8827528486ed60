#!/usr/bin/env bash
# Builds bench/quant_gemm_sweep.cu beside the kernel it times and runs it on
# the GPU machine: the quantized few-row GEMM against bf16 and cuBLAS, per
# format and row count (a markdown table on stdout, also in
# $OUT/quant_gemm_sweep.md), twice: as the library builds the quantized
# kernel and without its register cap. ARCH=80 for an A100; default sm_90a
# (H100/H200).
#   usage: bash bench/quant_gemm_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${ARCH:-90a}
out=${OUT:-/tmp}
mkdir -p build-bench "$out"
# The library's build, and the quantized kernel without its register cap
# (FLASHSCOPE_QUANT_GEMM_MIN_CTAS=1, skinny_gemm.cu says why) for an A/B in
# the same run; the second build also gives the int8 GEMV 2 CTAs an SM
# instead of 4 (FLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM, quant_gemv_q8.cuh).
pids=()
for cap in 3 1; do
  q8_ctas=$([ $cap = 3 ] && echo 4 || echo 2)
  nvcc -std=c++17 -O3 -I. --expt-relaxed-constexpr -gencode=arch=compute_${arch},code=sm_${arch} \
    -DFLASHSCOPE_QUANT_GEMM_MIN_CTAS=$cap -DFLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM=$q8_ctas \
    bench/quant_gemm_sweep.cu kernels/model/skinny_gemm.cu -lcublas -o build-bench/quant_gemm_sweep_cap$cap &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done  # set -e: a failed build stops here
{
  echo "# FLASHSCOPE_QUANT_GEMM_MIN_CTAS=3, FLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM=4 (the library's build)"
  build-bench/quant_gemm_sweep_cap3
  echo
  echo "# FLASHSCOPE_QUANT_GEMM_MIN_CTAS=1 (no register cap), FLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM=2: only the quantized columns differ"
  build-bench/quant_gemm_sweep_cap1
} | tee "$out/quant_gemm_sweep.md"
