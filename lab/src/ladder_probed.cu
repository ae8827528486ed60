// The teaching ladder's v1..v4 with their probe hooks compiled in
// (GlobalTimerProbe), for the GPU trace capture: a separate set of kernels
// that only FLASHSCOPE_KERNEL_PROBES builds.
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::lab {

cudaError_t launch_ladder_probed(const kernels::PrefillLaunchPlan& plan, const kernels::PrefillKernelParams& params,
                                 const kernels::ProbeBuffers& probe, cudaStream_t stream) {
  kernels::GlobalTimerProbe::Params<kernels::PrefillKernelParams> p;
  static_cast<kernels::PrefillKernelParams&>(p) = params;
  p.longest_first_group = plan.longest_first_group;
  p.probe = probe;
  return kernels::launch_sm80_ladder<kernels::GlobalTimerProbe>(plan.version, plan.type, plan.head_dim, plan.causal,
                                                                p, stream);
}

}  // namespace flashscope::lab
