// Host entry to attention over the paged KV cache and to the split-KV
// combine; the runtime validates and plans before calling these.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_params.h"

namespace flashscope::kernels {

// Two tile shapes: a one-warp CTA of 16 rows for decode (the q-heads of a
// kv-head times q_len rarely exceed 64 rows, and decode is bound by reading
// pages, not by math), and the 128-row prefill tile for chunked prefill.
bool paged_uses_decode_tile(int rows_per_kv_head);

// The most KV splits one call may use (the combine stages their lse values in
// shared memory).
inline constexpr int kMaxPagedSplits = 64;
int paged_block_q(int rows_per_kv_head);

cudaError_t launch_paged_attention(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                   cudaStream_t stream);

// Merges p.num_splits partial results into p.o (and p.lse).
cudaError_t launch_paged_combine(ElemType type, int head_dim, const PagedKernelParams& p, cudaStream_t stream);

}  // namespace flashscope::kernels
