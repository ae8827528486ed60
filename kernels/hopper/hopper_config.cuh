// The Hopper kernel's configurations (the production choice per shape, and
// the research variants' tiles the lab runs) and the TMA tensor maps of
// dense Q/K/V.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <type_traits>

#include "kernels/hopper/hopper_launch.h"
#include "kernels/hopper/hopper_plan.h"
#include "kernels/hopper/hopper_prefill_kernel.cuh"

namespace flashscope::kernels {

// The production tiles; the figures behind each choice: bench/TUNING.md#hopper-prefill.
//   128: two consumer warpgroups taking turns at the tensor cores, 176-key
//        tiles, two stages (Q 32 KiB + 4 tiles of 44 KiB = 208 KiB): the
//        wider tile spreads each tile's fixed costs (row maxima, O's
//        rescale, barriers) over more keys; 192-key tiles for long key ranges.
//   64:  three consumer warpgroups (192-row q-tiles) taking turns, four
//        stages: at 64 the softmax is twice the share of the work and needs
//        other warpgroups' GEMMs to hide under.
//   256: two consumer warpgroups (128-row q-tiles) taking turns, 80-key
//        tiles, two stages. Registers bound the rows: O alone is 128 fp32
//        per thread for a warpgroup's 64 x 256, with S 40 and P 20 that is
//        188 of the 240 two consumer warpgroups get (three would get 160).
//        Shared memory bounds the keys: Q 64 KiB + 4 tiles of 40 KiB =
//        224 KiB of the 227 (96-key tiles would need 256).
// Short causal sequences at 64 (SmolLM2's prompts): 192-row q-tiles leave
// much of the last tile idle and the causal work per CTA uneven, so two
// consumer warpgroups (128-row tiles), still taking turns, up to 1024 queries.
// O is stored by the threads: through the Q slot (kOThroughQSlot) these
// tiles ran slower (bench/TUNING.md#hopper-prefill).
using ShortCausalConfig64 = HopperPrefillConfig<64, 4, 2, true>;
inline bool use_short_causal_config(int head_dim, bool causal, int q_len) {
  return head_dim == 64 && causal && q_len <= 1024;
}

template <int DIM>
using DefaultConfig = std::conditional_t<
    DIM == 64, HopperPrefillConfig<64, 4, 3, true>,
    std::conditional_t<DIM == 128, HopperPrefillConfig<128, 2, 2, true, 176>, HopperPrefillConfig<256, 2, 2, true, 80>>>;

// Long key ranges at 128: 192-key tiles (S 96 + P 48 + O 64 registers of
// the 240) pass fewer tiles through the per-tile bookkeeping, from 4096 keys.
using LongKvConfig128 = HopperPrefillConfig<128, 2, 2, true, 192>;
inline bool use_long_kv_config(int head_dim, int kv_len) { return head_dim == 128 && kv_len >= 4096; }

// Short windows at 128 (a q-tile reads W + 128 keys, whatever the context):
// 128-key tiles, two stages and two Q buffers (Q 2 x 32 KiB + 4 tiles of
// 32 KiB = 192 KiB). A work tile is then a handful of key tiles, so what it
// costs apart from them counts: the tiles cover W + 128 keys with less past
// the window's edges (W = 512: 640 keys in five tiles, against 704 in four
// of 176 and 768 in four of 192), the next work tile's Q lands while the
// current one runs instead of after its last Q·Kᵀ, and O leaves through the
// Q slot. Window kernels only (EXTRAS).
// Which windows take it: use_window_config (hopper_plan.h).
using WindowConfig128 = HopperPrefillConfig<128, 2, 2, true, 128, 2, true>;
static_assert(WindowConfig128::kBlockQ == kWindowBlockQ, "use_window_config counts these rows");
// Configurations only the window and soft-cap launches run: the kernels
// without them are not instantiated for these.
template <typename Cfg>
inline constexpr bool kExtrasOnlyConfig = std::is_same_v<Cfg, WindowConfig128>;

// The production choice, the one place it is made (the plan records it).
// x: the window and soft-cap (a short window at 128 takes its own tiles).
inline HopperConfig production_hopper_config(int head_dim, bool causal, int q_len, int kv_len,
                                             const HopperExtras& x = {}) {
  if (head_dim == 64) return use_short_causal_config(64, causal, q_len) ? HopperConfig::kShortCausal64 : HopperConfig::kDefault64;
  if (head_dim == 256) return HopperConfig::kDefault256;
  if (use_window_config(head_dim, causal, x)) return HopperConfig::kWindow128;
  return use_long_kv_config(128, kv_len) ? HopperConfig::kLongKv128 : HopperConfig::kDefault128;
}

// Which configurations a visit_hopper_config instantiates: the library
// launches the production ones, the lab (lab/) the research variants'; plans
// read any one's constants.
enum class HopperConfigs { kProduction, kVariants, kAll };

// Calls fn(Cfg{}, kProduction) with the configuration `c` names, kProduction
// a std::bool_constant: true for the production tiles (which may run
// persistent CTAs), false for a variant's (one CTA per work tile).
// cudaErrorInvalidValue for a configuration outside kSet (never instantiated).
template <HopperConfigs kSet, typename Fn>
cudaError_t visit_hopper_config(HopperConfig c, Fn&& fn) {
  if constexpr (kSet != HopperConfigs::kVariants) {
    switch (c) {
      case HopperConfig::kDefault64: return fn(DefaultConfig<64>{}, std::true_type{});
      case HopperConfig::kShortCausal64: return fn(ShortCausalConfig64{}, std::true_type{});
      case HopperConfig::kDefault128: return fn(DefaultConfig<128>{}, std::true_type{});
      case HopperConfig::kLongKv128: return fn(LongKvConfig128{}, std::true_type{});
      case HopperConfig::kWindow128: return fn(WindowConfig128{}, std::true_type{});
      case HopperConfig::kDefault256: return fn(DefaultConfig<256>{}, std::true_type{});
      default: break;
    }
  }
  if constexpr (kSet != HopperConfigs::kProduction) {
    switch (c) {
      case HopperConfig::kTwoConsumersPingPong64: return fn(HopperPrefillConfig<64, 4, 2, true>{}, std::false_type{});
      case HopperConfig::kThreeConsumers64: return fn(HopperPrefillConfig<64, 4, 3, false>{}, std::false_type{});
      case HopperConfig::kBlockKV128: return fn(HopperPrefillConfig<128, 3>{}, std::false_type{});
      case HopperConfig::kStages2: return fn(HopperPrefillConfig<128, 2>{}, std::false_type{});
      case HopperConfig::kPingPong128: return fn(HopperPrefillConfig<128, 3, 2, true>{}, std::false_type{});
      case HopperConfig::kBlockKV176: return fn(HopperPrefillConfig<128, 2, 2, false, 176>{}, std::false_type{});
      case HopperConfig::kBlockKV192: return fn(HopperPrefillConfig<128, 2, 2, true, 192>{}, std::false_type{});
      default: break;
    }
  }
  return cudaErrorInvalidValue;
}

// Dense launches through TMA with more work tiles than SMs run persistent
// CTAs: one per SM, each walking its share of the work tiles, the next
// tile's Q and first K loaded under the last one's softmax, P·V and
// epilogue instead of after the CTA is replaced (bench/TUNING.md#hopper-prefill).
// How the tiles are dealt: persistent_deal.h. Non-causal launches given a
// workspace also split their last two rounds by key tiles (its SplitTail)
// where that saves more than it costs.

// cuTensorMapEncodeTiled from the driver, found through the runtime so the
// library links no libcuda. Null when the driver has none.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// A 4-D map of one tensor [batch, seq, heads, D] (any strides, D contiguous)
// read in boxes of `rows` x 64 elements with the 128-byte swizzle. Strides of
// dimensions of size 1 are never used; TMA still wants them 16-byte multiples.
inline bool encode_map(CUtensorMap* map, ElemType type, const void* base, int head_dim, int seq, int heads, int batch,
                int64_t seq_stride, int64_t head_stride, int64_t batch_stride, int rows) {
  auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  auto stride_bytes = [](int64_t elements, int extent) -> cuuint64_t {
    return extent > 1 ? cuuint64_t(elements) * 2 : 16;
  };
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(seq), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {stride_bytes(seq_stride, seq), stride_bytes(head_stride, heads),
                                 stride_bytes(batch_stride, batch)};
  for (cuuint64_t s : strides)
    if (s % 16 != 0 || s >= (cuuint64_t(1) << 40)) return false;
  const cuuint32_t box[4] = {64, cuuint32_t(rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, type == ElemType::kFP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            4, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// The cp.async producer needs more registers than TMA's; three consumer
// warpgroups would then get 152 each, too few to keep their wgmmas in flight
// (ptxas serializes them, C7512), so the cp.async paths (varlen, paged) run
// two consumer warpgroups.
// Its tiles stay 128 keys wide with at least three stages (it publishes a
// tile only once the next is issued, so it needs the deeper ring), and at
// head_dim 128 the warpgroups do not take turns: the configuration measured
// for it before the TMA path moved to 176-key tiles.
// At head_dim 256 three stages of 128-key tiles do not fit (Q 64 KiB + 6
// tiles of 64 KiB); there is no cp.async configuration (kHasCpAsync): dense
// tensors TMA cannot describe and varlen ones run other kernels.
template <typename Cfg>
using CpAsyncConfig = HopperPrefillConfig<Cfg::kDim, (Cfg::kStages < 3 ? 3 : Cfg::kStages), 2,
                                          Cfg::kDim == 64 && Cfg::kPingPong>;
template <typename Cfg>
inline constexpr bool kHasCpAsync = Cfg::kDim != 256;

// Fills hp's three maps for dense (not packed varlen) tensors; false when TMA
// cannot describe them (then the cp.async producer runs).
template <typename Cfg, typename Params>
bool encode_dense_maps(ElemType type, const PrefillKernelParams& p, Params* hp) {
  if (p.cu_seqlens_q != nullptr) return false;
  // O in 64-row boxes, a warpgroup's; where it does not encode, the threads store O themselves.
  if constexpr (Cfg::kOThroughQSlot)
    hp->o_map_ok = encode_map(&hp->o_map, type, p.o, Cfg::kDim, p.q_len, p.q_heads, p.batch, p.o_seq_stride,
                              p.o_head_stride, p.o_batch_stride, Cfg::kWarpgroupRows);
  return encode_map(&hp->q_map, type, p.q, Cfg::kDim, p.q_len, p.q_heads, p.batch, p.q_seq_stride, p.q_head_stride,
                    p.q_batch_stride, Cfg::kBlockQ) &&
         encode_map(&hp->k_map, type, p.k, Cfg::kDim, p.kv_len, p.kv_heads, p.batch, p.k_seq_stride, p.k_head_stride,
                    p.k_batch_stride, Cfg::kBlockKV) &&
         encode_map(&hp->v_map, type, p.v, Cfg::kDim, p.kv_len, p.kv_heads, p.batch, p.v_seq_stride, p.v_head_stride,
                    p.v_batch_stride, Cfg::kBlockKV);
}

}  // namespace flashscope::kernels
