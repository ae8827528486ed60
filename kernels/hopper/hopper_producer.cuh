// The producer warpgroup of the Hopper prefill kernel (warpgroup 0): it
// gives its registers away (setmaxnreg.dec), then loads Q once per work tile
// and K(t), V(t) into stage t % STAGES of the ring, each stage's K and V with
// their own "full" and "empty" mbarriers (hopper_cta.cuh).
//   Dense tensors: one thread issues TMA bulk tensor copies (BLOCK_KV-row x
//   64-column boxes, 128-byte swizzle) that complete on the "full" barrier by
//   byte count; the first work tile's K(0) and Q went out before the CTA
//   barrier (HopperCta::init_barriers).
//   Varlen and the paged cache: all 128 threads copy with cp.async through
//   the same View interface as the sm80 kernels (attention_views.cuh), wait
//   for their own copies, fence them to the async proxy and arrive.
#pragma once

#include <cstdint>

#include "kernels/common/hopper_ptx.cuh"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/hopper/hopper_cta.cuh"

namespace flashscope::kernels::hopper_detail {

using namespace sm90;  // the wgmma, TMA and mbarrier wrappers (hopper_ptx.cuh)

// TMA: lane 0 of warp 0 issues the bulk tensor copies, for every work tile
// of the CTA in turn; a barrier completes when the announced bytes have
// landed (out-of-range rows arrive as zeros). Whole warps take each path, so
// the probe's closing CTA barrier sees every warp arrive once.
template <typename Cta>
__device__ __forceinline__ void producer_tma(const Cta& cta) {
  using Cfg = typename Cta::Config;
  using View = typename Cta::ViewType;
  using Probe = typename Cta::ProbeType;
  constexpr bool kPersistent = Cta::kIsPersistent;
  constexpr int STAGES = Cfg::kStages;
  const int lane_id = cta.lane_id;
  const auto& hp = cta.hp;
  if (cta.warp_id != 0) {
    cta.cta_end();
    return;
  }
  // Production: lane 0 alone (as measured); with probes the whole warp,
  // for the closing barrier.
  if constexpr (!Probe::kEnabled) {
    if (lane_id != 0) return;
  }
  const bool leader = lane_id == 0;
  // `ring` counts the KV tiles of earlier work tiles, `q_round` the
  // earlier work tiles that loaded Q (those with keys).
  int ring = 0, q_round = 0;
  for (int item = cta.first_item; item < cta.sched.items; ++item) {
    if (!cta.sched.has_work(item)) continue;
    const View view = kPersistent && item > cta.first_item ? cta.sched.work_view(item) : cta.first_view;
    const int num_kv_tiles =
        kPersistent && item > cta.first_item ? Cta::Schedule::kv_tiles_of(view) : cta.first_kv_tiles;
    if (num_kv_tiles == 0) continue;
    const TmaCoords at = cta.coords_of(view);
    // Tile t's K goes into K stage (ring + t) % STAGES once the
    // consumers have released that stage's K (after their Q·Kᵀ of the
    // tile STAGES before); its V once they have released the V stage
    // (after that tile's P·V). The order is that of the consumers'
    // needs: K(t+1) before V(t), since S(t+1) is issued together with
    // P(t)·V(t).
    auto load = [&](ProbeSpanKind kind, int t) {
      const bool is_k = kind == ProbeSpanKind::kLoadIssueK;
      const int slot = ring + t;
      mbarrier_wait((is_k ? cta.empty_k_bar : cta.empty_v_bar) + 8 * (slot % STAGES), ((slot / STAGES) & 1) ^ 1);
      const uint64_t ts = probe_time(cta.probe);
      if (leader) {
        if (is_k) cta.tma_kv(&hp.k_map, cta.K_smem, cta.full_k_bar, at, t, slot);
        else cta.tma_kv(&hp.v_map, cta.V_smem, cta.full_v_bar, at, t, slot);
      }
      cta.span(kind, t, ts);
    };
    if (item > cta.first_item) {  // the first tile's K(0) and Q went out before the CTA barrier
      // Q's slot is free once the Q·Kᵀ of the work tile kQSlots back are
      // done: with one slot the current tile's last, so K(0) goes first;
      // with two, one finished long ago, so Q goes first.
      const int slot = q_round % Cfg::kQSlots;
      auto load_q = [&] {
        mbarrier_wait(cta.q_empty_bar + 8 * slot, ((q_round / Cfg::kQSlots) & 1) ^ 1);
        if (leader) cta.tma_q(at, slot);
      };
      if constexpr (Cfg::kQSlots > 1) load_q();
      load(ProbeSpanKind::kLoadIssueK, 0);
      if constexpr (Cfg::kQSlots == 1) load_q();
    }
    for (int t = 0; t < num_kv_tiles; ++t) {
      if (t + 1 < num_kv_tiles) load(ProbeSpanKind::kLoadIssueK, t + 1);
      load(ProbeSpanKind::kLoadIssueV, t);
      if constexpr (Probe::kEnabled) __syncwarp();
    }
    ring += num_kv_tiles;
    ++q_round;
  }
  cta.cta_end();
}

// cp.async: one work tile (the cp.async producer is never persistent), all
// 128 threads copying.
template <typename Cta>
__device__ __forceinline__ void producer_cp_async(const Cta& cta) {
  using Cfg = typename Cta::Config;
  using T = typename Cta::Elem;
  using View = typename Cta::ViewType;
  constexpr int STAGES = Cfg::kStages;
  const int tid = cta.tid;
  const View& view = cta.first_view;
  const int q0 = view.q0, kv_end = view.kv_end;
  const int num_kv_tiles = cta.first_kv_tiles;
  const T* const any_valid = view.q_ptr(q0);  // for zero-filled chunks: never read
  hopper_detail::group_load_tile<Cfg::kBlockQ, Cfg::kDim>(
      cta.Q_smem, [&](int r) { return view.q_ptr(q0 + r); }, view.rows - q0, any_valid, tid);
  cp_async_commit();
  // After issuing tile t, publish what was issued before it (Q, or tile
  // t-1): each thread waits for its own copies, fences them to the async
  // proxy (wgmma reads through it), and arrives; the stage is full when
  // all 128 have.
  auto publish = [&](uint32_t bar) {
    fence_proxy_async_shared();
    mbarrier_arrive(bar);
  };
  // Tile t is published (K and V together) once tile t+1 is issued.
  auto publish_tile = [&](int t) {
    fence_proxy_async_shared();
    mbarrier_arrive(cta.full_k_bar + 8 * (t % STAGES));
    mbarrier_arrive(cta.full_v_bar + 8 * (t % STAGES));
  };
  for (int t = 0; t < num_kv_tiles; ++t) {
    const int stage = t % STAGES;
    mbarrier_wait(cta.empty_k_bar + 8 * stage, ((t / STAGES) & 1) ^ 1);
    mbarrier_wait(cta.empty_v_bar + 8 * stage, ((t / STAGES) & 1) ^ 1);
    const int k0 = view.kv_begin + t * Cfg::kBlockKV;
    const auto keys = view.key_rows(k0, cta.lane_id);
    uint64_t ts = probe_time(cta.probe);
    hopper_detail::group_load_tile<Cfg::kBlockKV, Cfg::kDim>(
        cta.K_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.k_ptr(keys, r); }, kv_end - k0, any_valid,
        tid);
    cta.span(ProbeSpanKind::kLoadIssueK, t, ts);
    ts = probe_time(cta.probe);
    hopper_detail::group_load_tile<Cfg::kBlockKV, Cfg::kDim>(
        cta.V_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.v_ptr(keys, r); }, kv_end - k0, any_valid,
        tid);
    cta.span(ProbeSpanKind::kLoadIssueV, t, ts);
    cp_async_commit();
    cp_async_wait<1>();  // everything but tile t has landed (this lane's copies)
    if (t == 0) publish(cta.q_full_bar);
    else publish_tile(t - 1);
  }
  cp_async_wait<0>();
  if (num_kv_tiles > 0) publish_tile(num_kv_tiles - 1);
  cta.cta_end();
}

// Warpgroup 0 hands its registers to the consumers, then loads.
template <typename Cta>
__device__ __forceinline__ void hopper_producer(const Cta& cta) {
  using Cfg = typename Cta::Config;
  if constexpr (Cta::kUsesTma) {
    setmaxnreg_dec<Cfg::kProducerRegsTma>();
    producer_tma(cta);
  } else {
    setmaxnreg_dec<Cfg::kProducerRegsCpAsync>();
    producer_cp_async(cta);
  }
}

}  // namespace flashscope::kernels::hopper_detail
