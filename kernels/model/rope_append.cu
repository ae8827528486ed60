// RoPE fused with the K/V append: turns one layer's QKV GEMM output into the
// attention's inputs in one pass.
//
//   qkv      : [n, qkv_stride] fp32; q heads [H, D] at 0, k heads [KV, D] at
//              H·D, v heads [KV, D] at (H + KV)·D
//   cos, sin : [n, rope_dim / 2] fp32 (computed on the host in double, as
//              cpu::rope_table does)
//   slots    : [n] int64, page * page_size + offset (from PagedKvCache)
//   q_out    : [n, H, D] bf16, rotated      (row stride q_stride)
//   K, V     : [num_pages, KV, page_size, D] bf16; token t's head h row is
//              at ((page · KV + h) · page_size + offset) · D
//
// RoPE of llama GGUFs rotates consecutive pairs: (x[2i], x[2i+1]) by the
// angle pos · base^(-2i / rope_dim) for 2i < rope_dim; pairs past rope_dim
// are copied (partial rotary). Q and K are rotated in fp32 and rounded to
// bf16 once, like the CPU path (rope in float, then bf16 for the cache).
//
// Grid: one CTA per token. Work item j of a token is the pair j % (D/2) of
// head j / (D/2) over the H + 2·KV heads of the row: a warp covers 32
// consecutive pairs (256 contiguous bytes of qkv), each thread reads a
// float2 and writes one 32-bit bf16 pair.
#include <cuda_bf16.h>

#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const uint32_t a = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
  const uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  return a | (b << 16);
}

__global__ void __launch_bounds__(kThreads) rope_append_kernel(const __grid_constant__ RopeAppendKernelParams p) {
  const int t = blockIdx.x;
  const int half_d = p.head_dim / 2;
  const int rope_pairs = p.rope_dim / 2;
  const int64_t slot = p.slots[t];
  const bool write_kv = slot >= 0 && (p.num_slots <= 0 || slot < p.num_slots);
  const int64_t page = write_kv ? slot / p.page_size : 0;
  const int64_t offset = write_kv ? slot % p.page_size : 0;

  const float* row = p.qkv + int64_t(t) * p.qkv_stride;
  const float* cos_t = p.rope_cos + int64_t(t) * rope_pairs;
  const float* sin_t = p.rope_sin + int64_t(t) * rope_pairs;
  const int heads = p.q_heads + 2 * p.kv_heads;
  const int items = heads * half_d;
  for (int j = threadIdx.x; j < items; j += kThreads) {
    const int head = j / half_d;
    const int i = j % half_d;
    const float2 v = *reinterpret_cast<const float2*>(row + int64_t(head) * p.head_dim + 2 * i);
    float a = v.x, b = v.y;
    const bool is_v = head >= p.q_heads + p.kv_heads;
    if (!is_v && i < rope_pairs) {
      const float c = cos_t[i], s = sin_t[i];
      a = v.x * c - v.y * s;
      b = v.x * s + v.y * c;
    }
    const uint32_t packed = pack_bf16x2(a, b);
    if (head < p.q_heads) {
      *reinterpret_cast<uint32_t*>(p.q_out + int64_t(t) * p.q_stride + int64_t(head) * p.head_dim + 2 * i) = packed;
    } else if (write_kv) {
      const int kv_head = is_v ? head - p.q_heads - p.kv_heads : head - p.q_heads;
      const int64_t dst = ((page * p.kv_heads + kv_head) * p.page_size + offset) * p.head_dim + 2 * i;
      *reinterpret_cast<uint32_t*>((is_v ? p.v_pages : p.k_pages) + dst) = packed;
    }
  }
}

}  // namespace

cudaError_t launch_rope_append(const RopeAppendKernelParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  rope_append_kernel<<<p.n, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
