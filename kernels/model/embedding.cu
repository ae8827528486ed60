// Embedding gather: the first op of the forward pass.
//
//   ids   : [n] int32
//   table : [vocab, hidden] bf16 (token_embd, dequantized at load)
//   x     : [n, hidden] fp32, the residual stream (× scale: Gemma's √hidden)
//
// Grid: one CTA per token. The row is a few hundred to a few thousand
// elements, read once, with every thread's loads issued together.
//
// The first kernel of a step, launched plainly (after the copy of the step's
// inputs): it lets the first layer's programmatically launched GEMM start
// requesting its weights at once (pdl_launch_dependents; nothing before sm_90).
#include "kernels/common/ptx.cuh"
#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kBatch = 4;

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

__global__ void __launch_bounds__(kThreads) embedding_kernel(const __grid_constant__ EmbeddingKernelParams p) {
  const int t = blockIdx.x;
  pdl_wait();  // returns at once in a plain launch; kept so a programmatic one stays correct
  pdl_launch_dependents();
  const int32_t id = p.ids[t];
  float* x = p.x + int64_t(t) * p.hidden;
  if (id < 0 || id >= p.vocab) {
    for (int i = threadIdx.x; i < p.hidden; i += kThreads) x[i] = 0.0f;
    return;
  }
  const uint16_t* row = p.table + int64_t(id) * p.hidden;
  // kBatch loads in flight per thread before any store (a load-store loop
  // pays a memory round trip per element it visits).
  for (int base = threadIdx.x; base < p.hidden; base += kThreads * kBatch) {
    uint16_t v_rmem[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) v_rmem[j] = base + j * kThreads < p.hidden ? row[base + j * kThreads] : 0;
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (base + j * kThreads < p.hidden) x[base + j * kThreads] = bf16_bits_to_float(v_rmem[j]) * p.scale;
  }
}

}  // namespace

cudaError_t launch_embedding(const EmbeddingKernelParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  embedding_kernel<<<p.n, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
