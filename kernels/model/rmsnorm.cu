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
//
// add_rms_norm (Gemma's post-norms): x[r] += rms_norm(y[r]) · post_weight
// (or x[r] = x_in[r] + ..., the residual read from another buffer),
// then optionally xn[r] = bf16(rms_norm(x[r]) · next_weight), the next
// block's pre-norm, in the same CTA. Each thread reads back only the x
// elements it wrote itself, so the second sum needs no barrier beyond the
// reduction's.
//
// Programmatic dependent launch (sm_90): both kernels may be scheduled while
// the kernel before them finishes; each waits for it (pdl_wait) before its
// first read of x or y and at once lets the next kernel start its own
// prologue (a skinny GEMM's weight requests), which waits for this grid in turn.
#include <cuda_bf16.h>

#include "kernels/common/ptx.cuh"
#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Σ over the CTA of every thread's ss, in every thread. warp_sums_smem is
// free again when this returns (a second call may follow).
__device__ __forceinline__ float cta_sum(float ss, float* warp_sums_smem) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums_smem[warp] = ss;
  __syncthreads();  // every warp's partial sum is in shared memory before anyone reads them
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += warp_sums_smem[w];
  __syncthreads();  // every thread has read the sums before a next call overwrites them
  return total;
}

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const __grid_constant__ RmsNormKernelParams p) {
  __shared__ float warp_sums_smem[kWarps];
  const int r = blockIdx.x;
  const float* x = p.x + int64_t(r) * p.x_stride;
  uint16_t* y = p.y + int64_t(r) * p.y_stride;
  pdl_wait();  // x is the previous kernel's output
  pdl_launch_dependents();

  float ss = 0.0f;
  for (int i = threadIdx.x; i < p.dim; i += kThreads) ss += x[i] * x[i];
  const float total = cta_sum(ss, warp_sums_smem);

  const float scale = 1.0f / sqrtf(total / float(p.dim) + p.eps);
  for (int i = threadIdx.x; i < p.dim; i += kThreads)
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i] * scale * p.weight[i]));
}

__global__ void __launch_bounds__(kThreads) add_rms_norm_kernel(const __grid_constant__ AddRmsNormKernelParams p) {
  __shared__ float warp_sums_smem[kWarps];
  const int r = blockIdx.x;
  const float* y = p.y + int64_t(r) * p.y_stride;
  float* x = p.x + int64_t(r) * p.x_stride;
  const float* x_in = p.x_in != nullptr ? p.x_in + int64_t(r) * p.x_in_stride : x;
  pdl_wait();  // y is the previous kernel's output; x is written below (after every earlier reader finished)
  pdl_launch_dependents();

  float ss = 0.0f;
  for (int i = threadIdx.x; i < p.dim; i += kThreads) ss += y[i] * y[i];
  const float y_scale = 1.0f / sqrtf(cta_sum(ss, warp_sums_smem) / float(p.dim) + p.eps);
  float ss_x = 0.0f;
  for (int i = threadIdx.x; i < p.dim; i += kThreads) {
    const float v = x_in[i] + y[i] * y_scale * p.post_weight[i];
    x[i] = v;
    ss_x += v * v;
  }
  if (p.next_weight == nullptr) return;  // uniform over the CTA: no thread is left at a barrier
  const float x_scale = 1.0f / sqrtf(cta_sum(ss_x, warp_sums_smem) / float(p.dim) + p.eps);
  uint16_t* xn = p.xn + int64_t(r) * p.xn_stride;
  for (int i = threadIdx.x; i < p.dim; i += kThreads)
    xn[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i] * x_scale * p.next_weight[i]));
}

}  // namespace

cudaError_t launch_add_rms_norm(const AddRmsNormKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (p.rows <= 0) return cudaSuccess;
  return launch_maybe_programmatic(add_rms_norm_kernel, dim3(p.rows), dim3(kThreads), 0, stream, programmatic, p);
}

cudaError_t launch_rms_norm(const RmsNormKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (p.rows <= 0) return cudaSuccess;
  return launch_maybe_programmatic(rms_norm_kernel, dim3(p.rows), dim3(kThreads), 0, stream, programmatic, p);
}

}  // namespace flashscope::kernels
