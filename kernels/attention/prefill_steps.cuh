// The steps of the sm80 FlashAttention-2 main loop (prefill_kernel.cuh) as
// named functions on one CTA's state: load Q, load a K or V tile, S = Q·Kᵀ,
// the mask, the online-softmax step, O += P·V and the epilogue (the mask
// also as a free function over values). The pipelines in prefill_kernel.cuh
// call them in the order each config wants.
//
// Fragments (mma.m16n8k16, kernels/common/row_ops.cuh for the C layout):
//   Q_rmem [WARP_Q/16][DIM/16][4]     A fragments of Q (register-resident Q)
//   S      [WARP_Q/16][BLOCK_KV/8][4]  C fragments of S = Q·K(t)ᵀ, then of P in place
//   P      [WARP_Q/16][BLOCK_KV/16][4] P packed into A fragments
//   O_rmem [WARP_Q/16][DIM/8][4]       C fragments of the output accumulator
//   m_rmem, l_rmem [WARP_Q/16][2]      running max and this thread's partial sum
//                                      of rows lane/4 (h = 0) and lane/4 + 8 (h = 1)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_views.cuh"
#include "kernels/attention/prefill_config.cuh"
#include "kernels/attention/prefill_params.h"
#include "kernels/common/math.h"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/row_ops.cuh"
#include "kernels/common/swizzle.cuh"

namespace flashscope::kernels {
namespace detail {

constexpr int kMmaM = 16;
constexpr int kMmaN = 8;
constexpr int kMmaK = 16;

// Copies rows [0, ROWS) of a [rows, DIM] tile into swizzled shared memory
// with cp.async; row r comes from row_ptr(r), and rows >= valid_rows are
// zero-filled (their address is never formed: for a paged source that would
// read past the block table). kLowerBound: rows < first_row too (a window's
// first tile: keys before the window are not read).
template <typename Cfg, int ROWS, bool kLowerBound = false, typename T, typename RowPtr>
__device__ __forceinline__ void load_tile(uint32_t dst, RowPtr row_ptr, int valid_rows, const T* any_valid, int tid,
                                          int first_row = 0) {
  constexpr int kChunksPerRow = Cfg::kDim / 8;  // 16-byte chunks
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kIters = ceil_div(kChunks, Cfg::kThreads);
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int chunk = i * Cfg::kThreads + tid;
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    // row_ptr runs on every lane (a paged source shuffles page ids across the
    // warp); rows past valid_rows get a harmless address and copy zeros.
    const T* src = row_ptr(row < ROWS ? row : 0) + col;
    if (kChunks % Cfg::kThreads != 0 && chunk >= kChunks) continue;  // only when threads do not divide the tile
    bool valid = row < valid_rows;
    if constexpr (kLowerBound) valid = valid && row >= first_row;
    cp_async_16(dst + swizzle<Cfg::kRowBytes, Cfg::kSwizzle>(row * Cfg::kRowBytes + col * 2), valid ? src : any_valid,
                valid);
  }
}

// Sets tile t's masked logits to -inf: keys past the CTA's range, and
// causal keys past each row's diagonal. Only the last tile and tiles
// crossing this warp's diagonal need it (last_key grows with the row).
// kWindow: keys outside each row's window [first_key, last_key] too; only
// tiles crossing either edge for some row of the warp need it (both edges
// grow with the row, so the warp's first row bounds the right edge and its
// last row the left).
// A free function over values rather than a PrefillCta step: the v5 and v6
// loops call it with the kernel's own locals, and only so do their causal
// instantiations compile to the code they had as one kernel body (reached
// through PrefillCta's references, the row index is associated differently,
// its +8 row is hoisted out of the loop, and v6 at head_dim 64 spills).
template <typename Cfg, bool kCausal, typename View, bool kWindow = false>
__device__ __forceinline__ void mask_tile(const View& view, int q0, int warp_id, int lane_id, int kv_begin, int kv_end,
                                          int kv_tile, float (&S_rmem)[Cfg::kWarpQ / kMmaM][Cfg::kBlockKV / kMmaN][4]) {
  constexpr int BLOCK_KV = Cfg::kBlockKV;
  constexpr int WARP_Q = Cfg::kWarpQ;
  const int k0 = kv_begin + kv_tile * BLOCK_KV;
  const int warp_row0 = q0 + warp_id * WARP_Q;
  bool need_mask = k0 + BLOCK_KV > kv_end || (kCausal && k0 + BLOCK_KV - 1 > view.last_key(warp_row0));
  if constexpr (kWindow)
    need_mask = need_mask || k0 + BLOCK_KV - 1 > view.last_key(warp_row0) ||
                k0 < view.first_key(warp_row0 + WARP_Q - 1);
  if (!need_mask) return;
#pragma unroll
  for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
    for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaN; ++mma_id_kv)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = warp_row0 + mma_id_q * kMmaM + lane_id / 4 + (i >= 2 ? 8 : 0);
        const int col = k0 + mma_id_kv * kMmaN + (lane_id % 4) * 2 + (i & 1);
        bool masked = col >= kv_end || (kCausal && col > view.last_key(row));
        if constexpr (kWindow) masked = masked || col > view.last_key(row) || col < view.first_key(row);
        if (masked) S_rmem[mma_id_q][mma_id_kv][i] = -INFINITY;
      }
}

// Logit soft-capping in place (kModSoftcap), before the mask: a raw logit x
// becomes out · tanh(x · scale / cap) (SoftcapParams, prefill_params.h). tanh
// as 1 − 2 / (1 + 2^(2y·log2e)) on the SFU is within about 3e-7 of tanh
// everywhere (±1 where the exponential saturates), where tanh.approx's
// relative 2^-11 would move a capped logit by up to cap · 5e-4.
template <typename Cfg>
__device__ __forceinline__ void softcap_tile(const SoftcapParams& c,
                                             float (&S_rmem)[Cfg::kWarpQ / kMmaM][Cfg::kBlockKV / kMmaN][4]) {
#pragma unroll
  for (int i = 0; i < Cfg::kWarpQ / kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kBlockKV / kMmaN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float e = fast_exp2(S_rmem[i][j][r] * c.exp2_in);
        S_rmem[i][j][r] = c.out * fmaf(-2.0f, fast_rcp(1.0f + e), 1.0f);
      }
}

// to = from, fragment by fragment (v6 hands S(t+1) on to the next step).
template <typename Cfg>
__device__ __forceinline__ void copy_tile(const float (&from)[Cfg::kWarpQ / kMmaM][Cfg::kBlockKV / kMmaN][4],
                                          float (&to)[Cfg::kWarpQ / kMmaM][Cfg::kBlockKV / kMmaN][4]) {
#pragma unroll
  for (int i = 0; i < Cfg::kWarpQ / kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kBlockKV / kMmaN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) to[i][j][r] = from[i][j][r];
}

// One CTA of attention_kernel: the rows and keys it owns, where its tiles
// live in shared memory, and its warps' register state. It holds the
// kernel's own locals by reference, as the lambdas these steps once were
// held them (values copied into members, or a constructor that works them
// out, compile the production kernels to different code); every step is
// inlined into the kernel.
template <typename Cfg, typename T, bool kCausal, typename View, typename Probe, int kMods = kModNone>
struct PrefillCta {
  using Config = Cfg;
  static constexpr bool kWindow = (kMods & kModWindow) != 0;
  static constexpr bool kSoftcap = (kMods & kModSoftcap) != 0;
  using Mma = MmaType<T>;
  using Params = typename Probe::template Params<typename View::Params>;
  static constexpr int DIM = Cfg::kDim;
  static constexpr int BLOCK_Q = Cfg::kBlockQ;
  static constexpr int BLOCK_KV = Cfg::kBlockKV;
  static constexpr int WARP_Q = Cfg::kWarpQ;
  static constexpr int ROW_BYTES = Cfg::kRowBytes;
  static constexpr bool SWZ = Cfg::kSwizzle;
  static constexpr bool kPaged = std::is_same_v<typename View::Params, PagedKernelParams>;
  // Over the paged cache (decode: a split is one or two tiles, so the CTA's
  // time is its chain of dependent loads) Q is staged past K's first stage,
  // and K(0) with its block-table reads is requested beside it instead of
  // after Q has landed: one memory round trip less per CTA.
  static constexpr bool kEarlyK0 = kPaged && Cfg::kPipe == Pipeline::kK2V1 && !Cfg::kQInSmem;
  static_assert(!kEarlyK0 || Cfg::kKVTileBytes + Cfg::kQTileBytes <= Cfg::kSmemBytes,
                "Q staged past K stage 0 must fit in the K/V buffers");
  static constexpr int kQRegTiles = Cfg::kQInSmem ? 1 : WARP_Q / kMmaM;
  static constexpr int kQRegSteps = Cfg::kQInSmem ? 1 : DIM / kMmaK;

  using SFrag = float[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4];
  using PFrag = uint32_t[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4];

  const Params& p;
  typename Probe::Ctx& probe;
  const View& view;
  const int &tid, &warp_id, &lane_id;
  const int &q0, &kv_begin, &kv_end, &num_kv_tiles;
  // Probe spans name absolute KV tiles (a split starts at a whole tile).
  const int& probe_tile0;
  const T* const& any_valid;  // for zero-filled chunks: never read
  const uint32_t &Q_smem, &K_smem, &V_smem;

  uint32_t (&Q_rmem)[kQRegTiles][kQRegSteps][4];
  // Per-thread ldmatrix addresses (offsets inside one tile), set by load_q.
  uint32_t &Q_thread, &K_thread, &K_thread_x2, &V_thread, &V_thread_x2;
  float (&O_rmem)[WARP_Q / kMmaM][DIM / kMmaN][4];
  float (&m_rmem)[WARP_Q / kMmaM][2];
  float (&l_rmem)[WARP_Q / kMmaM][2];

  // Closes the probe span opened at `start` for KV tile `kv_tile`. The
  // conditional loads keep their own `if` (so the production kernels compile
  // exactly as they did before the hooks) and pass the condition here.
  __device__ __forceinline__ void span(ProbeSpanKind kind, int kv_tile, uint64_t start, bool happened = true) {
    if (happened) probe_span(probe, kind, probe_tile0 + kv_tile, start);
  }

  // K or V tile `kv_tile` into its stage. key_rows(k0) gathers what
  // addressing a tile's keys needs (for the paged cache: its page ids, one
  // block-table read per lane) before the copies.
  __device__ __forceinline__ void load_K(int kv_tile, int stage) {
    const int k0 = kv_begin + kv_tile * BLOCK_KV;
    const auto keys = view.key_rows(k0, lane_id);
    load_tile<Cfg, BLOCK_KV, kWindow>(K_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.k_ptr(keys, r); },
                                      kv_end - k0, any_valid, tid, key_lo_row(k0));
  }
  __device__ __forceinline__ void load_V(int kv_tile, int stage) {
    const int k0 = kv_begin + kv_tile * BLOCK_KV;
    const auto keys = view.key_rows(k0, lane_id);
    load_tile<Cfg, BLOCK_KV, kWindow>(V_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.v_ptr(keys, r); },
                                      kv_end - k0, any_valid, tid, key_lo_row(k0));
  }
  // Windowed: the tile's first row that is read (keys before view.kv_lo are
  // zero-filled; the mask hides them).
  __device__ __forceinline__ int key_lo_row(int k0) const {
    if constexpr (kWindow) return view.kv_lo - k0;
    return 0;
  }

  // K(0) as a copy group of its own (empty without keys): the group the v5
  // pipeline's first wait expects.
  __device__ __forceinline__ void issue_K0() {
    const uint64_t t0 = probe_time(probe);
    if (num_kv_tiles > 0) load_K(0, 0);
    span(ProbeSpanKind::kLoadIssueK, 0, t0, num_kv_tiles > 0);
    cp_async_commit();
  }

  // v6's first step (num_kv_tiles > 0): K(0) and V(0) as one copy group,
  // K(1) as the next (possibly empty: one group per step), and S(0) = Q·K(0)ᵀ
  // once the first has landed.
  __device__ __forceinline__ void lookahead_first_tile(SFrag& S_cur) {
    uint64_t t = probe_time(probe);
    load_K(0, 0);
    span(ProbeSpanKind::kLoadIssueK, 0, t);
    t = probe_time(probe);
    load_V(0, 0);
    cp_async_commit();
    span(ProbeSpanKind::kLoadIssueV, 0, t);
    t = probe_time(probe);
    if (num_kv_tiles > 1) load_K(1, 1);
    span(ProbeSpanKind::kLoadIssueK, 1, t, num_kv_tiles > 1);
    cp_async_commit();
    t = probe_time(probe);
    cp_async_wait<1>();
    __syncthreads();  // K(0) and V(0) have landed for every thread
    span(ProbeSpanKind::kLoadWaitK, 0, t);  // K(0) and V(0) are one copy group
    t = probe_time(probe);
    compute_S(K_smem, S_cur);
    span(ProbeSpanKind::kQK, 0, t);
  }

  // Prologue: Q global -> shared (-> registers, for the CTA's lifetime), and
  // the per-thread fragment addresses; O, m and l start empty.
  __device__ __forceinline__ void load_q() {
    const uint32_t Q_stage = kEarlyK0 ? K_smem + Cfg::kKVTileBytes : Q_smem;
    load_tile<Cfg, BLOCK_Q>(Q_stage, [&](int r) { return view.q_ptr(q0 + r); }, view.rows - q0, any_valid, tid);
    cp_async_commit();  // shared-memory Q: the pipeline's first wait covers this group too
    if constexpr (kEarlyK0) issue_K0();

    // A fragments of Q (16x16): rows lane%16, columns (lane/16)*8 of each tile.
    Q_thread = swizzle<ROW_BYTES, SWZ>((warp_id * WARP_Q + lane_id % 16) * ROW_BYTES + (lane_id / 16) * 16);
    if constexpr (!Cfg::kQInSmem) {
      if constexpr (kEarlyK0) {
        cp_async_wait<1>();  // Q has landed; K(0) may still be in flight
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // every thread's Q chunks have landed
#pragma unroll
      for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
        for (int mma_id_d = 0; mma_id_d < DIM / kMmaK; ++mma_id_d)
          ldmatrix_x4(Q_rmem[mma_id_q][mma_id_d],
                      Q_stage + ((Q_thread + mma_id_q * kMmaM * ROW_BYTES) ^ (mma_id_d * kMmaK * 2)));
      __syncthreads();  // Q_smem aliases the K/V buffers the pipeline now fills
    }

    // Row steps of 8 or 16 rows are added, column steps XOR-ed (see
    // swizzle.cuh), and only then the tile's base, so the XOR never touches
    // the base address.
    //   K, B operand, non-trans: x2 reads d [0,16) of 8 keys, x4 d [0,32).
    //   V, B operand, trans:     x2 reads 16 keys of d [0,8), x4 d [0,16).
    K_thread = swizzle<ROW_BYTES, SWZ>((lane_id % 8) * ROW_BYTES + (lane_id / 8) * 8 * 2);
    K_thread_x2 = swizzle<ROW_BYTES, SWZ>((lane_id % 8) * ROW_BYTES + ((lane_id / 8) % 2) * 8 * 2);
    V_thread = swizzle<ROW_BYTES, SWZ>((lane_id % 16) * ROW_BYTES + (lane_id / 16) * 8 * 2);
    V_thread_x2 = swizzle<ROW_BYTES, SWZ>((lane_id % 16) * ROW_BYTES);

#pragma unroll
    for (int i = 0; i < WARP_Q / kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < DIM / kMmaN; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) O_rmem[i][j][r] = 0.0f;
#pragma unroll
    for (int i = 0; i < WARP_Q / kMmaM; ++i)
      for (int h = 0; h < 2; ++h) {
        m_rmem[i][h] = -INFINITY;
        l_rmem[i][h] = 0.0f;
      }
  }

  // S = Q K(t)ᵀ for this warp's rows: [WARP_Q, BLOCK_KV] in C fragments.
  // Outer loop over head_dim steps, so each Q fragment (registers or shared)
  // and each K fragment is fetched once per tile and reused across the other
  // operand's tiles.
  __device__ __forceinline__ void compute_S(uint32_t K_tile, SFrag& S_rmem) {
    constexpr int kStep = Cfg::kX4 ? 2 : 1;  // k16 steps per K ldmatrix
    // head_dim 80 is five k16 steps: the x4 loads take two at a time, and the
    // fifth is read with x2 below.
    constexpr int kTail = (DIM / kMmaK) % kStep;
#pragma unroll
    for (int mma_id_d = 0; mma_id_d < DIM / kMmaK - kTail; mma_id_d += kStep) {
      uint32_t Q_cur[WARP_Q / kMmaM][kStep][4];
#pragma unroll
      for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
        for (int s = 0; s < kStep; ++s) {
          if constexpr (Cfg::kQInSmem) {
            ldmatrix_x4(Q_cur[mma_id_q][s],
                        Q_smem + ((Q_thread + mma_id_q * kMmaM * ROW_BYTES) ^ ((mma_id_d + s) * kMmaK * 2)));
          } else {
#pragma unroll
            for (int r = 0; r < 4; ++r) Q_cur[mma_id_q][s][r] = Q_rmem[mma_id_q][mma_id_d + s][r];
          }
        }
#pragma unroll
      for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaN; ++mma_id_kv) {
        uint32_t K_rmem[2 * kStep];  // b fragments for d-steps mma_id_d (and mma_id_d + 1 with x4)
        if constexpr (Cfg::kX4) {
          ldmatrix_x4(reinterpret_cast<uint32_t(&)[4]>(K_rmem),
                      K_tile + ((K_thread + mma_id_kv * kMmaN * ROW_BYTES) ^ (mma_id_d * kMmaK * 2)));
        } else {
          ldmatrix_x2(reinterpret_cast<uint32_t(&)[2]>(K_rmem),
                      K_tile + ((K_thread_x2 + mma_id_kv * kMmaN * ROW_BYTES) ^ (mma_id_d * kMmaK * 2)));
        }
#pragma unroll
        for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
          for (int s = 0; s < kStep; ++s) Mma::mma(Q_cur[mma_id_q][s], K_rmem + 2 * s, S_rmem[mma_id_q][mma_id_kv]);
      }
    }
    if constexpr (kTail != 0) {
      constexpr int mma_id_d = DIM / kMmaK - 1;
      uint32_t Q_cur[WARP_Q / kMmaM][4];
#pragma unroll
      for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q) {
        if constexpr (Cfg::kQInSmem) {
          ldmatrix_x4(Q_cur[mma_id_q], Q_smem + ((Q_thread + mma_id_q * kMmaM * ROW_BYTES) ^ (mma_id_d * kMmaK * 2)));
        } else {
#pragma unroll
          for (int r = 0; r < 4; ++r) Q_cur[mma_id_q][r] = Q_rmem[mma_id_q][mma_id_d][r];
        }
      }
#pragma unroll
      for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaN; ++mma_id_kv) {
        uint32_t K_rmem[2];
        ldmatrix_x2(K_rmem, K_tile + ((K_thread_x2 + mma_id_kv * kMmaN * ROW_BYTES) ^ (mma_id_d * kMmaK * 2)));
#pragma unroll
        for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
          Mma::mma(Q_cur[mma_id_q], K_rmem, S_rmem[mma_id_q][mma_id_kv]);
      }
    }
  }

  // O += P V(t), P given as A fragments [WARP_Q, BLOCK_KV].
  __device__ __forceinline__ void compute_PV(uint32_t V_tile, const PFrag& P_rmem) {
#pragma unroll
    for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaK; ++mma_id_kv) {
      if constexpr (Cfg::kX4) {
#pragma unroll
        for (int mma_id_d = 0; mma_id_d < DIM / kMmaN; mma_id_d += 2) {
          uint32_t V_rmem[4];  // b fragments for d-tiles mma_id_d and mma_id_d + 1
          ldmatrix_x4_trans(V_rmem, V_tile + ((V_thread + mma_id_kv * kMmaK * ROW_BYTES) ^ (mma_id_d * kMmaN * 2)));
#pragma unroll
          for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q) {
            Mma::mma(P_rmem[mma_id_q][mma_id_kv], V_rmem, O_rmem[mma_id_q][mma_id_d]);
            Mma::mma(P_rmem[mma_id_q][mma_id_kv], V_rmem + 2, O_rmem[mma_id_q][mma_id_d + 1]);
          }
        }
      } else {
#pragma unroll
        for (int mma_id_d = 0; mma_id_d < DIM / kMmaN; ++mma_id_d) {
          uint32_t V_rmem[2];
          ldmatrix_x2_trans(V_rmem, V_tile + ((V_thread_x2 + mma_id_kv * kMmaK * ROW_BYTES) ^ (mma_id_d * kMmaN * 2)));
#pragma unroll
          for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
            Mma::mma(P_rmem[mma_id_q][mma_id_kv], V_rmem, O_rmem[mma_id_q][mma_id_d]);
        }
      }
    }
  }

  // The mask step (mask_tile above), for the pipelines that run on this
  // struct's steps (v1..v4's).
  __device__ __forceinline__ void mask_tile(int kv_tile, SFrag& S_rmem) {
    if constexpr (kSoftcap) softcap_tile<Cfg>(p.softcap, S_rmem);
    detail::mask_tile<Cfg, kCausal, View, kWindow>(view, q0, warp_id, lane_id, kv_begin, kv_end, kv_tile, S_rmem);
  }

  // Online-softmax update for one tile of (masked) logits: new running max
  // m, rescale of l and O by exp2(m_old - m_new), P = exp2(S·scale·log2e - m)
  // packed into A fragments. Branch-free, so the compiler can interleave it
  // with independent tensor-core work (the v6 pipeline relies on that).
  __device__ __forceinline__ void softmax_update(int kv_tile, SFrag& S_rmem, PFrag& P_rmem) {
#pragma unroll
    for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h = 0: row lane/4, h = 1: row lane/4 + 8
        const float row_max = rows::row_max(S_rmem[mma_id_q], h);
        const float m_old = m_rmem[mma_id_q][h];
        const float m_new = fmaxf(m_old, row_max * p.scale_log2);
        m_rmem[mma_id_q][h] = m_new;
        const float m_use = rows::exp2_offset(m_new);
        const float rescale = fast_exp2(m_old - m_use);
        const float row_sum = rows::exp2_row(S_rmem[mma_id_q], h, p.scale_log2, m_use);
        l_rmem[mma_id_q][h] = l_rmem[mma_id_q][h] * rescale + row_sum;
        if constexpr (Probe::kEnabled) {
          // The keys of this tile the row sees: those before kv_end and,
          // causal, up to its diagonal; windowed, inside its window.
          const int row = q0 + warp_id * WARP_Q + mma_id_q * kMmaM + lane_id / 4 + h * 8;
          const int k0 = kv_begin + kv_tile * BLOCK_KV;
          const int key_end = kCausal || kWindow ? min(kv_end, view.last_key(row) + 1) : kv_end;
          int key_begin = k0;
          if constexpr (kWindow) key_begin = max(k0, view.first_key(row));
          probe_row_state(probe, view.probe_query(row, p.probe.traced_head), probe_tile0 + kv_tile, m_new,
                          row_max * p.scale_log2, rescale, row_sum, l_rmem[mma_id_q][h],
                          max(0, min(k0 + BLOCK_KV, key_end) - key_begin));
        }
        rows::rescale_row(O_rmem[mma_id_q], h, rescale);
      }
      rows::pack_p<Mma>(S_rmem[mma_id_q], P_rmem[mma_id_q]);
    }
  }

  __device__ __forceinline__ void online_softmax(int kv_tile, SFrag& S_rmem, PFrag& P_rmem) {
    mask_tile(kv_tile, S_rmem);
    softmax_update(kv_tile, S_rmem, P_rmem);
  }

  // Epilogue: normalize by l, store O (bf16/fp16) and the LSE, or the float
  // partials of this KV split for the combine kernel.
  __device__ __forceinline__ void epilogue() {
    const uint64_t epilogue_start = probe_time(probe);
#pragma unroll
    for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = rows::quad_sum(l_rmem[mma_id_q][h]);
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: output 0
        const int row = q0 + warp_id * WARP_Q + mma_id_q * kMmaM + lane_id / 4 + h * 8;
        if (row >= view.rows) continue;
        const float lse = l > 0.0f ? (m_rmem[mma_id_q][h] + log2f(l)) * kLn2 : -INFINITY;
        if (view.partial()) {
          rows::store_row_f32(O_rmem[mma_id_q], h, inv_l, view.partial_o(row), lane_id);
          if (lane_id % 4 == 0) view.store_partial_lse(row, lse);
        } else {
          rows::store_row<Mma>(O_rmem[mma_id_q], h, inv_l, view.o_ptr(row), lane_id);
          if (lane_id % 4 == 0) view.store_lse(row, lse);
        }
      }
    probe_span(probe, ProbeSpanKind::kEpilogue, -1, epilogue_start);
    probe_cta_end(probe, {view.probe_batch(), view.probe_head(), q0, view.probe_split(), probe_tile0, num_kv_tiles},
                  warp_id);
  }
};

}  // namespace detail
}  // namespace flashscope::kernels
