// The Hopper launch path (hopper_prefill_launch.cuh) with its probe hooks
// compiled in (GlobalTimerProbe), for the GPU trace capture: the production
// configurations only, a separate set of kernels the production ones carry
// no trace of. Built with FLASHSCOPE_KERNEL_PROBES; sm_90a only.
#include "kernels/hopper/hopper_prefill_launch.cuh"

namespace flashscope::kernels {

cudaError_t launch_prefill_hopper_probed(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                         const ProbeBuffers& probe, cudaStream_t stream) {
  constexpr HopperConfigs kSet = HopperConfigs::kProduction;
  return plan.type == ElemType::kFP16 ? launch_hopper_typed<__half, GlobalTimerProbe, kSet>(plan, p, &probe, stream)
                                      : launch_hopper_typed<__nv_bfloat16, GlobalTimerProbe, kSet>(plan, p, &probe, stream);
}

}  // namespace flashscope::kernels
