// The Hopper prefill kernel's layout (hopper_prefill_kernel.cuh): its config
// (warpgroups, tiles, stages, the shared-memory map and register split), its
// parameters, and the cp.async tile copy in the 128-byte swizzle layout.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing is linked from the driver API)
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/persistent_deal.h"
#include "kernels/hopper/hopper_extras.h"
#include "kernels/common/ptx.cuh"

namespace flashscope::kernels {

// CONSUMERS: warpgroups of 64 rows each, so BLOCK_Q = 64 · CONSUMERS.
// PINGPONG: the consumer warpgroups take turns issuing their wgmmas (named
// barriers in a ring), so one's softmax runs under another's GEMMs instead
// of all of them contending for the tensor cores at once.
// BLOCK_KV: keys per tile, the N of S = Q·Kᵀ (a multiple of 16, at most 256
// for one wgmma and one TMA box): wider tiles spread the per-tile softmax
// bookkeeping (row max, O rescale, barriers) over more keys.
// Q_SLOTS: Q buffers, so a persistent CTA loads the next work tile's Q while
// the current one still reads its own (see kQSlots).
// O_THROUGH_Q_SLOT: see kOThroughQSlot.
template <int DIM, int STAGES, int CONSUMERS = 2, bool PINGPONG = false, int BLOCK_KV = 128,
          int Q_SLOTS = (DIM == 64 && CONSUMERS == 2 ? 2 : 1), bool O_THROUGH_Q_SLOT = false>
struct HopperPrefillConfig {
  static constexpr int kDim = DIM;
  static constexpr int kConsumerWarpgroups = CONSUMERS;
  static constexpr int kBlockQ = 64 * CONSUMERS;
  static constexpr int kBlockKV = BLOCK_KV;
  static constexpr int kStages = STAGES;
  static constexpr bool kPingPong = PINGPONG;
  static constexpr int kConsumerWarps = kConsumerWarpgroups * 4;
  static constexpr int kThreads = (kConsumerWarpgroups + 1) * 128;  // warpgroup 0 produces
  static constexpr int kWarpgroupRows = 64;  // wgmma's M
  // Registers per thread after setmaxnreg (65536 per SM, 128 threads per
  // warpgroup): the TMA producer needs almost none, the cp.async one some
  // address arithmetic; the consumers share the rest (multiples of 8).
  static constexpr int kProducerRegsTma = CONSUMERS == 2 ? 24 : 32;
  static constexpr int kProducerRegsCpAsync = CONSUMERS == 2 ? 72 : 56;
  static constexpr int kConsumerRegsTma = (65536 - kProducerRegsTma * 128) / (CONSUMERS * 128) / 8 * 8;
  static constexpr int kConsumerRegsCpAsync = (65536 - kProducerRegsCpAsync * 128) / (CONSUMERS * 128) / 8 * 8;
  static_assert(kConsumerRegsTma <= 256 && kConsumerRegsCpAsync <= 256, "setmaxnreg takes at most 256");
  static_assert(CONSUMERS >= 2 && CONSUMERS <= 3, "two or three consumer warpgroups");

  static constexpr int kSwizzleRowBytes = 128;  // one 64-element column block row
  static constexpr int kColumnBlocks = DIM / 64;
  static constexpr int kQBytes = kBlockQ * DIM * 2;
  static constexpr int kKVTileBytes = kBlockKV * DIM * 2;
  // Q buffers: by default two for two consumer warpgroups at head_dim 64
  // (the short causal tiles of SmolLM2's prompts: about nine work tiles of
  // 1-8 key tiles per CTA), so a persistent CTA loads the next work tile's Q
  // while the current one still reads its own; the three-warpgroup tiles of
  // long problems lose with it (bench/TUNING.md#hopper-prefill). One at 128
  // and 256, where the K/V ring takes the rest of shared memory, except in
  // the short-window tiles (hopper_config.cuh), whose ring leaves room.
  static constexpr int kQSlots = Q_SLOTS;
  static_assert(Q_SLOTS == 1 || Q_SLOTS == 2, "one or two Q buffers");
  // O_THROUGH_Q_SLOT (TMA launches; two Q slots): a warpgroup writes its
  // normalized O into its own rows of the Q slot it was computed from (its
  // last Q·Kᵀ has read them) and one thread stores them with TMA, instead of
  // every thread storing 4-byte pieces of eight rows to global memory, whose
  // register reads held the warps for the next work tile; the slot goes back
  // to the producer once the store has read it. Pays where work tiles are a
  // few key tiles (bench/TUNING.md#hopper-prefill).
  static constexpr bool kOThroughQSlot = O_THROUGH_Q_SLOT;
  static_assert(!O_THROUGH_Q_SLOT || Q_SLOTS == 2, "the next work tile's Q loads while O leaves through this one's");
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQBytes * kQSlots;
  static constexpr int kVOffset = kKOffset + STAGES * kKVTileBytes;
  static constexpr int kBarrierOffset = kVOffset + STAGES * kKVTileBytes;
  // K and V have their own barriers, so a stage's K is released as soon as
  // S = Q·Kᵀ has read it and is refilled while P·V still reads its V:
  // full_k[STAGES], full_v[STAGES], empty_k[STAGES], empty_v[STAGES],
  // q_full[kQSlots], q_empty[kQSlots] (persistent CTAs), 8 bytes each.
  static constexpr int kBarrierBytes = (4 * STAGES + 2 * kQSlots) * 8;
  // +1024: the dynamic shared window is aligned up to the swizzle atom inside.
  static constexpr int kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;

  static_assert(DIM == 64 || DIM == 128 || DIM == 256, "head_dim 64, 128 or 256");
  static_assert(BLOCK_KV % 16 == 0 && BLOCK_KV <= 256, "one wgmma N and one TMA box of keys");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

namespace hopper_detail {

// Byte offset of element column `col` (a multiple of 8) of row `row` inside
// a [rows x DIM] tile stored in the 128-byte swizzle layout.
template <int ROWS>
__device__ __forceinline__ uint32_t sw128_offset(int row, int col) {
  const int block = col / 64;
  const int chunk = (col % 64) / 8;
  return block * ROWS * 128 + row * 128 + ((chunk ^ (row % 8)) << 4);
}

// The producer warpgroup's 128 threads copy rows [0, ROWS) of a [rows, DIM]
// tile with cp.async; rows past valid_rows are zero-filled (their address
// never formed). Every lane runs every iteration: a paged row_ptr shuffles
// page ids across its warp.
template <int ROWS, int DIM, typename T, typename RowPtr>
__device__ __forceinline__ void group_load_tile(uint32_t dst, RowPtr row_ptr, int valid_rows, const T* any_valid,
                                                int thread) {
  constexpr int kThreads = 128;
  constexpr int kChunksPerRow = DIM / 8;
  constexpr int kChunks = ROWS * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "whole iterations for every thread");
#pragma unroll 8
  for (int chunk = thread; chunk < kChunks; chunk += kThreads) {
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    const T* src = row_ptr(row) + col;
    const bool valid = row < valid_rows;
    cp_async_16(dst + sw128_offset<ROWS>(row, col), valid ? src : any_valid, valid);
  }
}

}  // namespace hopper_detail

// The kernel's parameters: the view's (pointers, strides, sizes) and, for
// the TMA producer, tensor maps of Q, K and V as 4-D [batch, heads, seq, D]
// boxes of 128 rows x 64 columns in the 128-byte swizzle (unused otherwise).
template <typename ViewParams>
struct HopperParams {
  ViewParams view;
  CUtensorMap q_map, k_map, v_map;
  // Persistent launches: how the work tiles are dealt and their order
  // (persistent_deal.h; unused otherwise).
  PersistentDeal deal;
  WorkTileList tiles;
  // Non-causal persistent launches: the split tail (persistent_deal.h;
  // split.split_tiles = 0: none), the pieces' partial results and the
  // tiles' arrival counters (split_tail_workspace.h).
  SplitTail split;
  float* split_partials;
  int* split_arrivals;
  // kOThroughQSlot configurations: O as a 4-D map of 64-row boxes
  // (o_map_ok false: not encodable, the threads store O themselves).
  CUtensorMap o_map;
  bool o_map_ok;
  // EXTRAS launches: the window (and soft-cap) as given;
  HopperExtras extras;
  // the soft-cap (softcap_c2 = 0: off), cap·tanh(s/cap) of the
  // scaled logit s, in S's own units (S·scale_log2 is the logit in log2
  // units) as S ← c2 − 2·c2 / (exp2(S·c1) + 1), c1 = 2·scale·log2(e)/cap,
  // c2 = cap/scale.
  float softcap_c1, softcap_c2;
};

}  // namespace flashscope::kernels
