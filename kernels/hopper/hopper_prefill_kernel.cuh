// FlashAttention forward for Hopper (sm_90a): warpgroup MMAs from shared
// memory, a producer warpgroup that feeds a ring of K/V stages through
// mbarriers, and consumer warpgroups that never load anything themselves.
//
//   O[q, :] = sum_j softmax_j(scale · Q[q]·K[j]) V[j, :]
//
// CTA of (1 + CONSUMERS) warpgroups, one per work tile (q-tile of
// 64·CONSUMERS rows, q-head, sequence), or with dense tensors through TMA
// persistent: one per SM taking several work tiles in turn. Read by role:
//   hopper_layout.cuh    the config (tiles, stages, shared memory, registers)
//                        and the parameters
//   hopper_schedule.cuh  the tile scheduler: which work tiles a CTA takes
//                        (persistent deal, split tail)
//   hopper_cta.cuh       what the warpgroups share: shared-memory map,
//                        mbarriers, the first work tile's loads
//   hopper_producer.cuh  warpgroup 0: Q, K and V through TMA or cp.async
//   hopper_consumer.cuh  warpgroups 1+: S = Q·Kᵀ, the softmax step, O += P·V
//   hopper_epilogue.cuh  O and the LSE stored; the split tail's merge
// and this file, the kernel: the CTA's setup and which warpgroup does what.
//
// Semantics are those of prefill_kernel.cuh: causal bottom-right aligned with
// tiles past the diagonal skipped and the diagonal masked, GQA, varlen,
// tails of any length, optional LSE, split-KV partials for paged views.
//
// Probe (kernels/common/probe.cuh): NoProbe in production (every hook
// empty); GlobalTimerProbe for the trace capture: CTA stamps, the producer's
// copy issues, each consumer warp's waits, Q·Kᵀ, softmax, P·V and epilogue,
// and the online-softmax state of traced rows. A span of an asynchronous
// phase runs from its issue to the wait that sees it finish.
//
// The roles' functions hold the kernel's own values by reference (they were
// lambdas inside this kernel once), which keeps the kernel's registers and
// its main loop's instructions as they were.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing is linked from the driver API)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_views.cuh"
#include "kernels/attention/persistent_deal.h"
#include "kernels/common/hopper_ptx.cuh"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/hopper/hopper_consumer.cuh"
#include "kernels/hopper/hopper_cta.cuh"
#include "kernels/hopper/hopper_layout.cuh"
#include "kernels/hopper/hopper_producer.cuh"
#include "kernels/hopper/hopper_schedule.cuh"

namespace flashscope::kernels {

// PERSISTENT: dense views through TMA, no probes (hopper_schedule.cuh). The
// K/V ring, Q's barriers and the consumers' turns run on from one work tile
// to the next: the producer loads the next tile's first K as soon as a stage
// is free and its Q once both warpgroups' last Q·Kᵀ of the current tile has
// read Q, all under the last softmax, P·V and epilogue, which a CTA per work
// tile would spend waiting on its first loads.
//
// EXTRAS: the sliding window and the logit soft-cap (hp.extras,
// hp.softcap_*), read at run time by their own instantiations
// so the kernels without them keep their code: dense views through TMA, no
// probes; the schedule skips the key tiles outside the windows
// (hopper_schedule.cuh), the consumers cap and mask (hopper_consumer.cuh).
template <typename Cfg, typename T, bool kCausal, typename View, bool kTma, typename Probe = NoProbe,
          bool kPersistent = false, bool kExtras = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1) hopper_attention_kernel(
    const __grid_constant__ typename Probe::template Params<HopperParams<typename View::Params>> hp) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace hopper_detail;
  using Cta = HopperCta<Cfg, T, kCausal, View, kTma, Probe, kPersistent, kExtras>;
  using Schedule = typename Cta::Schedule;
  constexpr int STAGES = Cfg::kStages;
  static_assert(!kPersistent || (kTma && !Probe::kEnabled && kViewTakesTileCoords<View>),
                "persistent CTAs: dense views through TMA, no probes");
  static_assert(!kExtras || (kTma && !Probe::kEnabled && kViewTakesTileCoords<View>),
                "windows and soft-cap: dense views through TMA, no probes");
  const auto& p = hp.view;

  const int tid = threadIdx.x;
  const int warp_id = tid / 32;
  const int lane_id = tid % 32;
  typename Probe::Ctx probe;
  probe_cta_start(probe, hp);

  // Which rows and keys this CTA owns: its items (hopper_schedule.cuh).
  const bool split = Schedule::kMaySplit && hp.split.split_tiles > 0;
  const PersistentDeal& deal = hp.deal;
  const int whole_rounds = kPersistent ? deal.rounds : 1;
  const int items = whole_rounds + (split ? hp.split.pieces(blockIdx.x) : 0);
  const Schedule sched{hp, p, deal, whole_rounds, items};
  int first_item = 0;
  if constexpr (kPersistent) {
    while (first_item < items && !sched.has_work(first_item)) ++first_item;
    if (first_item == items) return;  // no entry falls to this CTA
  }
  const View first_view = sched.work_view(first_item);
  if (!first_view.active()) return;  // varlen: a shorter sequence than the longest (the whole CTA leaves)
  const int first_kv_tiles = Schedule::kv_tiles_of(first_view);
  const int probe_tile0 = first_view.kv_begin / Cfg::kBlockKV;
  probe_select_view(probe, first_view, warp_id);

  // Shared memory (hopper_cta.cuh): Q slots, the K and V stages, the barriers.
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t Q_smem = smem_base + Cfg::kQOffset;
  const uint32_t K_smem = smem_base + Cfg::kKOffset;
  const uint32_t V_smem = smem_base + Cfg::kVOffset;
  const uint32_t full_k_bar = smem_base + Cfg::kBarrierOffset;
  const uint32_t full_v_bar = full_k_bar + 8 * STAGES;
  const uint32_t empty_k_bar = full_v_bar + 8 * STAGES;
  const uint32_t empty_v_bar = empty_k_bar + 8 * STAGES;
  const uint32_t q_full_bar = empty_v_bar + 8 * STAGES;
  const uint32_t q_empty_bar = q_full_bar + 8 * Cfg::kQSlots;
  const Cta cta{hp,          p,           probe,       sched,       tid,        warp_id,     lane_id,
                first_item,  first_view,  first_kv_tiles, probe_tile0, Q_smem,  K_smem,      V_smem,
                full_k_bar,  full_v_bar,  empty_k_bar, empty_v_bar, q_full_bar, q_empty_bar};

  if (tid == 0) cta.init_barriers();
  __syncthreads();  // the barriers exist before anyone waits on them
  // Every thread, before its first global access (O, LSE, the split
  // workspace: the grid before may be this launch's previous call, writing
  // the same buffers). The next grid may be scheduled once every CTA has
  // passed here: its CTAs then take SMs as ours leave, and wait in turn.
  pdl_wait();
  pdl_launch_dependents();

  if (warp_id < 4) {
    hopper_producer(cta);  // warpgroup 0
  } else {
    hopper_consumer(cta);  // warpgroups 1+, 64 rows each
  }
#endif  // sm_90a
}

}  // namespace flashscope::kernels
