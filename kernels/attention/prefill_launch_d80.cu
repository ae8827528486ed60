// The sm80 production kernels at head_dim 80 (prefill_versions.cuh:
// sm80_instantiated lists which), plain and, with FLASHSCOPE_KERNEL_PROBES,
// probed: one translation unit per head_dim, so builds compile them side by side.
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

cudaError_t launch_sm80_d80(int version, ElemType type, bool causal, int mods, const PrefillKernelParams& p,
                            cudaStream_t stream) {
  return launch_sm80_dim<80, NoProbe>(version, type, causal, mods, p, stream);
}

#if FLASHSCOPE_KERNEL_PROBES
cudaError_t launch_sm80_d80_probed(int version, ElemType type, bool causal, int mods,
                                     const GlobalTimerProbe::Params<PrefillKernelParams>& p, cudaStream_t stream) {
  return launch_sm80_dim<80, GlobalTimerProbe>(version, type, causal, mods, p, stream);
}
#endif

}  // namespace flashscope::kernels
