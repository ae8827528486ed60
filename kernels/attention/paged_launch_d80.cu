// Attention over the paged KV cache at head_dim 80 (paged_configs.cuh: the
// decode and the chunked-prefill tiles, plain, windowed and soft-capped),
// and with FLASHSCOPE_KERNEL_PROBES their probed twins: one translation unit
// per head_dim, so builds compile them side by side.
#include "kernels/attention/paged_configs.cuh"

namespace flashscope::kernels {

cudaError_t launch_paged_d80(ElemType type, bool causal, int mods, bool decode, const PagedKernelParams& p,
                             cudaStream_t stream, bool programmatic) {
  return launch_paged_dim_typed<80, NoProbe>(type, causal, mods, decode, p, stream, programmatic);
}

#if FLASHSCOPE_KERNEL_PROBES
cudaError_t launch_paged_d80_probed(ElemType type, bool causal, int mods, bool decode,
                                      const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t stream) {
  return launch_paged_dim_typed<80, GlobalTimerProbe>(type, causal, mods, decode, p, stream, false);
}
#endif

}  // namespace flashscope::kernels
