// FlashAttention forward for Hopper (sm_90a): warpgroup MMAs from shared
// memory, a producer warpgroup that feeds a ring of K/V stages through
// mbarriers, and consumer warpgroups that never load anything themselves.
//
//   O[q, :] = sum_j softmax_j(scale · Q[q]·K[j]) V[j, :]
//
// CTA of (1 + CONSUMERS) warpgroups, one per work tile (q-tile of
// 64·CONSUMERS rows, q-head, sequence), or with dense tensors through TMA
// persistent: one per SM taking several work tiles in turn (see PERSISTENT):
//   warpgroup 0   producer: gives its registers away (setmaxnreg.dec), then
//                 loads Q once and K(t), V(t) into stage t % STAGES, K and
//                 V each with their own "full" and "empty" mbarriers.
//                 Dense tensors: one thread issues TMA bulk tensor copies
//                 (BLOCK_KV-row x 64-column boxes, 128-byte swizzle) that
//                 complete on the "full" barrier by byte count; K(0) and Q
//                 go out as soon as the barriers exist. Varlen and the paged
//                 cache: all 128 threads copy with cp.async through the same
//                 View interface as the sm80 kernels (attention_views.cuh),
//                 wait for their own copies, fence them to the async proxy
//                 and arrive.
//   warpgroup 1+  consumers (setmaxnreg.inc), 64 rows each.
//
// Per KV tile t, each consumer warpgroup:
//   S = Q·K(t)ᵀ   wgmma m64nBLOCK_KVk16, A = Q and B = K both from shared
//                 memory (K-major, 128-byte swizzle), DIM/16 instructions;
//                 K(t)'s stage is released as soon as it has finished
//   softmax       mask, running max m, l, P = exp2(S − m) in registers (the
//                 accumulator layout is mma's C layout). After a work tile's
//                 first key tile, at the m it already has: no row maximum
//                 and no O rescale, as long as no p passes 4096 (a warpgroup
//                 vote on the row sums; where it fails, S is recomputed and
//                 the exact step runs). Without those 102 FMNMX and 66 FMUL
//                 of 688 instructions per warp and key tile, the softmax of
//                 one warpgroup fits under the other's GEMMs: tensor pipe
//                 active 80% -> 87% at the seed shape, +6-7% there and at
//                 8k x 8k, +10% at head_dim 64 (H200 and H100, results/
//                 nvidia-h200-2026-11-22-session9.txt). K(t) is released
//                 after the vote, since a recompute reads it.
//   O += P·V(t)   wgmma m64nDIMk16, A = P from registers (the C layout of two
//                 n8 tiles is the A layout of one k16 tile), B = V from
//                 shared memory, N-major (transposed), BLOCK_KV/16
//                 instructions; then V(t)'s stage is released
// pipelined inside the warpgroup: S(t+1) and P(t)·V(t) are issued together
// (O took softmax(t)'s rescale as soon as P(t-1)·V(t-1) had finished), and
// the softmax of tile t+1 runs while P(t)·V(t) is on the tensor cores. With
// PINGPONG the warpgroups also take turns issuing, so one's softmax runs
// under another's GEMMs.
// Releasing K and V separately lets two stages do what three did when a
// stage was freed only after P·V.
//
// Shared memory (1024-byte aligned; every operand in the 128-byte swizzle
// layout, i.e. [DIM/64 column blocks][rows][64 elements], chunk ^= row % 8,
// the layout TMA writes and wgmma's descriptors name):
//   Q [kQSlots][BLOCK_Q x DIM]  |  K stages [STAGES][BLOCK_KV x DIM]  |  V stages  |  mbarriers
//
// Semantics are those of prefill_kernel.cuh: causal bottom-right aligned with
// tiles past the diagonal skipped and the diagonal masked, GQA, varlen,
// tails of any length, optional LSE, split-KV partials for paged views.
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
#include "kernels/common/wgmma_ops.cuh"

namespace flashscope::kernels {

// CONSUMERS: warpgroups of 64 rows each, so BLOCK_Q = 64 · CONSUMERS.
// PINGPONG: the consumer warpgroups take turns issuing their wgmmas (named
// barriers in a ring), so one's softmax runs under another's GEMMs instead
// of all of them contending for the tensor cores at once.
// BLOCK_KV: keys per tile, the N of S = Q·Kᵀ (a multiple of 16, at most 256
// for one wgmma and one TMA box): wider tiles spread the per-tile softmax
// bookkeeping (row max, O rescale, barriers) over more keys.
template <int DIM, int STAGES, int CONSUMERS = 2, bool PINGPONG = false, int BLOCK_KV = 128>
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
  // Q buffers: two for two consumer warpgroups at head_dim 64 (the short
  // causal tiles of SmolLM2's prompts: about nine work tiles of 1-8 key
  // tiles per CTA), so a persistent CTA loads the next work tile's Q while
  // the current one still reads its own: +1.4-1.8% there back to back, where
  // the three-warpgroup tiles of long problems lost 1.2-1.4% with it
  // (results/nvidia-h200-2026-11-22-split-tail.txt, section K). One at 128,
  // where the K/V ring takes the rest of shared memory.
  static constexpr int kQSlots = DIM == 64 && CONSUMERS == 2 ? 2 : 1;
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

  static_assert(DIM == 64 || DIM == 128, "head_dim 64 or 128");
  static_assert(BLOCK_KV % 16 == 0 && BLOCK_KV <= 256, "one wgmma N and one TMA box of keys");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

namespace hopper_detail {

constexpr float kLn2 = 0.69314718055994530942f;

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
};

// Probe (kernels/common/probe.cuh): NoProbe in production (every hook
// empty); GlobalTimerProbe for the trace capture: CTA stamps, the producer's
// copy issues, each consumer warp's waits, Q·Kᵀ, softmax, P·V and epilogue,
// and the online-softmax state of traced rows. A span of an asynchronous
// phase runs from its issue to the wait that sees it finish.
//
// PERSISTENT (dense views through TMA, no probes): a grid of G ≤ #SMs CTAs,
// each walking its share of the work tiles (q-tile, q-head, sequence), dealt
// as persistent_deal.h says. The K/V ring, Q's barriers and the consumers'
// turns run on from one work tile to the next: the producer loads the next
// tile's first K as soon as a stage is free and its Q once both warpgroups'
// last Q·Kᵀ of the current tile has read Q, all under the last softmax, P·V
// and epilogue, which a CTA per work tile would spend waiting on its first
// loads. Non-causal launches with hp.split set deal the last two rounds as
// pieces (a work tile's rows, a run of its key tiles) instead, so every CTA
// ends within a key tile of the others; a tile's pieces are merged by the
// last of its holders to finish (merge_shared_piece below).
template <typename Cfg, typename T, bool kCausal, typename View, bool kTma, typename Probe = NoProbe,
          bool kPersistent = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1) hopper_attention_kernel(
    const __grid_constant__ typename Probe::template Params<HopperParams<typename View::Params>> hp) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace hopper_detail;
  using namespace sm90;
  using Mma = MmaType<T>;
  constexpr int DIM = Cfg::kDim;
  constexpr int BLOCK_Q = Cfg::kBlockQ;
  constexpr int BLOCK_KV = Cfg::kBlockKV;
  constexpr int STAGES = Cfg::kStages;
  static_assert(!kPersistent || (kTma && !Probe::kEnabled && kViewTakesTileCoords<View>),
                "persistent CTAs: dense views through TMA, no probes");
  const auto& p = hp.view;

  const int tid = threadIdx.x;
  const int warp_id = tid / 32;
  const int lane_id = tid % 32;
  typename Probe::Ctx probe;
  probe_cta_start(probe, hp);

  // Which rows and keys this CTA owns (attention_views.cuh); causal
  // production launches take the longest q-tiles of every head first.
  // Persistent: the CTA's items in turn: a work tile per round, dealt as the
  // comment above says, then (split tail) its pieces of the last work tiles.
  // (32-bit: a launch has fewer than 2^31 work tiles.)
  // The deal and the list's order come built from the launcher
  // (hp.deal, hp.tiles), their divisions as FastDivmods.
  constexpr bool kMaySplit = kPersistent && !kCausal;
  const bool split = kMaySplit && hp.split.split_tiles > 0;
  const PersistentDeal& deal = hp.deal;
  const int whole_rounds = kPersistent ? deal.rounds : 1;
  const int items = whole_rounds + (split ? hp.split.pieces(blockIdx.x) : 0);
  auto has_work = [&](int item) { return !kPersistent || item >= whole_rounds || deal.entry(item, blockIdx.x) >= 0; };
  // Item `item`'s rows and keys (a piece of a split tile: its key tiles only).
  auto work_view = [&](int item) -> View {
    if constexpr (kPersistent) {
      auto tile_view = [&](int linear) {
        const WorkTileList::Tile t = hp.tiles.at(linear);
        return View(p, t.q_tile, t.q_head, t.seq, t.kv_head);
      };
      if (kMaySplit && item >= whole_rounds) {
        const SplitTail::Piece piece = hp.split.piece_in_order(blockIdx.x, item - whole_rounds);
        View v = tile_view(hp.split.whole_tiles + piece.tile);
        v.kv_begin = piece.unit_begin * BLOCK_KV;
        v.kv_end = min(v.kv_end, piece.unit_end * BLOCK_KV);
        return v;
      }
      return tile_view(deal.entry(item, blockIdx.x));
    } else {
      return cta_view<View, kCausal && !Probe::kEnabled>(p);
    }
  };
  auto kv_tiles_of = [](const View& v) {
    return v.kv_end > v.kv_begin ? (v.kv_end - v.kv_begin + BLOCK_KV - 1) / BLOCK_KV : 0;
  };
  int first_item = 0;
  if constexpr (kPersistent) {
    while (first_item < items && !has_work(first_item)) ++first_item;
    if (first_item == items) return;  // no entry falls to this CTA
  }
  const View first_view = work_view(first_item);
  if (!first_view.active()) return;  // varlen: a shorter sequence than the longest (the whole CTA leaves)
  const int first_kv_tiles = kv_tiles_of(first_view);
  // Spans and states name absolute KV tiles; probed launches have one work tile.
  const int probe_tile0 = first_view.kv_begin / BLOCK_KV;
  probe_select_view(probe, first_view, warp_id);
  auto span = [&](ProbeSpanKind kind, int kv_tile, uint64_t start) {
    probe_span(probe, kind, kv_tile < 0 ? -1 : probe_tile0 + kv_tile, start);
  };
  // Every thread calls it once, last: with probes it ends in a CTA barrier.
  auto cta_end = [&] {
    probe_cta_end(probe,
                  {first_view.probe_batch(), first_view.probe_head(), first_view.q0, first_view.probe_split(),
                   probe_tile0, first_kv_tiles},
                  warp_id);
  };
  // The q-head and sequence of a view (only dense views are read through TMA;
  // they name theirs).
  auto head_of = [](const View& v) {
    if constexpr (kViewTakesTileCoords<View>) return v.head;
    else return int(blockIdx.y);
  };
  auto seq_of = [](const View& v) {
    if constexpr (kViewTakesTileCoords<View>) return v.seq;
    else return int(blockIdx.z);
  };

  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t Q_smem = smem_base + Cfg::kQOffset;
  const uint32_t K_smem = smem_base + Cfg::kKOffset;
  const uint32_t V_smem = smem_base + Cfg::kVOffset;
  // Each array holds one 8-byte barrier per stage (+ 8·stage).
  const uint32_t full_k_bar = smem_base + Cfg::kBarrierOffset;
  const uint32_t full_v_bar = full_k_bar + 8 * STAGES;
  const uint32_t empty_k_bar = full_v_bar + 8 * STAGES;
  const uint32_t empty_v_bar = empty_k_bar + 8 * STAGES;
  const uint32_t q_full_bar = empty_v_bar + 8 * STAGES;
  // persistent: the last Q·Kᵀ of a work tile has read Q (one barrier per Q slot, + 8·slot)
  const uint32_t q_empty_bar = q_full_bar + 8 * Cfg::kQSlots;

  // A view's TMA coordinates, worked out once per work tile and kept in
  // registers: the copies' asm clobbers memory, so coordinates read through
  // the view would be re-read, and the kv-head re-divided, for every copy.
  struct TmaCoords {
    int q0, key0, q_head, kv_head, seq;
  };
  auto coords_of = [&](const View& v) {
    int kv_head;
    if constexpr (kViewTakesTileCoords<View>) kv_head = v.kv_head;
    else kv_head = head_of(v) / p.group;
    return TmaCoords{v.q0, v.kv_begin, head_of(v), kv_head, seq_of(v)};
  };
  // TMA copies of Q, and of KV tile t into ring slot `slot` (stage
  // slot % STAGES); each announces its bytes on the barrier it completes.
  auto tma_q = [&](const TmaCoords& at, int slot) {
    const uint32_t bar = q_full_bar + 8 * slot;
    mbarrier_arrive_expect_tx(bar, Cfg::kQBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColumnBlocks; ++cb)
      tma_load_4d(Q_smem + slot * Cfg::kQBytes + cb * BLOCK_Q * 128, &hp.q_map, bar, cb * 64, at.q0, at.q_head,
                  at.seq);
  };
  auto tma_kv = [&](const CUtensorMap* map, uint32_t tiles, uint32_t bar, const TmaCoords& at, int t, int slot) {
    const int stage = slot % STAGES;
    mbarrier_arrive_expect_tx(bar + 8 * stage, Cfg::kKVTileBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColumnBlocks; ++cb)
      tma_load_4d(tiles + stage * Cfg::kKVTileBytes + cb * BLOCK_KV * 128, map, bar + 8 * stage, cb * 64,
                  at.key0 + t * BLOCK_KV, at.kv_head, at.seq);
  };

  if (tid == 0) {
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
  __syncthreads();  // the barriers exist before anyone waits on them
  // Every thread, before its first global access (O, LSE, the split
  // workspace: the grid before may be this launch's previous call, writing
  // the same buffers). The next grid may be scheduled once every CTA has
  // passed here: its CTAs then take SMs as ours leave, and wait in turn.
  pdl_wait();
  pdl_launch_dependents();

  if (warp_id < 4) {
    // ---------------- producer: Q, then K/V tiles into the ring, per work tile ----------------
    // Warpgroup 0 hands its registers to the consumers; one thread issues
    // TMA copies, or all 128 issue cp.async.
    if constexpr (kTma) {
      setmaxnreg_dec<Cfg::kProducerRegsTma>();
    } else {
      setmaxnreg_dec<Cfg::kProducerRegsCpAsync>();
    }
    if constexpr (kTma) {
      // Lane 0 of warp 0 issues the bulk tensor copies;
      // a barrier completes when the announced bytes have landed
      // (out-of-range rows arrive as zeros). Whole warps take each path, so
      // the probe's closing CTA barrier sees every warp arrive once.
      if (warp_id != 0) {
        cta_end();
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
      for (int item = first_item; item < items; ++item) {
        if (!has_work(item)) continue;
        const View view = kPersistent && item > first_item ? work_view(item) : first_view;
        const int num_kv_tiles = kPersistent && item > first_item ? kv_tiles_of(view) : first_kv_tiles;
        if (num_kv_tiles == 0) continue;
        const TmaCoords at = coords_of(view);
        // Tile t's K goes into K stage (ring + t) % STAGES once the
        // consumers have released that stage's K (after their Q·Kᵀ of the
        // tile STAGES before); its V once they have released the V stage
        // (after that tile's P·V). The order is that of the consumers'
        // needs: K(t+1) before V(t), since S(t+1) is issued together with
        // P(t)·V(t).
        auto load = [&](ProbeSpanKind kind, int t) {
          const bool is_k = kind == ProbeSpanKind::kLoadIssueK;
          const int slot = ring + t;
          mbarrier_wait((is_k ? empty_k_bar : empty_v_bar) + 8 * (slot % STAGES), ((slot / STAGES) & 1) ^ 1);
          const uint64_t ts = probe_time(probe);
          if (leader) {
            if (is_k) tma_kv(&hp.k_map, K_smem, full_k_bar, at, t, slot);
            else tma_kv(&hp.v_map, V_smem, full_v_bar, at, t, slot);
          }
          span(kind, t, ts);
        };
        if (item > first_item) {  // the first tile's K(0) and Q went out before the CTA barrier
          // Q's slot is free once the Q·Kᵀ of the work tile kQSlots back are
          // done: with one slot the current tile's last, so K(0) goes first;
          // with two, one finished long ago, so Q goes first.
          const int slot = q_round % Cfg::kQSlots;
          auto load_q = [&] {
            mbarrier_wait(q_empty_bar + 8 * slot, ((q_round / Cfg::kQSlots) & 1) ^ 1);
            if (leader) tma_q(at, slot);
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
    } else {
      // One work tile (the cp.async producer is never persistent).
      const View& view = first_view;
      const int q0 = view.q0, kv_end = view.kv_end;
      const int num_kv_tiles = first_kv_tiles;
      const T* const any_valid = view.q_ptr(q0);  // for zero-filled chunks: never read
      group_load_tile<BLOCK_Q, DIM>(Q_smem, [&](int r) { return view.q_ptr(q0 + r); }, view.rows - q0, any_valid,
                                    tid);
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
        mbarrier_arrive(full_k_bar + 8 * (t % STAGES));
        mbarrier_arrive(full_v_bar + 8 * (t % STAGES));
      };
      for (int t = 0; t < num_kv_tiles; ++t) {
        const int stage = t % STAGES;
        mbarrier_wait(empty_k_bar + 8 * stage, ((t / STAGES) & 1) ^ 1);
        mbarrier_wait(empty_v_bar + 8 * stage, ((t / STAGES) & 1) ^ 1);
        const int k0 = view.kv_begin + t * BLOCK_KV;
        const auto keys = view.key_rows(k0, lane_id);
        uint64_t ts = probe_time(probe);
        group_load_tile<BLOCK_KV, DIM>(K_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.k_ptr(keys, r); },
                                       kv_end - k0, any_valid, tid);
        span(ProbeSpanKind::kLoadIssueK, t, ts);
        ts = probe_time(probe);
        group_load_tile<BLOCK_KV, DIM>(V_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.v_ptr(keys, r); },
                                       kv_end - k0, any_valid, tid);
        span(ProbeSpanKind::kLoadIssueV, t, ts);
        cp_async_commit();
        cp_async_wait<1>();  // everything but tile t has landed (this lane's copies)
        if (t == 0) publish(q_full_bar);
        else publish_tile(t - 1);
      }
      cp_async_wait<0>();
      if (num_kv_tiles > 0) publish_tile(num_kv_tiles - 1);
    }
    cta_end();
    return;
  }

  // ---------------- consumers: two or three warpgroups of 64 rows each ----------------
  if constexpr (kTma) {
    setmaxnreg_inc<Cfg::kConsumerRegsTma>();
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegsCpAsync>();
  }
  const int warpgroup = warp_id / 4 - 1;
  const int warp_in_group = warp_id % 4;

  float O_rmem[DIM / 2];  // [64 x DIM] of the warpgroup in the accumulator layout
#pragma unroll
  for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = 0.0f;
  float S_rmem[BLOCK_KV / 2];
  uint32_t P_rmem[BLOCK_KV / 16][4];
#pragma unroll
  for (int i = 0; i < BLOCK_KV / 2; ++i) S_rmem[i] = 0.0f;
  // Row state for rows lane/4 (h = 0) and lane/4 + 8 (h = 1) of the warp's
  // 16; l is this thread's partial sum, reduced across the quad at the end.
  float m_rmem[2], l_rmem[2];
  // Probed launches: the exact running maximum of each row, for the row
  // states they record (the kernel's own m may lag it: softmax_at_running_max).
  float m_traced[2];

  // Descriptors of stage 0's K and V tiles, and of this warpgroup's rows of
  // the current work tile's Q (set per work tile: its slot). Each wgmma's is
  // one of these plus a constant (smem_desc_add): one add in the turn
  // instead of encoding every k16 step's address.
  const uint64_t K_desc = smem_desc_sw128(K_smem, 0, 1024);
  const uint64_t V_desc = smem_desc_sw128(V_smem, BLOCK_KV * 128, 1024);
  const uint32_t Q_rows = warpgroup * Cfg::kWarpgroupRows * Cfg::kSwizzleRowBytes;
  uint64_t Q_desc = smem_desc_sw128(Q_smem + Q_rows, 0, 1024);
  // S = Q·K(t)ᵀ, issued (not waited for): k16 step kk reads column block
  // kk/4 at byte (kk%4)·32 of Q's and K's rows.
  auto issue_S = [&](int stage) {
    const uint64_t K_tile = smem_desc_add(K_desc, stage * Cfg::kKVTileBytes);
#pragma unroll
    for (int kk = 0; kk < DIM / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;
      Wgmma<T>::template ss<BLOCK_KV, 0>(S_rmem, smem_desc_add(Q_desc, (kk / 4) * BLOCK_Q * 128 + col),
                                         smem_desc_add(K_tile, (kk / 4) * BLOCK_KV * 128 + col), kk > 0 ? 1 : 0);
    }
  };
  // O += P·V(t), issued: k16 step kk reads keys [16kk, 16kk + 16), two 8-row
  // atoms. A work tile's first (`first`) overwrites O instead, so O needs no
  // zeroing per work tile.
  auto issue_PV = [&](int stage, bool first) {
    const uint64_t V_tile = smem_desc_add(V_desc, stage * Cfg::kKVTileBytes);
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {
      const uint64_t desc_v = smem_desc_add(V_tile, kk * 16 * 128);
      if constexpr (DIM == 128) {
        Wgmma<T>::template rs_n128<1>(O_rmem, P_rmem[kk], desc_v, kk > 0 || !first);
      } else {
        Wgmma<T>::template rs_n64<1>(O_rmem, P_rmem[kk], desc_v, kk > 0 || !first);
      }
    }
  };
  auto rescale_O = [&](const float (&rescale)[2]) {
#pragma unroll
    for (int j = 0; j < DIM / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        O_rmem[4 * j + 2 * h] *= rescale[h];
        O_rmem[4 * j + 2 * h + 1] *= rescale[h];
      }
  };
  // P as A fragments: the C layout of n8 tiles 2kk and 2kk+1 is the A layout of k16 tile kk.
  auto pack_P = [&] {
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {
      P_rmem[kk][0] = Mma::pack(S_rmem[8 * kk + 0], S_rmem[8 * kk + 1]);
      P_rmem[kk][1] = Mma::pack(S_rmem[8 * kk + 2], S_rmem[8 * kk + 3]);
      P_rmem[kk][2] = Mma::pack(S_rmem[8 * kk + 4], S_rmem[8 * kk + 5]);
      P_rmem[kk][3] = Mma::pack(S_rmem[8 * kk + 6], S_rmem[8 * kk + 7]);
    }
  };
  // One arrival per warp: this warp's wgmmas are done reading the stage's K (or V, or Q).
  auto release = [&](uint32_t empty_bar, int stage) {
    __syncwarp();
    if (lane_id == 0) mbarrier_arrive(empty_bar + 8 * stage);
  };

  // The pipeline inside one warpgroup: while P(t-1)·V(t-1) runs on the
  // tensor cores, the warps compute the softmax of tile t, whose S = Q·K(t)ᵀ
  // was issued just before it; O takes softmax(t)'s rescale once that P·V
  // has finished, outside the warpgroup's turn, so a turn holds only the
  // issues (with the descriptor adds above, +1.2-2.9% against rescaling
  // inside it, same run on the H200, results/nvidia-h200-2026-11-22-session7.txt):
  //   issue S(t), PV(t-1) | wait S(t), release K(t) | softmax(t) |
  //   wait PV(t-1), release V(t-1) | O *= rescale(t) | P = pack
  // Ping-pong: warpgroup g issues its wgmmas only after g-1 has issued its
  // own (named barrier 1 + g, 256 threads: g syncs, g-1 arrives); the last
  // warpgroup opens the ring for the first once, and leaves out its final
  // arrive (on the last work tile with keys) so every barrier sees as many
  // arrivals as syncs. Both warpgroups take the same turns on every work tile.
  constexpr int kRing = Cfg::kConsumerWarpgroups;
  // Named barriers: 0 the CTA's, 1 + g warpgroup g's turn, kVoteBarrier + g its vote.
  constexpr int kVoteBarrier = 1 + kRing;
  // Tiles after a work tile's first take their softmax at the running maximum
  // (softmax_at_running_max below) unless a p would pass this bound.
  constexpr float kRunningMaxBound = 4096.0f;
  auto take_turn = [&] {
    if constexpr (Cfg::kPingPong) named_barrier_sync(1 + warpgroup, 256);
  };
  auto pass_turn = [&](bool last_item) {
    if constexpr (Cfg::kPingPong)
      if (!(last_item && warpgroup == kRing - 1)) named_barrier_arrive(1 + (warpgroup + 1) % kRing, 256);
  };
  int last_keyed_item = -1;  // the last work tile with keys: its final turn is not passed on
  if constexpr (Cfg::kPingPong) {
    if constexpr (kPersistent) {
      for (int item = items - 1; item >= first_item && last_keyed_item < 0; --item)
        if (has_work(item) && kv_tiles_of(work_view(item)) > 0) last_keyed_item = item;
    } else {
      last_keyed_item = first_kv_tiles > 0 ? 0 : -1;
    }
    if (last_keyed_item >= 0 && warpgroup == kRing - 1) named_barrier_arrive(1, 256);
  }

  // Split tail: a piece of a work tile shared with other CTAs leaves its
  // unnormalized O, running max m and per-thread sums l in the slot of its
  // CTA (persistent_deal.h), laid out lane-minor per consumer warp so every
  // store and load is a whole 128-byte line: O_rmem[i] at [i][lane], then
  // m[0], m[1], l[0], l[1]. The tile's arrival counter (one per consumer
  // warp: warps finish on their own) tells the last holder to arrive; it
  // merges every holder's slot in key order, so the result is the same
  // whoever comes last, puts the counter back to 0 for the next launch, and
  // goes on to the ordinary epilogue with the merged state.
  const int consumer_warp = warp_id - 4;
  constexpr int kPartialFloats = (DIM / 2 + 4) * 32;
  auto partial_slot = [&](int cta, int tile) {
    return hp.split_partials +
           (int64_t(cta * 2 + hp.split.slot(cta, tile)) * Cfg::kConsumerWarps + consumer_warp) * kPartialFloats;
  };
  // False when other holders of the tile have yet to arrive (nothing to store).
  auto merge_shared_piece = [&](int tile) {
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
        const float m_use = m_max[h] == -INFINITY ? 0.0f : m_max[h];
        weight[h] = fast_exp2(__ldcg(slot + (DIM / 2 + h) * 32 + lane_id) - m_use);
        l_rmem[h] = fmaf(weight[h], __ldcg(slot + (DIM / 2 + 2 + h) * 32 + lane_id), l_rmem[h]);
      }
#pragma unroll
      for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = fmaf(weight[(i / 2) % 2], __ldcg(slot + i * 32 + lane_id), O_rmem[i]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) m_rmem[h] = m_max[h];
    return true;
  };

  int ring = 0, q_round = 0;  // as the producer counts them
  for (int item = first_item; item < items; ++item) {
    if (!has_work(item)) continue;
    const View view = kPersistent && item > first_item ? work_view(item) : first_view;
    const int num_kv_tiles = kPersistent && item > first_item ? kv_tiles_of(view) : first_kv_tiles;
    const int kv_begin = view.kv_begin;
    const int kv_end = view.kv_end;
    const int warp_row0 = view.q0 + warpgroup * Cfg::kWarpgroupRows + warp_in_group * 16;
    // Ring slot of tile t: its stage, and the parity of that stage's barriers.
    auto stage_of = [&](int t) { return (ring + t) % STAGES; };
    auto parity_of = [&](int t) { return uint32_t(((ring + t) / STAGES) & 1); };
    // O: the first P·V overwrites it (issue_PV); a work tile without keys stores zeros.
    if (num_kv_tiles == 0) {
#pragma unroll
      for (int i = 0; i < DIM / 2; ++i) O_rmem[i] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) m_rmem[h] = -INFINITY, l_rmem[h] = 0.0f, m_traced[h] = -INFINITY;

    // Masks tile t's logits: keys past the range, causal keys past each row's diagonal.
    auto mask_tile = [&](int t) {
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
    };
    // Masks tile t, then turns S into probabilities in place: running max m,
    // l rescaled and summed. Returns the factor O must be rescaled by, which
    // the caller applies once the P·V still reading O has finished.
    auto softmax = [&](int t, float (&rescale)[2]) {
      const int k0 = kv_begin + t * BLOCK_KV;
      mask_tile(t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float row_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < BLOCK_KV / 8; ++j)
          row_max = fmaxf(row_max, fmaxf(S_rmem[4 * j + 2 * h], S_rmem[4 * j + 2 * h + 1]));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
        const float m_old = m_rmem[h];
        const float m_new = fmaxf(m_old, row_max * p.scale_log2);
        m_rmem[h] = m_new;
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: exp2(-inf - 0) = 0, not NaN
        rescale[h] = fast_exp2(m_old - m_use);
        float row_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float prob = fast_exp2(fmaf(S_rmem[4 * j + 2 * h + e], p.scale_log2, -m_use));
            S_rmem[4 * j + 2 * h + e] = prob;
            row_sum += prob;
          }
        l_rmem[h] = l_rmem[h] * rescale[h] + row_sum;
        if constexpr (Probe::kEnabled) {
          // The keys of this tile the row sees: those before kv_end and, causal, up to its diagonal.
          const int row = warp_row0 + lane_id / 4 + h * 8;
          const int key_end = kCausal ? min(kv_end, view.last_key(row) + 1) : kv_end;
          probe_row_state(probe, view.probe_query(row, hp.probe.traced_head), probe_tile0 + t, m_new,
                          row_max * p.scale_log2, rescale[h], row_sum, l_rmem[h], max(0, min(BLOCK_KV, key_end - k0)));
          m_traced[h] = m_new;
        }
      }
    };
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
    auto softmax_at_running_max = [&](int t) {
      mask_tile(t);
      float tile_max[2] = {-INFINITY, -INFINITY};  // probed launches only: the tile's row maxima
      if constexpr (Probe::kEnabled) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int j = 0; j < BLOCK_KV / 8; ++j)
            tile_max[h] = fmaxf(tile_max[h], fmaxf(S_rmem[4 * j + 2 * h], S_rmem[4 * j + 2 * h + 1]));
          tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
          tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2)) * p.scale_log2;
        }
      }
      float row_sum[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_sum[h] = 0.0f;
        const float m_use = m_rmem[h] == -INFINITY ? 0.0f : m_rmem[h];  // as in the exact step
#pragma unroll
        for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float prob = fast_exp2(fmaf(S_rmem[4 * j + 2 * h + e], p.scale_log2, -m_use));
            S_rmem[4 * j + 2 * h + e] = prob;
            row_sum[h] += prob;
          }
      }
      // A row that has seen no key yet (m = -inf) holds only while it still
      // sees none (its p are 0): its first key takes the exact step, which sets m.
      const bool held = row_sum[0] <= kRunningMaxBound && row_sum[1] <= kRunningMaxBound &&
                        (m_rmem[0] != -INFINITY || row_sum[0] == 0.0f) &&
                        (m_rmem[1] != -INFINITY || row_sum[1] == 0.0f);
      // __all_sync of a value already uniform: it tells ptxas so, and the
      // branches on it stay warp-uniform (without it, divergent-branch code
      // and 276 bytes of spills in the loop).
      const bool all_held = __all_sync(0xffffffffu, named_barrier_all(kVoteBarrier + warpgroup, 128, held));
      if (all_held) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          l_rmem[h] += row_sum[h];
          if constexpr (Probe::kEnabled) {
            const int k0 = kv_begin + t * BLOCK_KV;
            const int row = warp_row0 + lane_id / 4 + h * 8;
            const int key_end = kCausal ? min(kv_end, view.last_key(row) + 1) : kv_end;
            const float m_new = fmaxf(m_traced[h], tile_max[h]);
            // exact state = the kernel's · f (1 where both are -inf: nothing seen yet)
            const float f = m_rmem[h] == m_new ? 1.0f : fast_exp2(m_rmem[h] - m_new);
            const float rescale_traced = m_traced[h] == m_new ? 1.0f : fast_exp2(m_traced[h] - m_new);
            probe_row_state(probe, view.probe_query(row, hp.probe.traced_head), probe_tile0 + t, m_new, tile_max[h],
                            rescale_traced, row_sum[h] * f, l_rmem[h] * f, max(0, min(BLOCK_KV, key_end - k0)));
            m_traced[h] = m_new;
          }
        }
      }
      return all_held;
    };
    // Persistent: after the work tile's last Q·Kᵀ, Q's buffer may take the next tile's.
    auto release_q_after = [&](int t) {
      if constexpr (kPersistent)
        if (t == num_kv_tiles - 1) release(q_empty_bar, q_round % Cfg::kQSlots);
    };

    // P(t)·V(t) into O, issued once V(t) has landed (O has taken
    // softmax(t)'s rescale already).
    auto issue_PV_after_V = [&](int t) {
      const uint64_t ts = probe_time(probe);
      mbarrier_wait(full_v_bar + 8 * stage_of(t), parity_of(t));  // V(t) has landed
      span(ProbeSpanKind::kLoadWaitV, t, ts);
      wgmma_fence();  // the rescaled O and P were written by ordinary instructions
      issue_PV(stage_of(t), t == 0);
      wgmma_commit();
    };

    // Probe spans per tile t: the waits for K(t) and V(t), Q·K(t)ᵀ from its
    // issue to the wait that sees it done, the softmax, and P·V(t) from its
    // issue to its wait (under which the softmax of t+1 ran).
    float rescale[2] = {1.0f, 1.0f};  // softmax(t)'s factor for O, applied once P(t-1)·V(t-1) is done
    if (num_kv_tiles > 0) {
      uint64_t ts = probe_time(probe);
      const int q_slot = q_round % Cfg::kQSlots;
      Q_desc = smem_desc_sw128(Q_smem + q_slot * Cfg::kQBytes + Q_rows, 0, 1024);
      mbarrier_wait(q_full_bar + 8 * q_slot, (q_round / Cfg::kQSlots) & 1);
      mbarrier_wait(full_k_bar + 8 * stage_of(0), parity_of(0));  // K(0)
      span(ProbeSpanKind::kLoadWaitK, 0, ts);
      take_turn();
      ts = probe_time(probe);
      wgmma_fence();
      issue_S(stage_of(0));
      wgmma_commit();
      pass_turn(false);
      wgmma_wait<0>();
      fence_operands(S_rmem);
      release(empty_k_bar, stage_of(0));
      release_q_after(0);
      span(ProbeSpanKind::kQK, 0, ts);
      ts = probe_time(probe);
      softmax(0, rescale);  // nothing in O to rescale: P(0)·V(0) overwrites it
      pack_P();
      span(ProbeSpanKind::kSoftmax, 0, ts);
    }
    for (int t = 1; t < num_kv_tiles; ++t) {
      uint64_t ts = probe_time(probe);
      mbarrier_wait(full_k_bar + 8 * stage_of(t), parity_of(t));  // K(t) has landed
      span(ProbeSpanKind::kLoadWaitK, t, ts);
      take_turn();
      const uint64_t t_issue = probe_time(probe);
      wgmma_fence();  // P was written by ordinary instructions
      issue_S(stage_of(t));
      wgmma_commit();
      issue_PV_after_V(t - 1);
      pass_turn(false);
      wgmma_wait<1>();  // S(t) is done; P(t-1)·V(t-1) may still run
      fence_operands(S_rmem);
      span(ProbeSpanKind::kQK, t, t_issue);
      ts = probe_time(probe);
      const bool held = softmax_at_running_max(t);
      span(ProbeSpanKind::kSoftmax, t, ts);
      wgmma_wait<0>();  // P(t-1)·V(t-1) is done: O and P may be touched, V(t-1) is free
      fence_operands(O_rmem);
      span(ProbeSpanKind::kPV, t - 1, t_issue);
      release(empty_v_bar, stage_of(t - 1));
      if (!held) {
        // A new maximum (or a NaN): S(t) again, from the Q and K(t) still
        // held, with nothing else in flight; then the exact softmax, and
        // O's rescale by its factor before P(t)·V(t) adds to O.
        wgmma_fence();
        issue_S(stage_of(t));
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(S_rmem);
        softmax(t, rescale);
        rescale_O(rescale);
      }
      release(empty_k_bar, stage_of(t));  // K(t) and Q are read for the last time above
      release_q_after(t);
      pack_P();
    }
    if (num_kv_tiles > 0) {
      const int last = num_kv_tiles - 1;
      take_turn();
      const uint64_t ts = probe_time(probe);
      issue_PV_after_V(last);
      pass_turn(item == last_keyed_item);
      wgmma_wait<0>();
      fence_operands(O_rmem);
      span(ProbeSpanKind::kPV, last, ts);
      release(empty_v_bar, stage_of(last));
    }
    const uint64_t epilogue_start = probe_time(probe);
    if constexpr (kMaySplit) {
      if (item >= whole_rounds) {
        const SplitTail::Piece piece = hp.split.piece_in_order(blockIdx.x, item - whole_rounds);
        if (piece.shared && !merge_shared_piece(piece.tile)) {
          ring += num_kv_tiles;
          q_round += num_kv_tiles > 0;
          continue;
        }
      }
    }

    // ---------------- epilogue: normalize, store O and the LSE (or split partials) ----------------
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_rmem[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv_l = l > 0.0f ? fast_rcp(l) : 0.0f;  // no visible key: output 0
      const int row = warp_row0 + lane_id / 4 + h * 8;
      if (row >= view.rows) continue;
      const float lse = l > 0.0f ? (m_rmem[h] + fast_log2(l)) * kLn2 : -INFINITY;
      if (view.partial()) {
        float* O_row = view.partial_o(row);
#pragma unroll
        for (int j = 0; j < DIM / 8; ++j)
          *reinterpret_cast<float2*>(O_row + j * 8 + (lane_id % 4) * 2) =
              make_float2(O_rmem[4 * j + 2 * h] * inv_l, O_rmem[4 * j + 2 * h + 1] * inv_l);
        if (lane_id % 4 == 0) view.store_partial_lse(row, lse);
      } else {
        T* O_row = view.o_ptr(row);
#pragma unroll
        for (int j = 0; j < DIM / 8; ++j)
          *reinterpret_cast<uint32_t*>(O_row + j * 8 + (lane_id % 4) * 2) =
              Mma::pack(O_rmem[4 * j + 2 * h] * inv_l, O_rmem[4 * j + 2 * h + 1] * inv_l);
        if (lane_id % 4 == 0) view.store_lse(row, lse);
      }
    }
    span(ProbeSpanKind::kEpilogue, -1, epilogue_start);
    ring += num_kv_tiles;
    q_round += num_kv_tiles > 0;
  }
  cta_end();
#endif  // sm_90a
}

}  // namespace flashscope::kernels
