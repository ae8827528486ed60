// RMSNorm into bf16: the input of every GEMM that reads the residual stream.
//
//   x      : [rows, dim] fp32 (row stride x_stride)
//   weight : [dim] fp32
//   y      : [rows, dim] bf16 (row stride y_stride)
//   y[r][i] = bf16(x[r][i] · (1 / sqrt(Σ x[r]² / dim + eps)) · weight[i])
//
// The same formula and order as the CPU reference (cpu::rms_norm), with the
// sum of squares in fp32 (the CPU sums in double; for dim <= 8192 the two
// differ by ~1e-6 relative, far below the bf16 rounding of y).
//
// Grid: one CTA per row; each thread sums a strided slice, warps reduce with
// shuffles, one shared slot per warp finishes it.
#include <cuda_bf16.h>

#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const __grid_constant__ RmsNormKernelParams p) {
  __shared__ float warp_sums_smem[kWarps];
  const int r = blockIdx.x;
  const float* x = p.x + int64_t(r) * p.x_stride;
  uint16_t* y = p.y + int64_t(r) * p.y_stride;

  float ss = 0.0f;
  for (int i = threadIdx.x; i < p.dim; i += kThreads) ss += x[i] * x[i];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums_smem[warp] = ss;
  __syncthreads();  // every warp's partial sum is in shared memory before anyone reads them
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += warp_sums_smem[w];

  const float scale = 1.0f / sqrtf(total / float(p.dim) + p.eps);
  for (int i = threadIdx.x; i < p.dim; i += kThreads)
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i] * scale * p.weight[i]));
}

}  // namespace

cudaError_t launch_rms_norm(const RmsNormKernelParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  rms_norm_kernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
