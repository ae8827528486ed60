// append_kv: scatter new tokens' K and V rows into the paged KV pools.
//
//   k_new, v_new : [num_tokens, kv_heads, head_dim]  (strided, 2-byte elements)
//   slots        : [num_tokens]  int64 page * page_size + offset
//   k/v pages    : [num_pages, kv_heads, page_size, head_dim]
//
// Grid: one CTA per token (blockIdx.x). Each thread moves 16-byte vectors
// (8 elements) of K and V, vector i of the token being head i / vecs_per_head
// and chunk i % vecs_per_head along head_dim, so a warp reads and writes
// whole contiguous 128- or 256-byte head rows. The copy is pure data
// movement: no arithmetic, dtype-agnostic. Fused RoPE belongs here later.
//
// Skipped tokens: slot < 0 (padding of a fixed-size batch) and, when the
// pool size is known, slot >= num_slots (a bad slot cannot be reported from
// the kernel, so it is never written rather than written out of bounds).
#include "kernels/kv/append_kv.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 128;  // a head row is 8 (D=64) or 16 (D=128) vectors: 8..16 heads per pass
constexpr int kVecElems = 8;   // 16 bytes of 2-byte elements

__global__ void __launch_bounds__(kThreads) append_kv_kernel(const __grid_constant__ AppendKvKernelParams p) {
  const int token = blockIdx.x;
  const int64_t slot = p.slots[token];
  if (slot < 0 || (p.num_slots > 0 && slot >= p.num_slots)) return;
  const int64_t page = slot / p.page_size;  // once per CTA: not worth a shift
  const int64_t offset = slot % p.page_size;

  const int vecs_per_head = p.head_dim / kVecElems;
  const int vecs = p.kv_heads * vecs_per_head;
  const auto* k_src = static_cast<const uint16_t*>(p.k_new) + token * p.k_seq_stride;
  const auto* v_src = static_cast<const uint16_t*>(p.v_new) + token * p.v_seq_stride;
  auto* k_dst = static_cast<uint16_t*>(p.k_pages);
  auto* v_dst = static_cast<uint16_t*>(p.v_pages);
  for (int i = threadIdx.x; i < vecs; i += kThreads) {
    const int head = i / vecs_per_head;
    const int d = (i % vecs_per_head) * kVecElems;
    const int64_t dst = ((page * p.kv_heads + head) * p.page_size + offset) * p.head_dim + d;
    const uint4 k = *reinterpret_cast<const uint4*>(k_src + head * p.k_head_stride + d);
    const uint4 v = *reinterpret_cast<const uint4*>(v_src + head * p.v_head_stride + d);
    *reinterpret_cast<uint4*>(k_dst + dst) = k;
    *reinterpret_cast<uint4*>(v_dst + dst) = v;
  }
}

}  // namespace

cudaError_t launch_append_kv(const AppendKvKernelParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  append_kv_kernel<<<p.num_tokens, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
