// paged_attention() and plan_paged_attention(): validate, then hand the call
// to the backend the tensors live on.
#include "flashscope/paged_attention.hpp"

#include "attention/cpu/paged_attention_cpu.hpp"
#include "attention/cuda/paged_attention_cuda.hpp"

namespace flashscope {

Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (p.device == Device::kCpu) return PagedAttentionPlan{};  // no splits, no workspace
  return cuda::plan_paged_attention(p);
}

Status paged_attention(const PagedAttentionParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (p.device == Device::kCpu) return cpu::paged_attention(p);
  return cuda::paged_attention(p);
}

}  // namespace flashscope
