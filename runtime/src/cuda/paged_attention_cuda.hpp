// The CUDA side of paged_attention(): the split plan and the launches. In a
// build without CUDA these report kUnsupported.
#pragma once

#include "flashscope/paged_attention.hpp"

namespace flashscope::cuda {

// p has passed validate().
Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams& p);
Status paged_attention(const PagedAttentionParams& p);

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
