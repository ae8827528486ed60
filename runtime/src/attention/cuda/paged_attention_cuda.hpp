// The CUDA side of paged_attention(): the split plan and the launches. In a
// build without CUDA these report kUnsupported.
#pragma once

#include "flashscope/paged_attention.hpp"

namespace flashscope::cuda {

// p has passed validate().
Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams& p);
Status paged_attention(const PagedAttentionParams& p);

// Where paged_attention_unmerged left its result: with num_splits > 1 the
// split-KV partials o_partial [num_splits, partial_rows, head_dim] fp32 and
// lse_partial [num_splits, partial_rows] in p.workspace (partial row (seq ·
// q_heads + head) · q_len + token), not yet merged; with 1, p.o as usual.
struct UnmergedOutput {
  int num_splits = 1;
  const float* o_partial = nullptr;
  const float* lse_partial = nullptr;
  int64_t partial_rows = 0;
};
// paged_attention(p) without the split-KV combine kernel for calls of up to
// max_unmerged_splits splits: the caller merges the partials where it reads
// the output (the engine's decode step does it in its O projection,
// cuda::skinny_gemm with kSplitKv: one launch less per layer). With more
// splits the combine kernel merges them and out->num_splits is 1. p has
// passed validate(); out must not be null.
Status paged_attention_unmerged(const PagedAttentionParams& p, int max_unmerged_splits, UnmergedOutput* out);

}  // namespace flashscope::cuda

#if FLASHSCOPE_WITH_CUDA
#include "kernels/attention/prefill_params.h"

namespace flashscope::cuda {

// The kernels' plain parameters for p (validated) with num_splits KV splits,
// the partials in `workspace` (plan_paged_attention's workspace_bytes) when
// split. paged_attention() launches on them; so does the GPU trace capture.
kernels::PagedKernelParams paged_kernel_params(const PagedAttentionParams& p, int num_splits, void* workspace);

}  // namespace flashscope::cuda
#endif
