// Attention over the paged KV cache with its probe hooks compiled in
// (GlobalTimerProbe), for the GPU trace capture: a separate instantiation of
// launch_paged_typed (paged_configs.cuh). Built with FLASHSCOPE_KERNEL_PROBES.
#include "kernels/attention/paged_configs.cuh"

namespace flashscope::kernels {

cudaError_t launch_paged_probed(ElemType type, int head_dim, bool causal, bool decode,
                                const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t stream) {
  return type == ElemType::kFP16 ? launch_paged_typed<__half, GlobalTimerProbe>(head_dim, causal, decode, p, stream)
                                 : launch_paged_typed<__nv_bfloat16, GlobalTimerProbe>(head_dim, causal, decode, p,
                                                                                        stream);
}

}  // namespace flashscope::kernels
