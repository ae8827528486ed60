// Attention over the paged KV cache: the tile choice and the one launch
// path, production and probed (the probed instantiation lives in
// paged_launch_probed.cu).
#include "kernels/attention/paged_configs.cuh"
#include "kernels/attention/paged_launch.h"
#include "kernels/attention/probe_launch.h"

namespace flashscope::kernels {

bool paged_uses_decode_tile(int rows_per_kv_head) { return rows_per_kv_head <= kPagedDecodeMaxRows; }
int paged_block_q(int rows) {
  return paged_uses_decode_tile(rows) ? PagedDecodeConfig<64>::kBlockQ : PagedPrefillConfig<64>::kBlockQ;
}

namespace {
template <template <int> class Cfg>
KernelTiling config_tiling(int head_dim) {
  if (head_dim == 64) return {Cfg<64>::kBlockQ, Cfg<64>::kBlockKV, Cfg<64>::kWarps};
  return {Cfg<128>::kBlockQ, Cfg<128>::kBlockKV, Cfg<128>::kWarps};
}
}  // namespace

KernelTiling paged_tiling(int head_dim, bool decode_tile) {
  return decode_tile ? config_tiling<PagedDecodeConfig>(head_dim) : config_tiling<PagedPrefillConfig>(head_dim);
}

cudaError_t launch_paged_attention(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                   cudaStream_t stream, bool programmatic, const ProbeBuffers* probe) {
  const bool decode = paged_uses_decode_tile(p.q_len * p.group);
  if (probe != nullptr) {
#if FLASHSCOPE_KERNEL_PROBES
    GlobalTimerProbe::Params<PagedKernelParams> k;
    static_cast<PagedKernelParams&>(k) = p;
    k.probe = *probe;
    return launch_paged_probed(type, head_dim, causal, decode, k, stream);
#else
    return cudaErrorNotSupported;
#endif
  }
  return type == ElemType::kFP16 ? launch_paged_typed<__half>(head_dim, causal, decode, p, stream, programmatic)
                                 : launch_paged_typed<__nv_bfloat16>(head_dim, causal, decode, p, stream, programmatic);
}

}  // namespace flashscope::kernels
