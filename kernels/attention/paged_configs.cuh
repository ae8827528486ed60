// Tile configurations of attention over the paged KV cache (see paged_launch.h).
#pragma once

#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

// Decode: one warp, 16 rows (the kv-head's q-heads x new tokens), 64-key
// tiles, v5's pipeline; small CTAs so many sequences and splits are in flight.
// At head_dim 128 the 64-key tile's copy loop (32 chunks per lane per
// matrix) plus the accumulators overflow one warp's registers: 32-key tiles.
// Q in registers, not in its own shared-memory region (so K/V loads would
// start with Q's): bench/TUNING.md#paged-decode.
template <int D>
using PagedDecodeConfig = PrefillConfig<D, 16, D == 128 ? 32 : 64, 1, true, Pipeline::kK2V1, true, false, 1>;
// Chunked prefill over the cache: v5's tile.
template <int D>
using PagedPrefillConfig = PrefillConfig<D, 128, 64, 8, true, Pipeline::kK2V1, true, false, kMinBlocks<D>>;

constexpr int kPagedDecodeMaxRows = 64;

template <typename Cfg, typename T, typename Probe>
cudaError_t launch_paged_cfg(bool causal, const typename Probe::template Params<PagedKernelParams>& p,
                             cudaStream_t stream, bool programmatic) {
  return causal ? launch_paged<Cfg, T, true, Probe>(p, stream, programmatic)
                : launch_paged<Cfg, T, false, Probe>(p, stream, programmatic);
}

// Runtime head_dim, causal and tile choice -> template constants: NoProbe in
// paged_launch.cu, GlobalTimerProbe in paged_launch_probed.cu.
template <typename T, typename Probe = NoProbe>
cudaError_t launch_paged_typed(int head_dim, bool causal, bool decode,
                               const typename Probe::template Params<PagedKernelParams>& p, cudaStream_t stream,
                               bool programmatic = false) {
  if (head_dim == 64)
    return decode ? launch_paged_cfg<PagedDecodeConfig<64>, T, Probe>(causal, p, stream, programmatic)
                  : launch_paged_cfg<PagedPrefillConfig<64>, T, Probe>(causal, p, stream, programmatic);
  if (head_dim == 128)
    return decode ? launch_paged_cfg<PagedDecodeConfig<128>, T, Probe>(causal, p, stream, programmatic)
                  : launch_paged_cfg<PagedPrefillConfig<128>, T, Probe>(causal, p, stream, programmatic);
  return cudaErrorInvalidValue;
}

// The probed instantiation (paged_launch_probed.cu; FLASHSCOPE_KERNEL_PROBES builds).
cudaError_t launch_paged_probed(ElemType type, int head_dim, bool causal, bool decode,
                                const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t stream);

}  // namespace flashscope::kernels
