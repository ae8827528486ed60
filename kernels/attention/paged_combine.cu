// Split-KV combine (flash-decoding's second step) and the paged launch entry.
//
// Each split s of a row produced its own normalized output o_s and its
// log-sum-exp lse_s over its keys. The row's softmax over all keys is then
//   lse = M + ln Σ_s exp(lse_s − M),   o = Σ_s exp(lse_s − lse) · o_s
// with M = max_s lse_s for range safety; splits that saw no key have
// lse_s = −inf and weight 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/attention/paged_configs.cuh"
#include "kernels/attention/paged_launch.h"

namespace flashscope::kernels {

cudaError_t launch_paged_bf16(int, bool, bool, const PagedKernelParams&, cudaStream_t);
cudaError_t launch_paged_fp16(int, bool, bool, const PagedKernelParams&, cudaStream_t);

bool paged_uses_decode_tile(int rows_per_kv_head) { return rows_per_kv_head <= kPagedDecodeMaxRows; }
int paged_block_q(int rows) { return paged_uses_decode_tile(rows) ? PagedDecodeConfig<64>::kBlockQ : PagedPrefillConfig<64>::kBlockQ; }

cudaError_t launch_paged_attention(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                   cudaStream_t stream) {
  const bool decode = paged_uses_decode_tile(p.q_len * p.group);
  return type == ElemType::kFP16 ? launch_paged_fp16(head_dim, causal, decode, p, stream)
                                 : launch_paged_bf16(head_dim, causal, decode, p, stream);
}

namespace {

template <typename T>
__device__ T from_float(float x);
template <>
__device__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __half from_float(float x) { return __float2half_rn(x); }

// One block per output row (sequence, q-head, token); thread d owns column d.
//   o_partial   [splits, batch, q_heads, q_len, DIM] float
//   lse_partial [splits, batch, q_heads, q_len]       float
//   o           [batch, q_len, q_heads, DIM] through its strides
// The splits' lse values are staged in shared memory by one load each (a
// loop of dependent global loads per thread cost ~13 µs at 64 splits), and
// the weighted sum issues its partial-output loads eight at a time.
template <typename T, int DIM>
__global__ void __launch_bounds__(DIM) combine_kernel(const __grid_constant__ PagedKernelParams p) {
  __shared__ float lse_smem[kMaxPagedSplits];
  const int64_t rows = int64_t(p.batch) * p.q_heads * p.q_len;
  const int64_t row = blockIdx.x;  // (seq * q_heads + head) * q_len + token
  const int token = int(row % p.q_len);
  const int head = int((row / p.q_len) % p.q_heads);
  const int seq = int(row / (int64_t(p.q_len) * p.q_heads));
  const int d = threadIdx.x;
  const int splits = p.num_splits;

  for (int s = d; s < splits; s += DIM) lse_smem[s] = p.lse_partial[s * rows + row];
  __syncthreads();  // every split's lse is staged
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, lse_smem[s]);
  float sum = 0.0f, acc = 0.0f;
  if (m != -INFINITY) {
#pragma unroll 8
    for (int s = 0; s < splits; ++s) {
      const float w = __expf(lse_smem[s] - m);  // 0 for a split that saw no key (lse -inf)
      sum += w;
      acc += w * p.o_partial[(s * rows + row) * DIM + d];
    }
  }
  T* o = static_cast<T*>(p.o) + seq * p.o_batch_stride + token * p.o_seq_stride + head * p.o_head_stride;
  o[d] = from_float<T>(sum > 0.0f ? acc / sum : 0.0f);
  if (d == 0 && p.lse != nullptr) p.lse[row] = sum > 0.0f ? m + logf(sum) : -INFINITY;
}

template <typename T>
cudaError_t combine_typed(int head_dim, const PagedKernelParams& p, cudaStream_t stream) {
  const unsigned rows = unsigned(int64_t(p.batch) * p.q_heads * p.q_len);
  if (head_dim == 64) combine_kernel<T, 64><<<rows, 64, 0, stream>>>(p);
  else if (head_dim == 128) combine_kernel<T, 128><<<rows, 128, 0, stream>>>(p);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_paged_combine(ElemType type, int head_dim, const PagedKernelParams& p, cudaStream_t stream) {
  return type == ElemType::kFP16 ? combine_typed<__half>(head_dim, p, stream)
                                 : combine_typed<__nv_bfloat16>(head_dim, p, stream);
}

}  // namespace flashscope::kernels
