// Attention over the paged KV cache with its probe hooks compiled in
// (GlobalTimerProbe), for the GPU trace capture: the dispatch to each head_dim's
// probed kernels (paged_launch_d<D>.cu). Built with FLASHSCOPE_KERNEL_PROBES.
#include "kernels/attention/paged_configs.cuh"

namespace flashscope::kernels {

cudaError_t launch_paged_probed(ElemType type, int head_dim, bool causal, bool decode,
                                const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t stream) {
  const int mods = attn_mods(p);
  switch (head_dim) {
    case 32: return launch_paged_d32_probed(type, causal, mods, decode, p, stream);
    case 64: return launch_paged_d64_probed(type, causal, mods, decode, p, stream);
    case 80: return launch_paged_d80_probed(type, causal, mods, decode, p, stream);
    case 96: return launch_paged_d96_probed(type, causal, mods, decode, p, stream);
    case 128: return launch_paged_d128_probed(type, causal, mods, decode, p, stream);
    case 256: return launch_paged_d256_probed(type, causal, mods, decode, p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace flashscope::kernels
