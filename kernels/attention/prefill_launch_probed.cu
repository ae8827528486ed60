// The sm80 family's production kernels with their probe hooks compiled in
// (GlobalTimerProbe), for the GPU trace capture: launch_sm80_production
// (prefill_versions.cuh) once more, as a separate set of kernels the
// production ones carry no trace of. Built with FLASHSCOPE_KERNEL_PROBES.
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

cudaError_t launch_sm80_probed(int version, ElemType type, int head_dim, bool causal,
                               const GlobalTimerProbe::Params<PrefillKernelParams>& p, cudaStream_t stream) {
  return launch_sm80_production<GlobalTimerProbe>(version, type, head_dim, causal, p, stream);
}

}  // namespace flashscope::kernels
