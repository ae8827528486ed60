// Tile configurations of attention over the paged KV cache (see paged_launch.h).
#pragma once

#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

// Decode: one warp, 16 rows (the kv-head's q-heads x new tokens), 64-key
// tiles, v5's pipeline; small CTAs so many sequences and splits are in flight.
// At head_dim 128 the 64-key tile's copy loop (32 chunks per lane per
// matrix) plus the accumulators overflow one warp's registers: 32-key tiles,
// and 96 and 80 alike (32 takes 64's tile; both untuned). At 256 the
// accumulator alone is 128 registers per lane: Q in shared memory and 16-key
// tiles (the same 16 chunks per lane as 128's).
// Q in registers elsewhere, not in its own shared-memory region (so K/V
// loads would start with Q's): bench/TUNING.md#paged-decode.
template <int D>
using PagedDecodeConfig =
    std::conditional_t<D == 256, PrefillConfig<256, 16, 16, 1, true, Pipeline::kK2V1, true, true, 1>,
                       PrefillConfig<D, 16, D <= 64 ? 64 : 32, 1, true, Pipeline::kK2V1, true, false, 1>>;
// Chunked prefill over the cache: v5's tile (at 256, v5's own).
template <int D>
using PagedPrefillConfig =
    std::conditional_t<D == 256, PrefillV5<256>,
                       PrefillConfig<D, 128, 64, 8, true, Pipeline::kK2V1, true, false, kMinBlocks<D>>>;

constexpr int kPagedDecodeMaxRows = 64;

// causal and mods (attn_mods(p), prefill_versions.cuh) as template constants.
template <typename Cfg, typename T, typename Probe>
cudaError_t launch_paged_cfg(bool causal, int mods, const typename Probe::template Params<PagedKernelParams>& p,
                             cudaStream_t stream, bool programmatic) {
  switch (mods) {
    case kModNone:
      return causal ? launch_paged<Cfg, T, true, Probe>(p, stream, programmatic)
                    : launch_paged<Cfg, T, false, Probe>(p, stream, programmatic);
    case kModWindow: return launch_paged<Cfg, T, false, Probe, kModWindow>(p, stream, programmatic);
    case kModWindow | kModSoftcap:
      return launch_paged<Cfg, T, false, Probe, kModWindow | kModSoftcap>(p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

// One head_dim's kernels: the decode or the prefill tile.
template <int D, typename T, typename Probe>
cudaError_t launch_paged_dim(bool causal, int mods, bool decode,
                             const typename Probe::template Params<PagedKernelParams>& p, cudaStream_t stream,
                             bool programmatic) {
  return decode ? launch_paged_cfg<PagedDecodeConfig<D>, T, Probe>(causal, mods, p, stream, programmatic)
                : launch_paged_cfg<PagedPrefillConfig<D>, T, Probe>(causal, mods, p, stream, programmatic);
}

// One head_dim's kernels, both dtypes, each head_dim its own translation
// unit (paged_launch_d<D>.cu, with its probed twin where
// FLASHSCOPE_KERNEL_PROBES builds them), compiled side by side.
template <int D, typename Probe>
cudaError_t launch_paged_dim_typed(ElemType type, bool causal, int mods, bool decode,
                                   const typename Probe::template Params<PagedKernelParams>& p, cudaStream_t stream,
                                   bool programmatic) {
  return type == ElemType::kFP16
             ? launch_paged_dim<D, __half, Probe>(causal, mods, decode, p, stream, programmatic)
             : launch_paged_dim<D, __nv_bfloat16, Probe>(causal, mods, decode, p, stream, programmatic);
}
#define FLASHSCOPE_PAGED_DIM_ENTRY(D)                                                                          \
  cudaError_t launch_paged_d##D(ElemType type, bool causal, int mods, bool decode, const PagedKernelParams& p, \
                                cudaStream_t stream, bool programmatic);                                      \
  cudaError_t launch_paged_d##D##_probed(ElemType type, bool causal, int mods, bool decode,                   \
                                         const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t stream);
FLASHSCOPE_PAGED_DIM_ENTRY(32)
FLASHSCOPE_PAGED_DIM_ENTRY(64)
FLASHSCOPE_PAGED_DIM_ENTRY(80)
FLASHSCOPE_PAGED_DIM_ENTRY(96)
FLASHSCOPE_PAGED_DIM_ENTRY(128)
FLASHSCOPE_PAGED_DIM_ENTRY(256)
#undef FLASHSCOPE_PAGED_DIM_ENTRY

// The probed kernels (paged_launch_probed.cu; FLASHSCOPE_KERNEL_PROBES builds).
cudaError_t launch_paged_probed(ElemType type, int head_dim, bool causal, bool decode,
                                const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t stream);

}  // namespace flashscope::kernels
