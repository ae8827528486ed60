// The epilogue of a Hopper prefill work tile (hopper_consumer.cuh): O
// normalized by l and stored with the LSE (or a paged split's float
// partials), and, for the split tail (hopper_schedule.cuh), the merge of a
// work tile's pieces by the last of the CTAs holding them.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/hopper_ptx.cuh"
#include "kernels/common/math.h"
#include "kernels/common/ptx.cuh"
#include "kernels/common/row_ops.cuh"
#include "kernels/hopper/hopper_cta.cuh"

namespace flashscope::kernels::hopper_detail {

// Split tail: a piece of a work tile shared with other CTAs leaves its
// unnormalized O, running max m and per-thread sums l in the slot of its
// CTA (persistent_deal.h), laid out lane-minor per consumer warp so every
// store and load is a whole 128-byte line: O_rmem[i] at [i][lane], then
// m[0], m[1], l[0], l[1]. The tile's arrival counter (one per consumer
// warp: warps finish on their own) tells the last holder to arrive; it
// merges every holder's slot in key order, so the result is the same
// whoever comes last, puts the counter back to 0 for the next launch, and
// goes on to the ordinary epilogue with the merged state.
// False when other holders of the tile have yet to arrive (nothing to store).
template <typename Consumer>
__device__ __forceinline__ bool merge_shared_piece(const Consumer& c, int tile) {
  using Cfg = typename Consumer::Cfg;
  constexpr int DIM = Cfg::kDim;
  constexpr int kPartialFloats = (DIM / 2 + 4) * 32;
  const auto& hp = c.cta.hp;
  const int lane_id = c.cta.lane_id;
  const int consumer_warp = c.cta.warp_id - 4;
  float(&O_rmem)[DIM / 2] = c.O_rmem;
  float(&m_rmem)[2] = c.m_rmem;
  float(&l_rmem)[2] = c.l_rmem;
  auto partial_slot = [&](int cta, int tile) {
    return hp.split_partials +
           (int64_t(cta * 2 + hp.split.slot(cta, tile)) * Cfg::kConsumerWarps + consumer_warp) * kPartialFloats;
  };
  float* mine = partial_slot(blockIdx.x, tile);
#pragma unroll
  for (int i = 0; i < DIM / 2; ++i) mine[i * 32 + lane_id] = O_rmem[i];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mine[(DIM / 2 + h) * 32 + lane_id] = m_rmem[h];
    mine[(DIM / 2 + 2 + h) * 32 + lane_id] = l_rmem[h];
  }
  fence_acq_rel_gpu();  // the slot is visible device-wide before the arrival that announces it
  __syncwarp();
  int* arrivals = hp.split_arrivals + tile * Cfg::kConsumerWarps + consumer_warp;
  int arrived = 0;
  if (lane_id == 0) arrived = atomicAdd(arrivals, 1);
  arrived = __shfl_sync(0xffffffffu, arrived, 0);
  const int first = hp.split.first_holder(tile), last = hp.split.last_holder(tile);
  if (arrived != last - first) return false;
  if (lane_id == 0) atomicExch(arrivals, 0);
  fence_acq_rel_gpu();  // the other holders' slots are read after their arrivals
  float m_max[2] = {-INFINITY, -INFINITY};
  for (int cta = first; cta <= last; ++cta) {
    const float* slot = partial_slot(cta, tile);
#pragma unroll
    for (int h = 0; h < 2; ++h) m_max[h] = fmaxf(m_max[h], __ldcg(slot + (DIM / 2 + h) * 32 + lane_id));
  }
#pragma unroll
  for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) l_rmem[h] = 0.0f;
  for (int cta = first; cta <= last; ++cta) {
    const float* slot = partial_slot(cta, tile);
    float weight[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_use = rows::exp2_offset(m_max[h]);
      weight[h] = fast_exp2(__ldcg(slot + (DIM / 2 + h) * 32 + lane_id) - m_use);
      l_rmem[h] = fmaf(weight[h], __ldcg(slot + (DIM / 2 + 2 + h) * 32 + lane_id), l_rmem[h]);
    }
#pragma unroll
    for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = fmaf(weight[(i / 2) % 2], __ldcg(slot + i * 32 + lane_id), O_rmem[i]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) m_rmem[h] = m_max[h];
  return true;
}

// Row half h of a thread's rows: the factor that normalizes O, and the LSE
// (a quad's shuffle: every lane of the warp calls it).
struct RowFinish {
  float inv_l, lse;
};
template <typename Consumer>
__device__ __forceinline__ RowFinish finish_row(const Consumer& c, int h) {
  const float l = rows::quad_sum(c.l_rmem[h]);
  if (l > 0.0f) return {fast_rcp(l), (c.m_rmem[h] + fast_log2(l)) * kLn2};
  return {0.0f, -INFINITY};  // no visible key: output 0
}

// Normalize, store O and the LSE (or split partials) of this warp's rows
// warp_row0 + lane/4 (+ 8) of the work tile's view.
template <typename Consumer, typename View>
__device__ __forceinline__ void store_output(const Consumer& c, const View& view, int warp_row0) {
  using Mma = typename Consumer::Mma;
  const int lane_id = c.cta.lane_id;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const auto [inv_l, lse] = finish_row(c, h);  // every lane: the quad's shuffles
    const int row = warp_row0 + lane_id / 4 + h * 8;
    if (row >= view.rows) continue;
    if (view.partial()) {
      rows::store_row_f32(c.O_rmem, h, inv_l, view.partial_o(row), lane_id);
      if (lane_id % 4 == 0) view.store_partial_lse(row, lse);
    } else {
      rows::store_row<Mma>(c.O_rmem, h, inv_l, view.o_ptr(row), lane_id);
      if (lane_id % 4 == 0) view.store_lse(row, lse);
    }
  }
}

// kOThroughQSlot (hopper_layout.cuh): the warpgroup's normalized O into
// its own 64 rows of the Q slot at `slot` (the 128-byte swizzle layout TMA
// reads; a warp's 4-byte writes of one n8 tile land in 32 distinct banks),
// then one thread stores them as DIM/64 boxes of 64 rows through hp.o_map
// and commits them as a bulk group, whose read it waits for before the slot
// is released (release_stored_q_slot). The LSE as store_output. Dense views
// only (no split partials).
template <typename Consumer, typename View>
__device__ __forceinline__ void store_output_through_q_slot(const Consumer& c, const View& view, int warp_row0,
                                                            uint32_t slot) {
  using Cfg = typename Consumer::Cfg;
  using Mma = typename Consumer::Mma;
  constexpr int DIM = Cfg::kDim;
  const auto& cta = c.cta;
  const int lane_id = cta.lane_id;
  const int tile_row0 = warp_row0 - view.q0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const auto [inv_l, lse] = finish_row(c, h);
    const int row = warp_row0 + lane_id / 4 + h * 8;
    if (row < view.rows && lane_id % 4 == 0) view.store_lse(row, lse);
    const int r = tile_row0 + lane_id / 4 + h * 8;
#pragma unroll
    for (int j = 0; j < DIM / 8; ++j)
      sts_u32(slot + sw128_offset<Cfg::kBlockQ>(r, j * 8) + (lane_id % 4) * 4,
              Mma::pack(rows::at(c.O_rmem, j, 2 * h) * inv_l, rows::at(c.O_rmem, j, 2 * h + 1) * inv_l));
  }
  sm90::fence_proxy_async_shared();  // the writes above, before TMA (the async proxy) reads them
  sm90::named_barrier_sync(Consumer::kStoreBarrier + c.warpgroup, 128);
  if (cta.warp_id % 4 == 0 && lane_id == 0) {
    const TmaCoords at = cta.coords_of(view);
    const int rows0 = c.warpgroup * Cfg::kWarpgroupRows;
#pragma unroll
    for (int cb = 0; cb < Cfg::kColumnBlocks; ++cb)
      sm90::tma_store_4d(&cta.hp.o_map, slot + cb * Cfg::kBlockQ * 128 + rows0 * 128, cb * 64, view.q0 + rows0,
                         at.q_head, at.seq);
    sm90::bulk_commit_group();
  }
}

// The thread that stored a warpgroup's O (store_output_through_q_slot):
// once the store has read the Q slot, the slot is released for the
// warpgroup's four warps (persistent CTAs: the producer's next Q there).
template <typename Consumer>
__device__ __forceinline__ void release_stored_q_slot(const Consumer& c, int q_slot) {
  if (c.cta.warp_id % 4 == 0 && c.cta.lane_id == 0) {
    sm90::bulk_wait_group_read<0>();
    if constexpr (Consumer::CtaType::kIsPersistent) sm90::mbarrier_arrive_count(c.cta.q_empty_bar + 8 * q_slot, 4);
  }
}

}  // namespace flashscope::kernels::hopper_detail
