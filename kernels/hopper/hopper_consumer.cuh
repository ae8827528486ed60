// The consumer warpgroups of the Hopper prefill kernel (warpgroups 1+, 64
// rows each; setmaxnreg.inc). Per KV tile t, each:
//   S = Q·K(t)ᵀ   wgmma m64nBLOCK_KVk16, A = Q and B = K both from shared
//                 memory (K-major, 128-byte swizzle), DIM/16 instructions;
//                 K(t)'s stage is released as soon as it has finished
//   softmax       mask, running max m, l, P = exp2(S − m) in registers (the
//                 accumulator layout is mma's C layout: kernels/common/row_ops.cuh).
//                 After a work tile's first key tile, at the m it already
//                 has: no row maximum and no O rescale, as long as no p
//                 passes 4096 (a warpgroup vote on the row sums; where it
//                 fails, S is recomputed and the exact step runs), so the
//                 softmax of one warpgroup fits under the other's GEMMs
//                 (bench/TUNING.md#hopper-prefill). K(t) is released after
//                 the vote, since a recompute reads it.
//   O += P·V(t)   wgmma m64nDIMk16, A = P from registers (the C layout of two
//                 n8 tiles is the A layout of one k16 tile), B = V from
//                 shared memory, N-major (transposed), BLOCK_KV/16
//                 instructions; then V(t)'s stage is released
// pipelined inside the warpgroup: S(t+1) and P(t)·V(t) are issued together
// (O took softmax(t)'s rescale as soon as P(t-1)·V(t-1) had finished), and
// the softmax of tile t+1 runs while P(t)·V(t) is on the tensor cores. With
// PINGPONG the warpgroups also take turns issuing, so one's softmax runs
// under another's GEMMs. Releasing K and V separately lets two stages do
// what three did when a stage was freed only after P·V.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/hopper_ptx.cuh"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/row_ops.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/hopper/hopper_cta.cuh"
#include "kernels/hopper/hopper_epilogue.cuh"

namespace flashscope::kernels::hopper_detail {

using namespace sm90;  // the wgmma, TMA and mbarrier wrappers (hopper_ptx.cuh)

// A consumer warpgroup's registers and the steps on them that do not depend
// on the work tile. Holds the consumer's own values by reference (as the
// lambdas these steps were did).
template <typename Cta>
struct HopperConsumer {
  using CtaType = Cta;
  using Cfg = typename Cta::Config;
  using T = typename Cta::Elem;
  using Mma = MmaType<T>;
  static constexpr int DIM = Cfg::kDim;
  static constexpr int BLOCK_Q = Cfg::kBlockQ;
  static constexpr int BLOCK_KV = Cfg::kBlockKV;
  // Named barriers: 0 the CTA's, 1 + g warpgroup g's turn, kVoteBarrier + g
  // its vote, kStoreBarrier + g its O written to shared memory.
  static constexpr int kRing = Cfg::kConsumerWarpgroups;
  static constexpr int kVoteBarrier = 1 + kRing;
  static constexpr int kStoreBarrier = kVoteBarrier + kRing;

  const Cta& cta;
  const int& warpgroup;
  float (&O_rmem)[DIM / 2];  // [64 x DIM] of the warpgroup in the accumulator layout
  float (&S_rmem)[BLOCK_KV / 2];
  uint32_t (&P_rmem)[BLOCK_KV / 16][4];
  // Row state for rows lane/4 (h = 0) and lane/4 + 8 (h = 1) of the warp's
  // 16; l is this thread's partial sum, reduced across the quad at the end.
  float (&m_rmem)[2];
  float (&l_rmem)[2];
  // Probed launches: the exact running maximum of each row, for the row
  // states they record (the kernel's own m may lag it: softmax_at_running_max).
  float (&m_traced)[2];
  // Descriptors of stage 0's K and V tiles, and of this warpgroup's rows of
  // the current work tile's Q (set per work tile: its slot).
  const uint64_t& K_desc;
  const uint64_t& V_desc;
  const uint64_t& Q_desc;

  // S = Q·K(t)ᵀ, issued (not waited for): k16 step kk reads column block
  // kk/4 at byte (kk%4)·32 of Q's and K's rows.
  __device__ __forceinline__ void issue_S(int stage) const {
    const uint64_t K_tile = smem_desc_add(K_desc, stage * Cfg::kKVTileBytes);
#pragma unroll
    for (int kk = 0; kk < DIM / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;
      Wgmma<T>::template ss<BLOCK_KV, 0>(S_rmem, smem_desc_add(Q_desc, (kk / 4) * BLOCK_Q * 128 + col),
                                         smem_desc_add(K_tile, (kk / 4) * BLOCK_KV * 128 + col), kk > 0 ? 1 : 0);
    }
  }
  // O += P·V(t), issued: k16 step kk reads keys [16kk, 16kk + 16), two 8-row
  // atoms. A work tile's first (`first`) overwrites O instead, so O needs no
  // zeroing per work tile.
  __device__ __forceinline__ void issue_PV(int stage, bool first) const {
    const uint64_t V_tile = smem_desc_add(V_desc, stage * Cfg::kKVTileBytes);
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {
      const uint64_t desc_v = smem_desc_add(V_tile, kk * 16 * 128);
      if constexpr (DIM == 256) {
        Wgmma<T>::template rs_n256<1>(O_rmem, P_rmem[kk], desc_v, kk > 0 || !first);
      } else if constexpr (DIM == 128) {
        Wgmma<T>::template rs_n128<1>(O_rmem, P_rmem[kk], desc_v, kk > 0 || !first);
      } else {
        Wgmma<T>::template rs_n64<1>(O_rmem, P_rmem[kk], desc_v, kk > 0 || !first);
      }
    }
  }
  __device__ __forceinline__ void rescale_O(const float (&rescale)[2]) const { rows::rescale_rows(O_rmem, rescale); }
  // P as A fragments: the C layout of n8 tiles 2kk and 2kk+1 is the A layout of k16 tile kk.
  __device__ __forceinline__ void pack_P() const { rows::pack_p<Mma>(S_rmem, P_rmem); }
  // One arrival per warp: this warp's wgmmas are done reading the stage's K (or V, or Q).
  __device__ __forceinline__ void release(uint32_t empty_bar, int stage) const {
    __syncwarp();
    if (cta.lane_id == 0) mbarrier_arrive(empty_bar + 8 * stage);
  }

  // Whether O leaves through the Q slot (kOThroughQSlot; hopper_epilogue.cuh):
  // the same for every work tile of a launch.
  __device__ __forceinline__ bool o_through_q_slot() const {
    if constexpr (Cfg::kOThroughQSlot) return cta.hp.o_map_ok;
    else return false;
  }

  // Ping-pong: warpgroup g issues its wgmmas only after g-1 has issued its
  // own (named barrier 1 + g, 256 threads: g syncs, g-1 arrives); the last
  // warpgroup opens the ring for the first once, and leaves out its final
  // arrive (on the last work tile with keys) so every barrier sees as many
  // arrivals as syncs. Both warpgroups take the same turns on every work tile.
  __device__ __forceinline__ void take_turn() const {
    if constexpr (Cfg::kPingPong) named_barrier_sync(1 + warpgroup, 256);
  }
  __device__ __forceinline__ void pass_turn(bool last_item) const {
    if constexpr (Cfg::kPingPong)
      if (!(last_item && warpgroup == kRing - 1)) named_barrier_arrive(1 + (warpgroup + 1) % kRing, 256);
  }
};

// The softmax steps of one work tile, on a consumer's registers. Holds the
// work tile's values by reference (as the lambdas these steps were did).
template <typename Cta>
struct HopperTileSoftmax {
  using Cfg = typename Cta::Config;
  using View = typename Cta::ViewType;
  using Probe = typename Cta::ProbeType;
  static constexpr bool kCausal = Cta::kIsCausal;
  static constexpr bool kExtras = Cta::kHasExtras;
  static constexpr int BLOCK_KV = Cfg::kBlockKV;
  static constexpr int kVoteBarrier = HopperConsumer<Cta>::kVoteBarrier;
  // Tiles after a work tile's first take their softmax at the running maximum
  // (softmax_at_running_max below) unless a p would pass this bound.
  static constexpr float kRunningMaxBound = 4096.0f;

  const HopperConsumer<Cta>& c;
  const View& view;
  const int& kv_begin;
  const int& kv_end;
  const int& warp_row0;

  // EXTRAS: soft-caps tile t's logits (before any mask: a masked logit
  // stays -inf), then masks each row's keys outside its window, past its
  // diagonal (causal) and past the range. cap·tanh(x) = cap − 2·cap/(e^{2x} + 1)
  // on exp2 and rcp.approx: accurate to float rounding, where tanh.approx's
  // 2^-11 relative error would move a logit by 0.02 at cap 50.
  __device__ __forceinline__ void cap_and_mask_tile(int t) const {
    const auto& cta = c.cta;
    const int lane_id = cta.lane_id;
    float(&S_rmem)[BLOCK_KV / 2] = c.S_rmem;
    const float c1 = cta.hp.softcap_c1, c2 = cta.hp.softcap_c2;
    if (c2 > 0.0f) {
#pragma unroll
      for (int i = 0; i < BLOCK_KV / 2; ++i)
        S_rmem[i] = fmaf(-2.0f * c2, fast_rcp(fast_exp2(S_rmem[i] * c1) + 1.0f), c2);
    }
    const int k0 = kv_begin + t * BLOCK_KV;
    const int wl = cta.hp.extras.window_left;
    const int wr = kCausal ? 0 : cta.hp.extras.window_right;
    // Row r sees keys [lo(r), hi(r)); both grow with r, so a tile inside
    // the warp's last row's lo and first row's hi needs no mask.
    auto lo_of = [&](int row) { return wl >= 0 ? view.last_key(row) - wl : 0; };
    auto hi_of = [&](int row) { return wr >= 0 ? min(kv_end, view.last_key(row) + wr + 1) : kv_end; };
    if (k0 >= lo_of(warp_row0 + 15) && k0 + BLOCK_KV <= hi_of(warp_row0)) return;
    int lo[2], hi[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + lane_id / 4 + h * 8;
      lo[h] = lo_of(row) - k0 - (lane_id % 4) * 2;
      hi[h] = hi_of(row) - k0 - (lane_id % 4) * 2;
    }
#pragma unroll
    for (int i = 0; i < BLOCK_KV / 2; ++i) {
      const int col = (i / 4) * 8 + (i % 2);
      if (col < lo[(i / 2) % 2] || col >= hi[(i / 2) % 2]) S_rmem[i] = -INFINITY;
    }
  }

  // Masks tile t's logits: keys past the range, causal keys past each row's diagonal.
  __device__ __forceinline__ void mask_tile(int t) const {
    if constexpr (kExtras) {
      cap_and_mask_tile(t);
      return;
    }
    const int lane_id = c.cta.lane_id;
    float(&S_rmem)[BLOCK_KV / 2] = c.S_rmem;
    const int k0 = kv_begin + t * BLOCK_KV;
    if (k0 + BLOCK_KV > kv_end || (kCausal && k0 + BLOCK_KV - 1 > view.last_key(warp_row0))) {
      // Element i of this thread is column k0 + 2·(lane%4) + (i/4)·8 + (i%2)
      // of row h = (i/2)%2. Causal: each row's end (past its diagonal or
      // the range) is worked out once, and an element costs a compare of
      // a constant with it and a select.
      if constexpr (kCausal) {
        int limit[2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
          limit[h] = min(kv_end, view.last_key(warp_row0 + lane_id / 4 + h * 8) + 1) - k0 - (lane_id % 4) * 2;
#pragma unroll
        for (int i = 0; i < BLOCK_KV / 2; ++i)
          if ((i / 4) * 8 + (i % 2) >= limit[(i / 2) % 2]) S_rmem[i] = -INFINITY;
      } else {
#pragma unroll
        for (int i = 0; i < BLOCK_KV / 2; ++i)
          if (k0 + (i / 4) * 8 + (lane_id % 4) * 2 + (i % 2) >= kv_end) S_rmem[i] = -INFINITY;
      }
    }
  }

  // Masks tile t, then turns S into probabilities in place: running max m,
  // l rescaled and summed. Returns the factor O must be rescaled by, which
  // the caller applies once the P·V still reading O has finished.
  __device__ __forceinline__ void softmax(int t, float (&rescale)[2]) const {
    const auto& cta = c.cta;
    const auto& p = cta.p;
    const int k0 = kv_begin + t * BLOCK_KV;
    mask_tile(t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row_max = rows::row_max(c.S_rmem, h);
      const float m_old = c.m_rmem[h];
      const float m_new = fmaxf(m_old, row_max * p.scale_log2);
      c.m_rmem[h] = m_new;
      const float m_use = rows::exp2_offset(m_new);  // all masked so far: exp2(-inf - 0) = 0, not NaN
      rescale[h] = fast_exp2(m_old - m_use);
      const float row_sum = rows::exp2_row(c.S_rmem, h, p.scale_log2, m_use);
      c.l_rmem[h] = c.l_rmem[h] * rescale[h] + row_sum;
      if constexpr (Probe::kEnabled) {
        // The keys of this tile the row sees: those before kv_end and, causal, up to its diagonal.
        const int row = warp_row0 + cta.lane_id / 4 + h * 8;
        const int key_end = kCausal ? min(kv_end, view.last_key(row) + 1) : kv_end;
        probe_row_state(cta.probe, view.probe_query(row, cta.hp.probe.traced_head), cta.probe_tile0 + t, m_new,
                        row_max * p.scale_log2, rescale[h], row_sum, c.l_rmem[h],
                        max(0, min(BLOCK_KV, key_end - k0)));
        c.m_traced[h] = m_new;
      }
    }
  }

  // The softmax of tile t at the running maximum as it stands: P = exp2(S·scale − m)
  // in place, no row maximum looked for and nothing for O to rescale. It
  // holds when every p stays at most kRunningMaxBound, i.e. no logit of the
  // tile exceeds m by more than log2 of it: each thread's sum of its p (the
  // sums are taken anyway) bounds every one of them (a NaN fails it too).
  // Voted across the warpgroup (every warp then takes the same path, and
  // the S that a failed vote recomputes is one wgmma of all four): true
  // adds the sums to l; false leaves m and l as they were and S spoiled.
  // In exact arithmetic the outputs are those of the exact recurrence; a
  // probed launch computes the same bits and records the exact recurrence's
  // state, converted from its own (m lags the row maximum by a factor f).
  __device__ __forceinline__ bool softmax_at_running_max(int t) const {
    const auto& cta = c.cta;
    const auto& p = cta.p;
    float(&m_rmem)[2] = c.m_rmem;
    float(&l_rmem)[2] = c.l_rmem;
    mask_tile(t);
    float tile_max[2] = {-INFINITY, -INFINITY};  // probed launches only: the tile's row maxima
    if constexpr (Probe::kEnabled) {
#pragma unroll
      for (int h = 0; h < 2; ++h) tile_max[h] = rows::row_max(c.S_rmem, h) * p.scale_log2;
    }
    float row_sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_use = rows::exp2_offset(m_rmem[h]);  // as in the exact step
      row_sum[h] = rows::exp2_row(c.S_rmem, h, p.scale_log2, m_use);
    }
    // A row that has seen no key yet (m = -inf) holds only while it still
    // sees none (its p are 0): its first key takes the exact step, which sets m.
    const bool held = row_sum[0] <= kRunningMaxBound && row_sum[1] <= kRunningMaxBound &&
                      (m_rmem[0] != -INFINITY || row_sum[0] == 0.0f) &&
                      (m_rmem[1] != -INFINITY || row_sum[1] == 0.0f);
    // __all_sync of a value already uniform: it tells ptxas so, and the
    // branches on it stay warp-uniform (without it, divergent-branch code
    // and spills in the loop).
    const bool all_held = __all_sync(0xffffffffu, named_barrier_all(kVoteBarrier + c.warpgroup, 128, held));
    if (all_held) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_rmem[h] += row_sum[h];
        if constexpr (Probe::kEnabled) {
          const int k0 = kv_begin + t * BLOCK_KV;
          const int row = warp_row0 + cta.lane_id / 4 + h * 8;
          const int key_end = kCausal ? min(kv_end, view.last_key(row) + 1) : kv_end;
          const float m_new = fmaxf(c.m_traced[h], tile_max[h]);
          // exact state = the kernel's · f (1 where both are -inf: nothing seen yet)
          const float f = m_rmem[h] == m_new ? 1.0f : fast_exp2(m_rmem[h] - m_new);
          const float rescale_traced = c.m_traced[h] == m_new ? 1.0f : fast_exp2(c.m_traced[h] - m_new);
          probe_row_state(cta.probe, view.probe_query(row, cta.hp.probe.traced_head), cta.probe_tile0 + t, m_new,
                          tile_max[h], rescale_traced, row_sum[h] * f, l_rmem[h] * f,
                          max(0, min(BLOCK_KV, key_end - k0)));
          c.m_traced[h] = m_new;
        }
      }
    }
    return all_held;
  }
};

// One work tile's key tiles on a consumer warpgroup, as the steps of its
// pipeline (hopper_consumer's comment has the schedule):
//   first_tile   K(0) and Q waited for, S(0) issued and waited for, softmax(0)
//   next_tile(t) S(t) with P(t-1)·V(t-1), softmax(t) at the running maximum
//                (or S(t) again and the exact softmax), O's rescale
//   last_PV      P(last)·V(last)
// Holds the consumer's and the work tile's values by reference (as the
// lambdas these steps were did).
template <typename Cta>
struct HopperKeyPipeline {
  using Cfg = typename Cta::Config;
  static constexpr int STAGES = Cfg::kStages;
  static constexpr bool kPersistent = Cta::kIsPersistent;

  const HopperConsumer<Cta>& c;
  const HopperTileSoftmax<Cta>& tile;
  // The ring slots and Q rounds before this work tile (as the producer counts them).
  const int& ring;
  const int& q_round;
  const int& num_kv_tiles;
  const uint32_t& Q_rows;  // this warpgroup's rows' offset in a Q slot
  uint64_t& Q_desc;        // c.Q_desc: set to the work tile's Q slot by first_tile
  float (&rescale)[2];     // softmax(t)'s factor for O, applied once P(t-1)·V(t-1) is done
  int& stored_q_slot;      // kOThroughQSlot: the Q slot the last work tile's O left through (-1: none)

  // Ring slot of tile t: its stage, and the parity of that stage's barriers.
  __device__ __forceinline__ int stage_of(int t) const { return (ring + t) % STAGES; }
  __device__ __forceinline__ uint32_t parity_of(int t) const { return uint32_t(((ring + t) / STAGES) & 1); }

  // Persistent: after the work tile's last Q·Kᵀ, Q's buffer may take the
  // next tile's; when O leaves through it, once the store has read it.
  __device__ __forceinline__ void release_q_after(int t) const {
    if constexpr (kPersistent) {
      if constexpr (Cfg::kOThroughQSlot) {
        if (t == num_kv_tiles - 1 && !c.o_through_q_slot()) c.release(c.cta.q_empty_bar, q_round % Cfg::kQSlots);
      } else {
        // (kept apart: the condition above, folded, still moves ptxas to spill in other configurations)
        if (t == num_kv_tiles - 1) c.release(c.cta.q_empty_bar, q_round % Cfg::kQSlots);
      }
    }
  }
  // P(t)·V(t) into O, issued once V(t) has landed (O has taken
  // softmax(t)'s rescale already).
  __device__ __forceinline__ void issue_PV_after_V(int t) const {
    const auto& cta = c.cta;
    const uint64_t ts = probe_time(cta.probe);
    mbarrier_wait(cta.full_v_bar + 8 * stage_of(t), parity_of(t));  // V(t) has landed
    cta.span(ProbeSpanKind::kLoadWaitV, t, ts);
    wgmma_fence();  // the rescaled O and P were written by ordinary instructions
    c.issue_PV(stage_of(t), t == 0);
    wgmma_commit();
  }

  // Tile 0: nothing in O to rescale (P(0)·V(0) overwrites it).
  __device__ __forceinline__ void first_tile() const {
    const auto& cta = c.cta;
    uint64_t ts = probe_time(cta.probe);
    const int q_slot = q_round % Cfg::kQSlots;
    Q_desc = smem_desc_sw128(cta.Q_smem + q_slot * Cfg::kQBytes + Q_rows, 0, 1024);
    mbarrier_wait(cta.q_full_bar + 8 * q_slot, (q_round / Cfg::kQSlots) & 1);
    mbarrier_wait(cta.full_k_bar + 8 * stage_of(0), parity_of(0));  // K(0)
    cta.span(ProbeSpanKind::kLoadWaitK, 0, ts);
    c.take_turn();
    ts = probe_time(cta.probe);
    wgmma_fence();
    c.issue_S(stage_of(0));
    wgmma_commit();
    c.pass_turn(false);
    wgmma_wait<0>();
    fence_operands(c.S_rmem);
    if constexpr (Cfg::kOThroughQSlot) {
      // The last work tile's O went out before this S(0) was issued: its
      // store has read the slot by now, so the wait costs nothing.
      if (stored_q_slot >= 0) release_stored_q_slot(c, stored_q_slot);
      stored_q_slot = -1;
    }
    c.release(cta.empty_k_bar, stage_of(0));
    release_q_after(0);
    cta.span(ProbeSpanKind::kQK, 0, ts);
    ts = probe_time(cta.probe);
    tile.softmax(0, rescale);
    c.pack_P();
    cta.span(ProbeSpanKind::kSoftmax, 0, ts);
  }

  // Tile t > 0: S(t) issued beside P(t-1)·V(t-1), whose wait frees V(t-1).
  __device__ __forceinline__ void next_tile(int t) const {
    const auto& cta = c.cta;
    uint64_t ts = probe_time(cta.probe);
    mbarrier_wait(cta.full_k_bar + 8 * stage_of(t), parity_of(t));  // K(t) has landed
    cta.span(ProbeSpanKind::kLoadWaitK, t, ts);
    c.take_turn();
    const uint64_t t_issue = probe_time(cta.probe);
    wgmma_fence();  // P was written by ordinary instructions
    c.issue_S(stage_of(t));
    wgmma_commit();
    issue_PV_after_V(t - 1);
    c.pass_turn(false);
    wgmma_wait<1>();  // S(t) is done; P(t-1)·V(t-1) may still run
    fence_operands(c.S_rmem);
    cta.span(ProbeSpanKind::kQK, t, t_issue);
    ts = probe_time(cta.probe);
    const bool held = tile.softmax_at_running_max(t);
    cta.span(ProbeSpanKind::kSoftmax, t, ts);
    wgmma_wait<0>();  // P(t-1)·V(t-1) is done: O and P may be touched, V(t-1) is free
    fence_operands(c.O_rmem);
    cta.span(ProbeSpanKind::kPV, t - 1, t_issue);
    c.release(cta.empty_v_bar, stage_of(t - 1));
    if (!held) {
      // A new maximum (or a NaN): S(t) again, from the Q and K(t) still
      // held, with nothing else in flight; then the exact softmax, and
      // O's rescale by its factor before P(t)·V(t) adds to O.
      wgmma_fence();
      c.issue_S(stage_of(t));
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(c.S_rmem);
      tile.softmax(t, rescale);
      c.rescale_O(rescale);
    }
    c.release(cta.empty_k_bar, stage_of(t));  // K(t) and Q are read for the last time above
    release_q_after(t);
    c.pack_P();
  }

  // The last P·V; the work tile's last turn (last_item: the CTA's last work
  // tile with keys) is not passed on.
  __device__ __forceinline__ void last_PV(bool last_item) const {
    const auto& cta = c.cta;
    const int last = num_kv_tiles - 1;
    c.take_turn();
    const uint64_t ts = probe_time(cta.probe);
    issue_PV_after_V(last);
    c.pass_turn(last_item);
    wgmma_wait<0>();
    fence_operands(c.O_rmem);
    cta.span(ProbeSpanKind::kPV, last, ts);
    c.release(cta.empty_v_bar, stage_of(last));
  }
};

// A consumer warpgroup's work: every work tile of the CTA in turn, each
// through its pipeline of key tiles and its epilogue.
//   issue S(t), PV(t-1) | wait S(t), release K(t) | softmax(t) |
//   wait PV(t-1), release V(t-1) | O *= rescale(t) | P = pack
// O takes softmax(t)'s rescale once P(t-1)·V(t-1) has finished, outside the
// warpgroup's turn, so a turn holds only the issues (with the descriptor
// adds, each wgmma's descriptor one add from a tile's: bench/TUNING.md#hopper-prefill).
// Probe spans per tile t: the waits for K(t) and V(t), Q·K(t)ᵀ from its
// issue to the wait that sees it done, the softmax, and P·V(t) from its
// issue to its wait (under which the softmax of t+1 ran).
template <typename Cta>
__device__ __forceinline__ void hopper_consumer(const Cta& cta) {
  using Cfg = typename Cta::Config;
  using View = typename Cta::ViewType;
  constexpr int DIM = Cfg::kDim;
  constexpr int BLOCK_KV = Cfg::kBlockKV;
  constexpr bool kPersistent = Cta::kIsPersistent;
  constexpr bool kMaySplit = Cta::Schedule::kMaySplit;
  constexpr int kRing = HopperConsumer<Cta>::kRing;
  const auto& sched = cta.sched;
  if constexpr (Cta::kUsesTma) {
    setmaxnreg_inc<Cfg::kConsumerRegsTma>();
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegsCpAsync>();
  }
  const int warpgroup = cta.warp_id / 4 - 1;
  const int warp_in_group = cta.warp_id % 4;

  float O_rmem[DIM / 2];
#pragma unroll
  for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = 0.0f;
  float S_rmem[BLOCK_KV / 2];
  uint32_t P_rmem[BLOCK_KV / 16][4];
#pragma unroll
  for (int i = 0; i < BLOCK_KV / 2; ++i) S_rmem[i] = 0.0f;
  float m_rmem[2], l_rmem[2];
  float m_traced[2];

  // Each wgmma's descriptor is one of these plus a constant (smem_desc_add):
  // one add in the turn instead of encoding every k16 step's address.
  const uint64_t K_desc = smem_desc_sw128(cta.K_smem, 0, 1024);
  const uint64_t V_desc = smem_desc_sw128(cta.V_smem, BLOCK_KV * 128, 1024);
  const uint32_t Q_rows = warpgroup * Cfg::kWarpgroupRows * Cfg::kSwizzleRowBytes;
  uint64_t Q_desc = smem_desc_sw128(cta.Q_smem + Q_rows, 0, 1024);
  const HopperConsumer<Cta> c{cta, warpgroup, O_rmem, S_rmem, P_rmem, m_rmem, l_rmem, m_traced, K_desc, V_desc, Q_desc};

  int last_keyed_item = -1;  // the last work tile with keys: its final turn is not passed on
  if constexpr (Cfg::kPingPong) {
    last_keyed_item = sched.last_keyed_item(cta.first_item, cta.first_kv_tiles);
    if (last_keyed_item >= 0 && warpgroup == kRing - 1) named_barrier_arrive(1, 256);
  }

  int ring = 0, q_round = 0;  // as the producer counts them
  int stored_q_slot = -1;
  for (int item = cta.first_item; item < sched.items; ++item) {
    if (!sched.has_work(item)) continue;
    const View view = kPersistent && item > cta.first_item ? sched.work_view(item) : cta.first_view;
    const int num_kv_tiles =
        kPersistent && item > cta.first_item ? Cta::Schedule::kv_tiles_of(view) : cta.first_kv_tiles;
    const int kv_begin = view.kv_begin;
    const int kv_end = view.kv_end;
    const int warp_row0 = view.q0 + warpgroup * Cfg::kWarpgroupRows + warp_in_group * 16;
    // O: the first P·V overwrites it (issue_PV); a work tile without keys stores zeros.
    if (num_kv_tiles == 0) {
#pragma unroll
      for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) m_rmem[h] = -INFINITY, l_rmem[h] = 0.0f, m_traced[h] = -INFINITY;
    const HopperTileSoftmax<Cta> tile{c, view, kv_begin, kv_end, warp_row0};
    float rescale[2] = {1.0f, 1.0f};  // softmax(t)'s factor for O, applied once P(t-1)·V(t-1) is done
    if constexpr (Cfg::kOThroughQSlot) {
      if (num_kv_tiles == 0 && stored_q_slot >= 0) {  // no S(0) to release it behind (first_tile)
        release_stored_q_slot(c, stored_q_slot);
        stored_q_slot = -1;
      }
    }
    const HopperKeyPipeline<Cta> keys{c, tile, ring, q_round, num_kv_tiles, Q_rows, Q_desc, rescale, stored_q_slot};
    if (num_kv_tiles > 0) keys.first_tile();
    for (int t = 1; t < num_kv_tiles; ++t) keys.next_tile(t);
    if (num_kv_tiles > 0) keys.last_PV(item == last_keyed_item);
    const uint64_t epilogue_start = probe_time(cta.probe);
    if constexpr (kMaySplit) {
      if (item >= sched.whole_rounds) {
        const SplitTail::Piece piece = cta.hp.split.piece_in_order(blockIdx.x, item - sched.whole_rounds);
        if (piece.shared && !merge_shared_piece(c, piece.tile)) {
          if constexpr (Cfg::kOThroughQSlot)
            if (c.o_through_q_slot() && num_kv_tiles > 0) c.release(cta.q_empty_bar, q_round % Cfg::kQSlots);
          ring += num_kv_tiles;
          q_round += num_kv_tiles > 0;
          continue;
        }
      }
    }
    if constexpr (Cfg::kOThroughQSlot) {
      if (c.o_through_q_slot() && num_kv_tiles > 0) {
        const int q_slot = q_round % Cfg::kQSlots;
        store_output_through_q_slot(c, view, warp_row0, cta.Q_smem + q_slot * Cfg::kQBytes);
        stored_q_slot = q_slot;
      } else {
        store_output(c, view, warp_row0);
      }
    } else {
      store_output(c, view, warp_row0);
    }
    cta.span(ProbeSpanKind::kEpilogue, -1, epilogue_start);
    ring += num_kv_tiles;
    q_round += num_kv_tiles > 0;
  }
  if constexpr (Cfg::kOThroughQSlot) {
    if (stored_q_slot >= 0) release_stored_q_slot(c, stored_q_slot);  // shared memory outlives the store's read
  }
  cta.cta_end();
}

}  // namespace flashscope::kernels::hopper_detail
