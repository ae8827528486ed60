#!/usr/bin/env bash
# Builds bench/quant_gemm_sweep.cu beside the kernel it times and runs it on
# the GPU machine: the quantized few-row GEMM against bf16 and cuBLAS, per
# format and row count (a markdown table on stdout, also in
# $OUT/quant_gemm_sweep.md). ARCH=80 for an A100; default sm_90a (H100/H200).
#   usage: bash bench/quant_gemm_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${ARCH:-90a}
out=${OUT:-/tmp}
mkdir -p build-bench "$out"
nvcc -std=c++17 -O3 -I. --expt-relaxed-constexpr -gencode=arch=compute_${arch},code=sm_${arch} \
  bench/quant_gemm_sweep.cu kernels/model/skinny_gemm.cu -lcublas -o build-bench/quant_gemm_sweep
build-bench/quant_gemm_sweep | tee "$out/quant_gemm_sweep.md"
