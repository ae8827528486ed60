// The steps of gau-nernst's learn-cuda `07_attention` FlashAttention-2
// write-up (v1..v5) as configurations of prefill_kernel.cuh.
// Tiles: 128 query rows per CTA over 8 warps (16 rows, one m16 MMA tile, per
// warp: the accumulator of a 32-row warp tile would not fit registers at
// head_dim 128), KV tiles of 64 keys; v3/v4 use 32-key tiles as the seed
// does, since double-buffering both K and V doubles their shared memory.
//
// | version | swizzle | pipeline              | K/V ldmatrix | BLOCK_KV |
// | v1      | no      | serial                | x2           | 64       |
// | v2      | yes     | serial                | x2           | 64       |
// | v3      | yes     | K, V double-buffered  | x2           | 32       |
// | v4      | yes     | K, V double-buffered  | x4           | 32       |
// | v5      | yes     | K double, V single    | x4           | 64       |
// (v5 at head_dim 64: 4 warps of 32 rows, Q in shared memory; see below.)
// | v6      | yes     | K, V double; Q·K(t+1)ᵀ under softmax(t) | x4 | 64 |
// v6 goes beyond the seed: each warp computes the next tile's logits in the
// same instruction stream as this tile's softmax, so its own tensor-core work
// hides its exp2 and max/sum latency (FlashAttention-3's intra-warpgroup
// overlap, done with mma.sync).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/attention/prefill_kernel.cuh"
#include "kernels/attention/prefill_plan.h"

namespace flashscope::kernels {

// Registers decide occupancy: at head_dim 64 two CTAs (16 warps) fit in 128
// registers per thread; at 128 the O accumulator alone is 64 registers, so
// one CTA takes the register file.
template <int D>
constexpr int kMinBlocks = D == 64 ? 2 : 1;

template <int D>
using PrefillV1 = PrefillConfig<D, 128, 64, 8, false, Pipeline::kSerial, false, false, kMinBlocks<D>>;
template <int D>
using PrefillV2 = PrefillConfig<D, 128, 64, 8, true, Pipeline::kSerial, false, false, kMinBlocks<D>>;
template <int D>
using PrefillV3 = PrefillConfig<D, 128, 32, 8, true, Pipeline::kKV2, false, false, kMinBlocks<D>>;
template <int D>
using PrefillV4 = PrefillConfig<D, 128, 32, 8, true, Pipeline::kKV2, true, false, kMinBlocks<D>>;
// v5's tiles per head_dim (bench/tile_sweep.cu; bench/TUNING.md#sm80-prefill):
// at 64, four warps of 32 rows with Q re-read from shared memory and two
// CTAs per SM; at 128 that shape spills (the 32x128 accumulator is 128
// registers) and eight 16-row warps with Q in registers stay fastest.
template <int D>
using PrefillV5 = std::conditional_t<D == 64, PrefillConfig<64, 128, 64, 4, true, Pipeline::kK2V1, true, true, 2>,
                                     PrefillConfig<D, 128, 64, 8, true, Pipeline::kK2V1, true, false, 1>>;

template <int D>
using PrefillV6 = PrefillConfig<D, 128, 64, 8, true, Pipeline::kLookahead, true, false, kMinBlocks<D>>;

// Turns the runtime head_dim and causal flag into template constants for one
// version.
template <template <int> class Version, typename T, typename Probe>
cudaError_t launch_version(const typename Probe::template Params<PrefillKernelParams>& p, int head_dim, bool causal,
                           cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return causal ? launch_prefill<Version<64>, T, true, Probe>(p, stream)
                    : launch_prefill<Version<64>, T, false, Probe>(p, stream);
    case 128:
      return causal ? launch_prefill<Version<128>, T, true, Probe>(p, stream)
                    : launch_prefill<Version<128>, T, false, Probe>(p, stream);
    default:
      return cudaErrorInvalidValue;  // the runtime validates head_dim first
  }
}

// The family's instantiation lists, once each: the production kernels v5
// and v6 (bf16 and fp16), which the library instantiates (prefill_launch.cu,
// and with GlobalTimerProbe prefill_launch_probed.cu, a separate set that
// only FLASHSCOPE_KERNEL_PROBES builds); the teaching ladder's v1..v4 (bf16),
// which the kernel lab does (lab/src/ladder.cu). prefill_version_built
// follows them.
template <typename Probe>
cudaError_t launch_sm80_production(int version, ElemType type, int head_dim, bool causal,
                                   const typename Probe::template Params<PrefillKernelParams>& p, cudaStream_t stream) {
  const bool fp16 = type == ElemType::kFP16;
  switch (version) {
    case 5:
      return fp16 ? launch_version<PrefillV5, __half, Probe>(p, head_dim, causal, stream)
                  : launch_version<PrefillV5, __nv_bfloat16, Probe>(p, head_dim, causal, stream);
    case 6:
      return fp16 ? launch_version<PrefillV6, __half, Probe>(p, head_dim, causal, stream)
                  : launch_version<PrefillV6, __nv_bfloat16, Probe>(p, head_dim, causal, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename Probe>
cudaError_t launch_sm80_ladder(int version, ElemType type, int head_dim, bool causal,
                               const typename Probe::template Params<PrefillKernelParams>& p, cudaStream_t stream) {
  if (type != ElemType::kBF16) return cudaErrorInvalidValue;
  switch (version) {
    case 1: return launch_version<PrefillV1, __nv_bfloat16, Probe>(p, head_dim, causal, stream);
    case 2: return launch_version<PrefillV2, __nv_bfloat16, Probe>(p, head_dim, causal, stream);
    case 3: return launch_version<PrefillV3, __nv_bfloat16, Probe>(p, head_dim, causal, stream);
    case 4: return launch_version<PrefillV4, __nv_bfloat16, Probe>(p, head_dim, causal, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The probed production kernels (prefill_launch_probed.cu; absent without
// FLASHSCOPE_KERNEL_PROBES).
cudaError_t launch_sm80_probed(int version, ElemType type, int head_dim, bool causal,
                               const GlobalTimerProbe::Params<PrefillKernelParams>& p, cudaStream_t stream);

}  // namespace flashscope::kernels
