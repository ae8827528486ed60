// The gated activation of the feed-forward block (SwiGLU, or Gemma's GeGLU
// with tanh GELU), reading the fused gate/up GEMM output.
//
//   gu  : [rows, 2·ffn] fp32 (row stride gu_stride): gate in [0, ffn), up in [ffn, 2·ffn)
//   out : [rows, ffn] bf16 (row stride out_stride), the down GEMM's input
//   out[r][i] = bf16(f(gate) · up), f silu (cpu::swiglu's formula) or gelu_tanh
//
// Grid: (ceil(ffn / kThreads), rows); one element per thread. Programmatic
// on sm_90 like rmsnorm.cu's kernels: waits for gu's producer, then lets the
// down GEMM start requesting its weights.
#include <cuda_bf16.h>

#include "kernels/common/ptx.cuh"
#include "kernels/common/math.h"
#include "kernels/model/activation.cuh"
#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) swiglu_kernel(const __grid_constant__ SwigluKernelParams p) {
  const int r = blockIdx.y;
  const int i = blockIdx.x * kThreads + threadIdx.x;
  pdl_wait();
  pdl_launch_dependents();
  if (i >= p.ffn) return;
  const float* row = p.gu + int64_t(r) * p.gu_stride;
  const float g = row[i];
  const float u = row[p.ffn + i];
  p.out[int64_t(r) * p.out_stride + i] = __bfloat16_as_ushort(__float2bfloat16_rn(gated(p.activation, g, u)));
}

}  // namespace

cudaError_t launch_swiglu(const SwigluKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (p.rows <= 0 || p.ffn <= 0) return cudaSuccess;
  const dim3 grid(ceil_div(p.ffn, kThreads), p.rows);
  return launch_maybe_programmatic(swiglu_kernel, grid, dim3(kThreads), 0, stream, programmatic, p);
}

}  // namespace flashscope::kernels
