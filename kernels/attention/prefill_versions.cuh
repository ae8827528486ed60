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

#include "kernels/attention/prefill_head_dims.h"
#include "kernels/attention/prefill_kernel.cuh"
#include "kernels/attention/prefill_plan.h"

namespace flashscope::kernels {

// Registers decide occupancy: at head_dim 64 (and 32) two CTAs (16 warps)
// fit in 128 registers per thread; at 128 the O accumulator alone is 64
// registers, so one CTA takes the register file.
template <int D>
constexpr int kMinBlocks = D <= 64 ? 2 : 1;

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
// registers) and eight 16-row warps with Q in registers stay fastest; 96 is
// 128's shape (48 accumulator registers per warp row tile). At 256 a 16-row
// warp's accumulator alone is 128 registers: Q stays in shared memory (64
// KiB) beside K's two stages and V's one (32 KiB each at 64 keys), 160 KiB,
// one CTA of 8 warps per SM (FlashAttention-2 takes 64x64 tiles of 4 warps
// here; taller tiles halve the K/V traffic per row). Untuned until a sweep
// (bench/tile_sweep.cu's D256 candidates) says otherwise. 32 takes 64's
// shape and 80 128's, both untuned (one instantiation each, auto's).
template <int D>
using PrefillV5 = std::conditional_t<
    D <= 64, PrefillConfig<D, 128, 64, 4, true, Pipeline::kK2V1, true, true, 2>,
    std::conditional_t<D == 256, PrefillConfig<256, 128, 64, 8, true, Pipeline::kK2V1, true, true, 1>,
                       PrefillConfig<D, 128, 64, 8, true, Pipeline::kK2V1, true, false, 1>>>;

// v6 holds two tiles of logits per warp: not at 256 (no instantiation).
template <int D>
using PrefillV6 = PrefillConfig<D, 128, 64, 8, true, Pipeline::kLookahead, true, false, kMinBlocks<D>>;

// What the library instantiates of the production kernels, per head_dim:
// v5 and v6 at 64 and 128 (both measured: bench/TUNING.md#sm80-prefill),
// only auto's choice at 32 (v5), 80 (v6), 96 (v6) and 256 (v5); the
// sliding-window and soft-capped kernels (kMods) only for auto's choice at
// every head_dim (auto's choice: sm80_default_version, prefill_head_dims.h).
// Every instantiation is compile time on CI's two cores.
constexpr bool sm80_instantiated(int version, int head_dim, int mods) {
  if (version != 5 && version != 6) return false;
  if (head_dim != 32 && head_dim != 64 && head_dim != 80 && head_dim != 96 && head_dim != 128 && head_dim != 256)
    return false;
  if (mods != kModNone || (head_dim != 64 && head_dim != 128)) return version == sm80_default_version(head_dim);
  return true;
}

// The kernel mods a call needs (the runtime fills window_* only for windowed
// or soft-capped calls, with a causal call's window_right = 0).
template <typename KernelParams>
__host__ __device__ inline int attn_mods(const KernelParams& p) {
  if (p.softcap.out > 0.0f) return kModWindow | kModSoftcap;
  return p.window_left >= 0 || p.window_right >= 0 ? kModWindow : kModNone;
}

// One configuration with its causal flag and mods as template constants;
// kWithMods: its window and soft-cap kernels are instantiated too.
template <typename Cfg, typename T, typename Probe, bool kWithMods = false>
cudaError_t launch_config(const typename Probe::template Params<PrefillKernelParams>& p, bool causal, int mods,
                          cudaStream_t stream) {
  if (mods == kModNone)
    return causal ? launch_prefill<Cfg, T, true, Probe>(p, stream) : launch_prefill<Cfg, T, false, Probe>(p, stream);
  if constexpr (kWithMods) {
    if (mods == kModWindow) return launch_prefill<Cfg, T, false, Probe, kModWindow>(p, stream);
    if (mods == (kModWindow | kModSoftcap))
      return launch_prefill<Cfg, T, false, Probe, kModWindow | kModSoftcap>(p, stream);
  }
  return cudaErrorInvalidValue;
}

// Turns the runtime head_dim and causal flag into template constants for one
// version (the teaching ladder: head_dim 64 and 128, no mods).
template <template <int> class Version, typename T, typename Probe>
cudaError_t launch_version(const typename Probe::template Params<PrefillKernelParams>& p, int head_dim, bool causal,
                           cudaStream_t stream) {
  switch (head_dim) {
    case 64: return launch_config<Version<64>, T, Probe>(p, causal, kModNone, stream);
    case 128: return launch_config<Version<128>, T, Probe>(p, causal, kModNone, stream);
    default: return cudaErrorInvalidValue;  // the runtime validates head_dim first
  }
}

// The production kernels of one head_dim (both dtypes, every version and
// mods sm80_instantiated lists). Each head_dim is its own translation unit
// (prefill_launch_d<D>.cu, each with its probed twin), so a two-core build
// compiles them side by side.
template <int D, typename Probe>
cudaError_t launch_sm80_dim(int version, ElemType type, bool causal, int mods,
                            const typename Probe::template Params<PrefillKernelParams>& p, cudaStream_t stream) {
  const bool fp16 = type == ElemType::kFP16;
  if constexpr (sm80_instantiated(5, D, kModNone)) {
    constexpr bool kMods = sm80_instantiated(5, D, kModWindow);
    if (version == 5)
      return fp16 ? launch_config<PrefillV5<D>, __half, Probe, kMods>(p, causal, mods, stream)
                  : launch_config<PrefillV5<D>, __nv_bfloat16, Probe, kMods>(p, causal, mods, stream);
  }
  if constexpr (sm80_instantiated(6, D, kModNone)) {
    constexpr bool kMods = sm80_instantiated(6, D, kModWindow);
    if (version == 6)
      return fp16 ? launch_config<PrefillV6<D>, __half, Probe, kMods>(p, causal, mods, stream)
                  : launch_config<PrefillV6<D>, __nv_bfloat16, Probe, kMods>(p, causal, mods, stream);
  }
  return cudaErrorInvalidValue;
}

// The production entry per head_dim, each defined in its own translation
// unit (prefill_launch_d<D>.cu), with its probed twin where
// FLASHSCOPE_KERNEL_PROBES builds them.
#define FLASHSCOPE_SM80_DIM_ENTRY(D)                                                                             \
  cudaError_t launch_sm80_d##D(int version, ElemType type, bool causal, int mods, const PrefillKernelParams& p, \
                               cudaStream_t stream);                                                            \
  cudaError_t launch_sm80_d##D##_probed(int version, ElemType type, bool causal, int mods,                      \
                                        const GlobalTimerProbe::Params<PrefillKernelParams>& p, cudaStream_t stream);
FLASHSCOPE_SM80_DIM_ENTRY(32)
FLASHSCOPE_SM80_DIM_ENTRY(64)
FLASHSCOPE_SM80_DIM_ENTRY(80)
FLASHSCOPE_SM80_DIM_ENTRY(96)
FLASHSCOPE_SM80_DIM_ENTRY(128)
FLASHSCOPE_SM80_DIM_ENTRY(256)
#undef FLASHSCOPE_SM80_DIM_ENTRY

// The production kernels v5 and v6 (bf16 and fp16) at every head_dim,
// plain or probed (for the trace capture: a separate set the production
// kernels carry no trace of).
template <typename Probe>
cudaError_t launch_sm80_production(int version, ElemType type, int head_dim, bool causal, int mods,
                                   const typename Probe::template Params<PrefillKernelParams>& p, cudaStream_t stream) {
  if constexpr (Probe::kEnabled) {
    switch (head_dim) {
      case 32: return launch_sm80_d32_probed(version, type, causal, mods, p, stream);
      case 64: return launch_sm80_d64_probed(version, type, causal, mods, p, stream);
      case 80: return launch_sm80_d80_probed(version, type, causal, mods, p, stream);
      case 96: return launch_sm80_d96_probed(version, type, causal, mods, p, stream);
      case 128: return launch_sm80_d128_probed(version, type, causal, mods, p, stream);
      case 256: return launch_sm80_d256_probed(version, type, causal, mods, p, stream);
      default: return cudaErrorInvalidValue;
    }
  } else {
    switch (head_dim) {
      case 32: return launch_sm80_d32(version, type, causal, mods, p, stream);
      case 64: return launch_sm80_d64(version, type, causal, mods, p, stream);
      case 80: return launch_sm80_d80(version, type, causal, mods, p, stream);
      case 96: return launch_sm80_d96(version, type, causal, mods, p, stream);
      case 128: return launch_sm80_d128(version, type, causal, mods, p, stream);
      case 256: return launch_sm80_d256(version, type, causal, mods, p, stream);
      default: return cudaErrorInvalidValue;
    }
  }
}

// The teaching ladder's v1..v4 (bf16), which the kernel lab instantiates
// (lab/src/ladder.cu).
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

}  // namespace flashscope::kernels
