// The Hopper launch path's window and soft-cap kernels (EXTRAS in
// hopper_prefill_kernel.cuh): the production configurations, bf16 and fp16,
// causal on/off, dense tensors through TMA, no probes. A translation unit of
// their own, so the kernels without them compile (and keep their code) as
// before, and the two build side by side. sm_90a only.
#include "kernels/hopper/hopper_prefill_launch.cuh"

namespace flashscope::kernels {

cudaError_t launch_prefill_hopper_extras(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                         const HopperExtras& x, cudaStream_t stream) {
  constexpr HopperConfigs kSet = HopperConfigs::kProduction;
  return plan.type == ElemType::kFP16
             ? launch_hopper_typed<__half, NoProbe, kSet, /*kExtras=*/true>(plan, p, nullptr, stream, x)
             : launch_hopper_typed<__nv_bfloat16, NoProbe, kSet, /*kExtras=*/true>(plan, p, nullptr, stream, x);
}

}  // namespace flashscope::kernels
