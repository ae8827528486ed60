// The teaching ladder's v1..v4 (kernels/attention/prefill_versions.cuh),
// instantiated here rather than in the embeddable library, and installed
// into the library's sm80 launch path when the program starts: plans of
// versions 1..4 launch through launch_ladder, with or without probes.
#include "flashscope_lab/lab.hpp"
#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::lab {

cudaError_t launch_ladder_probed(const kernels::PrefillLaunchPlan& plan, const kernels::PrefillKernelParams& p,
                                 const kernels::ProbeBuffers& probe, cudaStream_t stream);

namespace {

cudaError_t launch_ladder(const kernels::PrefillLaunchPlan& plan, const kernels::PrefillKernelParams& params,
                          const kernels::ProbeBuffers* probe, cudaStream_t stream) {
  if (probe != nullptr) return launch_ladder_probed(plan, params, *probe, stream);
  kernels::PrefillKernelParams p = params;
  p.longest_first_group = plan.longest_first_group;
  return kernels::launch_sm80_ladder<kernels::NoProbe>(plan.version, plan.type, plan.head_dim, plan.causal, p,
                                                       stream);
}

const bool g_installed = (kernels::install_sm80_ladder(&launch_ladder), true);

}  // namespace

bool ladder_available() { return g_installed; }

#if !FLASHSCOPE_KERNEL_PROBES
cudaError_t launch_ladder_probed(const kernels::PrefillLaunchPlan&, const kernels::PrefillKernelParams&,
                                 const kernels::ProbeBuffers&, cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

}  // namespace flashscope::lab
