// The CUDA side of paged_attention(): the split plan and the launches. In a
// build without CUDA these report kUnsupported.
#pragma once

#include "flashscope/paged_attention.hpp"

namespace flashscope::cuda {

// p has passed validate().
Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams& p);
Status paged_attention(const PagedAttentionParams& p);

}  // namespace flashscope::cuda
