// What every warpgroup of a Hopper prefill CTA shares (hopper_prefill_kernel.cuh):
// the work it starts with, the shared-memory map, the mbarriers and the
// probe's spans.
//
// Shared memory (1024-byte aligned; every operand in the 128-byte swizzle
// layout, i.e. [DIM/64 column blocks][rows][64 elements], chunk ^= row % 8,
// the layout TMA writes and wgmma's descriptors name):
//   Q [kQSlots][BLOCK_Q x DIM]  |  K stages [STAGES][BLOCK_KV x DIM]  |  V stages  |  mbarriers
// K and V have their own "full" and "empty" barriers per stage, so a stage's
// K is released as soon as S = Q·Kᵀ has read it and is refilled while P·V
// still reads its V; Q has a full and an empty barrier per slot (the empty
// one: persistent CTAs, whose next work tile's Q waits for the last Q·Kᵀ).
#pragma once

#include <cstdint>

#include "kernels/common/hopper_ptx.cuh"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/hopper/hopper_layout.cuh"
#include "kernels/hopper/hopper_schedule.cuh"

namespace flashscope::kernels::hopper_detail {

using namespace sm90;  // the wgmma, TMA and mbarrier wrappers (hopper_ptx.cuh)

// A view's TMA coordinates, worked out once per work tile and kept in
// registers: the copies' asm clobbers memory, so coordinates read through
// the view would be re-read, and the kv-head re-divided, for every copy.
struct TmaCoords {
  int q0, key0, q_head, kv_head, seq;
};

// The kernel's own values, held by reference as the lambdas these functions
// once were held them (which keeps the kernel's code as it was).
template <typename Cfg, typename T, bool kCausal, typename View, bool kTma, typename Probe, bool kPersistent,
          bool kExtras = false>
struct HopperCta {
  using Config = Cfg;
  using Elem = T;
  using ViewType = View;
  using ProbeType = Probe;
  using Schedule = HopperSchedule<Cfg, kCausal, View, Probe, kPersistent, kExtras>;
  using Params = typename Schedule::Params;
  static constexpr bool kIsCausal = kCausal;
  static constexpr bool kUsesTma = kTma;
  static constexpr bool kIsPersistent = kPersistent;
  static constexpr bool kHasExtras = kExtras;
  static constexpr int STAGES = Cfg::kStages;

  const Params& hp;
  const typename View::Params& p;
  typename Probe::Ctx& probe;
  const Schedule& sched;
  const int &tid, &warp_id, &lane_id;
  const int& first_item;  // this CTA's first item with work
  const View& first_view;
  const int& first_kv_tiles;
  const int& probe_tile0;  // spans and states name absolute KV tiles; probed launches have one work tile
  const uint32_t &Q_smem, &K_smem, &V_smem;
  // Each array holds one 8-byte barrier per stage (+ 8·stage) or Q slot (+ 8·slot).
  const uint32_t &full_k_bar, &full_v_bar, &empty_k_bar, &empty_v_bar, &q_full_bar, &q_empty_bar;

  __device__ __forceinline__ void span(ProbeSpanKind kind, int kv_tile, uint64_t start) const {
    probe_span(probe, kind, kv_tile < 0 ? -1 : probe_tile0 + kv_tile, start);
  }
  // Every thread calls it once, last: with probes it ends in a CTA barrier.
  __device__ __forceinline__ void cta_end() const {
    probe_cta_end(probe,
                  {first_view.probe_batch(), first_view.probe_head(), first_view.q0, first_view.probe_split(),
                   probe_tile0, first_kv_tiles},
                  warp_id);
  }

  // The q-head and sequence of a view (only dense views are read through
  // TMA; they name theirs).
  __device__ __forceinline__ static int head_of(const View& v) {
    if constexpr (kViewTakesTileCoords<View>) return v.head;
    else return int(blockIdx.y);
  }
  __device__ __forceinline__ static int seq_of(const View& v) {
    if constexpr (kViewTakesTileCoords<View>) return v.seq;
    else return int(blockIdx.z);
  }
  __device__ __forceinline__ TmaCoords coords_of(const View& v) const {
    int kv_head;
    if constexpr (kViewTakesTileCoords<View>) kv_head = v.kv_head;
    else kv_head = head_of(v) / p.group;
    return TmaCoords{v.q0, v.kv_begin, head_of(v), kv_head, seq_of(v)};
  }

  // TMA copies of Q into slot `slot`, and of KV tile t into ring slot `slot`
  // (stage slot % STAGES); each announces its bytes on the barrier it
  // completes.
  __device__ __forceinline__ void tma_q(const TmaCoords& at, int slot) const {
    const uint32_t bar = q_full_bar + 8 * slot;
    mbarrier_arrive_expect_tx(bar, Cfg::kQBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColumnBlocks; ++cb)
      tma_load_4d(Q_smem + slot * Cfg::kQBytes + cb * Cfg::kBlockQ * 128, &hp.q_map, bar, cb * 64, at.q0, at.q_head,
                  at.seq);
  }
  __device__ __forceinline__ void tma_kv(const CUtensorMap* map, uint32_t tiles, uint32_t bar, const TmaCoords& at,
                                         int t, int slot) const {
    const int stage = slot % STAGES;
    mbarrier_arrive_expect_tx(bar + 8 * stage, Cfg::kKVTileBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColumnBlocks; ++cb)
      tma_load_4d(tiles + stage * Cfg::kKVTileBytes + cb * Cfg::kBlockKV * 128, map, bar + 8 * stage, cb * 64,
                  at.key0 + t * Cfg::kBlockKV, at.kv_head, at.seq);
  }

  // Thread 0, before the CTA-wide barrier: the mbarriers, then (TMA) the
  // first work tile's K(0) and Q.
  __device__ __forceinline__ void init_barriers() const {
    if constexpr (kTma) {
      tma_prefetch_map(&hp.q_map);
      tma_prefetch_map(&hp.k_map);
      tma_prefetch_map(&hp.v_map);
    }
    // TMA: one arrival (with the byte count) per phase; cp.async: every producer thread.
    const uint32_t producer_arrivals = kTma ? 1 : 128;
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full_k_bar + 8 * s, producer_arrivals);
      mbarrier_init(full_v_bar + 8 * s, producer_arrivals);
      mbarrier_init(empty_k_bar + 8 * s, Cfg::kConsumerWarps);  // one arrival per consumer warp
      mbarrier_init(empty_v_bar + 8 * s, Cfg::kConsumerWarps);
    }
    for (int s = 0; s < Cfg::kQSlots; ++s) {
      mbarrier_init(q_full_bar + 8 * s, producer_arrivals);
      mbarrier_init(q_empty_bar + 8 * s, Cfg::kConsumerWarps);
    }
    mbarrier_init_fence();
    // TMA launches are programmatic (hopper_prefill.cu): the setup above
    // overlapped the end of the grid before, and reads nothing but the
    // parameters (a dense view reads no memory); that grid's outputs (our
    // Q, K, V) are read only from here on. Launched plainly it returns at once.
    pdl_wait();
    if constexpr (kTma) {
      // Thread 0 is the producer's leader: the first S needs K(0) and Q, so
      // they go out now, before the CTA-wide barrier and the register
      // hand-over (stage 0 is free).
      if (first_kv_tiles > 0) {
        const uint64_t ts = probe_time(probe);
        const TmaCoords at = coords_of(first_view);
        tma_kv(&hp.k_map, K_smem, full_k_bar, at, 0, 0);
        span(ProbeSpanKind::kLoadIssueK, 0, ts);
        tma_q(at, 0);
      }
    }
  }
};

}  // namespace flashscope::kernels::hopper_detail
