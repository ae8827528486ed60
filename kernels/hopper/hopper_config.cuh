// What the Hopper kernel's production and probed launchers share: the
// configurations chosen per head_dim, and the TMA tensor maps of dense Q/K/V.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <type_traits>

#include "kernels/hopper/hopper_launch.h"
#include "kernels/hopper/hopper_prefill_kernel.cuh"

namespace flashscope::kernels {


// From bench/hopper_variants.cu on an H200 (results in bench/results/):
//   128: two consumer warpgroups taking turns at the tensor cores, 176-key
//        tiles, two stages (Q 32 KiB + 4 tiles of 44 KiB = 208 KiB). With K
//        and V released separately two stages keep the producer ahead as
//        three did; the wider tile spreads each tile's fixed costs (row
//        maxima, O's rescale, barriers) over 37% more keys: 8k x 8k 700
//        TFLOPS against 667 for 128-key tiles and three stages
//        (nvidia-h200-2026-11-22-hopper-variants-3.txt); 192-key tiles for
//        long key ranges, below.
//   64:  three consumer warpgroups (192-row q-tiles) taking turns at the
//        tensor cores, four stages: 500 TFLOPS against 358 for two
//        warpgroups without turns, since at 64 the softmax is twice the
//        share of the work and needs other warpgroups' GEMMs to hide under.
// Short causal sequences at 64 (SmolLM2's prompts): 192-row q-tiles leave
// a large share of the last tile's rows idle and the causal work per CTA
// uneven; two consumer warpgroups (128-row tiles), still taking turns, are
// 8-10% faster there up to 1024 queries and 3-8% slower beyond
// (results/nvidia-h200-2026-11-22-hopper-variants-2.txt).
using ShortCausalConfig64 = HopperPrefillConfig<64, 4, 2, true>;
inline bool use_short_causal_config(int head_dim, bool causal, int q_len) {
  return head_dim == 64 && causal && q_len <= 1024;
}

template <int DIM>
using DefaultConfig = std::conditional_t<DIM == 64, HopperPrefillConfig<64, 4, 3, true>,
                                         HopperPrefillConfig<128, 2, 2, true, 176>>;

// Long key ranges at 128: 192-key tiles (S 96 + P 48 + O 64 registers of
// the 240) pass 9% fewer tiles through the per-tile bookkeeping: level with
// 176 or up to 1% faster from 4096 keys across eight rounds, slower on short
// ranges (1000 x 777: 72-73 against 75-78 TFLOPS).
using LongKvConfig128 = HopperPrefillConfig<128, 2, 2, true, 192>;
inline bool use_long_kv_config(int head_dim, int kv_len) { return head_dim == 128 && kv_len >= 4096; }

// Dense launches through TMA with more work tiles than SMs run persistent
// CTAs: one per SM, each walking its share of the work tiles, the next
// tile's Q and first K loaded under the last one's softmax, P·V and
// epilogue instead of after the CTA is replaced. Against one CTA per tile
// (6e535d4), same run on the H200 (results/nvidia-h200-2026-11-22-persistent.txt):
// 16 x 9 x 1024² causal at 64 (SmolLM2's prompts: every CTA sees 1-8 KV
// tiles) 256 against 216 TFLOPS, 4 x 16 x 4096² causal at 64 438 against
// 410, at 128 623 against 582, 8k² causal 669 against 653, 4 x 16 x 4096²
// at 64 516 against 506; long non-causal at 128 level (8k² 717 / 715).
// How the tiles are dealt matters: persistent_deal.h. Non-causal launches
// given a workspace also split their last two rounds by key tiles (its
// SplitTail): 8k² 699 against 692, 4 x 16 x 4096² at 64 505 against 499,
// where the split saves more than it costs; not at the seed shape, whose
// last round is nearly full (results/nvidia-h200-2026-11-22-split-tail.txt).

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
template <typename Cfg>
using CpAsyncConfig = HopperPrefillConfig<Cfg::kDim, (Cfg::kStages < 3 ? 3 : Cfg::kStages), 2,
                                          Cfg::kDim == 64 && Cfg::kPingPong>;

// Fills hp's three maps for dense (not packed varlen) tensors; false when TMA
// cannot describe them (then the cp.async producer runs).
template <typename Cfg, typename Params>
bool encode_dense_maps(ElemType type, const PrefillKernelParams& p, Params* hp) {
  if (p.cu_seqlens_q != nullptr) return false;
  return encode_map(&hp->q_map, type, p.q, Cfg::kDim, p.q_len, p.q_heads, p.batch, p.q_seq_stride, p.q_head_stride,
                    p.q_batch_stride, Cfg::kBlockQ) &&
         encode_map(&hp->k_map, type, p.k, Cfg::kDim, p.kv_len, p.kv_heads, p.batch, p.k_seq_stride, p.k_head_stride,
                    p.k_batch_stride, Cfg::kBlockKV) &&
         encode_map(&hp->v_map, type, p.v, Cfg::kDim, p.kv_len, p.kv_heads, p.batch, p.v_seq_stride, p.v_head_stride,
                    p.v_batch_stride, Cfg::kBlockKV);
}

}  // namespace flashscope::kernels
