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
template <typename Cfg>
KernelTiling tiling_of() {
  return {Cfg::kBlockQ, Cfg::kBlockKV, Cfg::kWarps};
}
template <template <int> class Cfg>
KernelTiling config_tiling(int head_dim) {
  switch (head_dim) {
    case 32: return tiling_of<Cfg<32>>();
    case 64: return tiling_of<Cfg<64>>();
    case 80: return tiling_of<Cfg<80>>();
    case 96: return tiling_of<Cfg<96>>();
    case 256: return tiling_of<Cfg<256>>();
    default: return tiling_of<Cfg<128>>();
  }
}
}  // namespace

KernelTiling paged_tiling(int head_dim, bool decode_tile) {
  return decode_tile ? config_tiling<PagedDecodeConfig>(head_dim) : config_tiling<PagedPrefillConfig>(head_dim);
}

cudaError_t launch_paged_attention(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                   cudaStream_t stream, bool programmatic, const ProbeBuffers* probe) {
  const bool decode = paged_uses_decode_tile(p.q_len * p.group);
  // One new token a sequence sits at kv_len - 1 and sees every key in the
  // cache: the causal mask would mask nothing the range check does not, so
  // the plain tile runs (the same bits, without a per-logit test).
  causal = causal && p.q_len > 1;
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
  // The mods come from the call's parameters (the runtime fills the window
  // only for windowed or soft-capped calls).
  const int mods = attn_mods(p);
  switch (head_dim) {
    case 32: return launch_paged_d32(type, causal, mods, decode, p, stream, programmatic);
    case 64: return launch_paged_d64(type, causal, mods, decode, p, stream, programmatic);
    case 80: return launch_paged_d80(type, causal, mods, decode, p, stream, programmatic);
    case 96: return launch_paged_d96(type, causal, mods, decode, p, stream, programmatic);
    case 128: return launch_paged_d128(type, causal, mods, decode, p, stream, programmatic);
    case 256: return launch_paged_d256(type, causal, mods, decode, p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace flashscope::kernels
