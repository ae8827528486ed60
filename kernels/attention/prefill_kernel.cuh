// FlashAttention-2 forward for sm80+: one templated kernel whose config names
// the seed's steps (seeds/000), so v1..v5 are configurations, not copies.
//
//   O[q, :] = sum_j softmax_j(scale · Q[q]·K[j]) V[j, :]
//
// Work split: one CTA per (q-tile of BLOCK_Q rows, q-head, sequence); each of
// its warps owns WARP_Q = BLOCK_Q / NUM_WARPS rows (FA2: split Q, not KV, so
// no cross-warp reduction). The CTA walks the KV sequence in tiles of
// BLOCK_KV keys, keeping for every row the running max m, the running sum l
// and the output accumulator O in registers (online softmax):
//   m' = max(m, rowmax(S)),  P = exp2(S·scale·log2e − m'),
//   l' = l·exp2(m − m') + rowsum(P),  O' = O·exp2(m − m') + P·V
// and normalizes O by l once at the end.
//
// Tensor cores: mma.m16n8k16 with f32 accumulate. Q is the A operand (loaded
// to registers once), K the B operand of S = Q·Kᵀ (ldmatrix, non-transposed),
// P is re-packed from the S accumulator straight into A fragments (the C
// layout of two n8 tiles equals the A layout of one k16 tile), V is the B
// operand of O += P·V (ldmatrix.trans).
//
// Config steps (what each seed version adds):
//   kSwizzle   v2+  XOR-swizzled shared memory: ldmatrix without bank conflicts
//   kPipeline  v3+  K and V tiles double-buffered: tile t+1 loads while t computes
//              v5   K double-buffered, V single: V(t) loads during S = Q·K(t)ᵀ,
//                   K(t+1) during the softmax and P·V, for 3/4 of the smem
//   kX4        v4+  ldmatrix.x4 for K and V: half the ldmatrix instructions
//
// Semantics: causal (bottom-right aligned, tiles past the diagonal skipped,
// the diagonal tiles masked), GQA (kv-head = q-head / group, no K/V copies),
// varlen (cu_seqlens), tails of any length (zero-filled loads, masked keys,
// guarded stores). Layouts are arbitrary strides with head_dim contiguous.
//
// Probe (kernels/common/probe.cuh): NoProbe for the production kernels, whose
// hooks are empty; GlobalTimerProbe for the trace capture, which stamps each
// CTA, times each warp's phases (load issue/wait, Q·Kᵀ, softmax, P·V,
// epilogue) and records the online-softmax state of traced rows per tile.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_views.cuh"
#include "kernels/attention/prefill_params.h"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/swizzle.cuh"

namespace flashscope::kernels {

enum class Pipeline {
  kSerial,  // load K(t), V(t); wait; compute (v1, v2)
  kKV2,     // K and V double-buffered (v3, v4)
  kK2V1,    // K double-buffered, V single, loads interleaved with the two GEMMs (v5)
  kLookahead,  // K and V double-buffered, Q·K(t+1)ᵀ overlapped with softmax(t) in each warp (v6)
};

// Q_IN_SMEM: keep Q in shared memory and re-read its fragments every KV tile
// (FlashAttention-2's choice) instead of holding them in registers; frees
// DIM/4 · WARP_Q/16 registers for a taller warp tile. MIN_BLOCKS: CTAs per SM
// the register allocation must allow (__launch_bounds__).
template <int DIM, int BLOCK_Q, int BLOCK_KV, int NUM_WARPS, bool SWIZZLE, Pipeline PIPE, bool X4,
          bool Q_IN_SMEM = false, int MIN_BLOCKS = 1>
struct PrefillConfig {
  static constexpr int kDim = DIM;
  static constexpr int kBlockQ = BLOCK_Q;
  static constexpr int kBlockKV = BLOCK_KV;
  static constexpr int kWarps = NUM_WARPS;
  static constexpr int kThreads = NUM_WARPS * 32;
  static constexpr int kWarpQ = BLOCK_Q / NUM_WARPS;
  static constexpr bool kSwizzle = SWIZZLE;
  static constexpr Pipeline kPipe = PIPE;
  static constexpr bool kX4 = X4;

  static constexpr bool kQInSmem = Q_IN_SMEM;
  static constexpr int kMinBlocksPerSm = MIN_BLOCKS;
  static constexpr int kKStages = PIPE == Pipeline::kSerial ? 1 : 2;
  static constexpr int kVStages = PIPE == Pipeline::kKV2 || PIPE == Pipeline::kLookahead ? 2 : 1;
  static constexpr int kRowBytes = DIM * 2;  // one 16-bit row of head_dim
  static constexpr int kKVTileBytes = BLOCK_KV * kRowBytes;
  static constexpr int kQTileBytes = BLOCK_Q * kRowBytes;
  // Register-resident Q is staged through the start of the K/V buffers (it
  // lives in registers after the prologue); shared-memory Q has its own region.
  static constexpr int kKVBytes = (kKStages + kVStages) * kKVTileBytes;
  static constexpr int kQRegionBytes = Q_IN_SMEM ? kQTileBytes : 0;
  static constexpr int kSmemBytes =
      Q_IN_SMEM ? kQTileBytes + kKVBytes : (kKVBytes > kQTileBytes ? kKVBytes : kQTileBytes);

  static_assert(DIM == 64 || DIM == 128, "head_dim 64 or 128");
  static_assert(kWarpQ % 16 == 0, "each warp owns whole m16 MMA tiles of rows");
  static_assert(BLOCK_KV % 16 == 0, "KV tiles are whole k16 MMA tiles");
};

namespace detail {

constexpr int kMmaM = 16;
constexpr int kMmaN = 8;
constexpr int kMmaK = 16;
constexpr float kLn2 = 0.69314718055994530942f;

// Copies rows [0, ROWS) of a [rows, DIM] tile into swizzled shared memory
// with cp.async; row r comes from row_ptr(r), and rows >= valid_rows are
// zero-filled (their address is never formed: for a paged source that would
// read past the block table).
template <typename Cfg, int ROWS, typename T, typename RowPtr>
__device__ __forceinline__ void load_tile(uint32_t dst, RowPtr row_ptr, int valid_rows, const T* any_valid, int tid) {
  constexpr int kChunksPerRow = Cfg::kDim / 8;  // 16-byte chunks
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kIters = (kChunks + Cfg::kThreads - 1) / Cfg::kThreads;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int chunk = i * Cfg::kThreads + tid;
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    // row_ptr runs on every lane (a paged source shuffles page ids across the
    // warp); rows past valid_rows get a harmless address and copy zeros.
    const T* src = row_ptr(row < ROWS ? row : 0) + col;
    if (kChunks % Cfg::kThreads != 0 && chunk >= kChunks) continue;  // only when threads do not divide the tile
    const bool valid = row < valid_rows;
    cp_async_16(dst + swizzle<Cfg::kRowBytes, Cfg::kSwizzle>(row * Cfg::kRowBytes + col * 2), valid ? src : any_valid,
                valid);
  }
}

}  // namespace detail

template <typename Cfg, typename T, bool kCausal, typename View, typename Probe = NoProbe>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    attention_kernel(const __grid_constant__ typename Probe::template Params<typename View::Params> p) {
  using namespace detail;
  using Mma = MmaType<T>;
  constexpr int DIM = Cfg::kDim;
  constexpr int BLOCK_Q = Cfg::kBlockQ;
  constexpr int BLOCK_KV = Cfg::kBlockKV;
  constexpr int WARP_Q = Cfg::kWarpQ;
  constexpr int ROW_BYTES = Cfg::kRowBytes;
  constexpr bool SWZ = Cfg::kSwizzle;

  const int tid = threadIdx.x;
  const int warp_id = tid / 32;
  const int lane_id = tid % 32;
  typename Probe::Ctx probe;
  probe_cta_start(probe, p);
  // Over the paged cache the kernel may itself be launched programmatically
  // (the engine's decode step: after the QKV product that wrote q and the new
  // K/V): it waits for that grid before reading anything. The split-KV
  // combine follows on the stream, launched the same way (paged_combine.cu):
  // it may be scheduled once every CTA here has started, and waits for this
  // grid's completion before it reads the partials, so its launch latency
  // hides under this grid. Launched plainly, the wait returns at once. Dense
  // instantiations compile without either.
  constexpr bool kPaged = std::is_same_v<typename View::Params, PagedKernelParams>;
  if constexpr (kPaged) {
    pdl_wait();
    pdl_launch_dependents();
  }

  // Which rows and keys this CTA owns, and where they live
  // (attention_views.cuh); causal production launches take the longest
  // q-tiles of every head first.
  const View view = cta_view<View, kCausal && !Probe::kEnabled>(p);
  if (!view.active()) return;  // varlen: a shorter sequence than the longest
  const int q0 = view.q0;
  const int kv_begin = view.kv_begin;
  const int kv_end = view.kv_end;
  const int num_kv_tiles = kv_end > kv_begin ? (kv_end - kv_begin + BLOCK_KV - 1) / BLOCK_KV : 0;
  probe_select_view(probe, view, warp_id);
  // Closes the probe span opened at `start` for the CTA's KV tile `kv_tile`
  // (recorded as an absolute tile: a split starts at a whole tile).
  const int probe_tile0 = kv_begin / BLOCK_KV;
  // The conditional loads keep their own `if` (so the production kernels
  // compile exactly as they did before the hooks) and pass the condition here.
  auto span = [&](ProbeSpanKind kind, int kv_tile, uint64_t start, bool happened = true) {
    if (happened) probe_span(probe, kind, probe_tile0 + kv_tile, start);
  };
  const T* const any_valid = view.q_ptr(q0);  // for zero-filled chunks: never read

  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t smem_base = smem_addr(smem);
  const uint32_t Q_smem = smem_base;
  const uint32_t K_smem = smem_base + Cfg::kQRegionBytes;
  const uint32_t V_smem = K_smem + Cfg::kKStages * Cfg::kKVTileBytes;

  // key_rows(k0) gathers what addressing a tile's keys needs (for the paged
  // cache: its page ids, one block-table read per lane) before the copies.
  auto load_K = [&](int kv_tile, int stage) {
    const int k0 = kv_begin + kv_tile * BLOCK_KV;
    const auto keys = view.key_rows(k0, lane_id);
    load_tile<Cfg, BLOCK_KV>(K_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.k_ptr(keys, r); },
                             kv_end - k0, any_valid, tid);
  };
  auto load_V = [&](int kv_tile, int stage) {
    const int k0 = kv_begin + kv_tile * BLOCK_KV;
    const auto keys = view.key_rows(k0, lane_id);
    load_tile<Cfg, BLOCK_KV>(V_smem + stage * Cfg::kKVTileBytes, [&](int r) { return view.v_ptr(keys, r); },
                             kv_end - k0, any_valid, tid);
  };

  // --- prologue: Q global -> shared (-> registers, for the CTA's lifetime) ---
  // Over the paged cache (decode: a split is one or two tiles, so the CTA's
  // time is its chain of dependent loads) Q is staged past K's first stage,
  // and K(0) with its block-table reads is requested beside it instead of
  // after Q has landed: one memory round trip less per CTA.
  constexpr bool kEarlyK0 = kPaged && Cfg::kPipe == Pipeline::kK2V1 && !Cfg::kQInSmem;
  static_assert(!kEarlyK0 || Cfg::kKVTileBytes + Cfg::kQTileBytes <= Cfg::kSmemBytes,
                "Q staged past K stage 0 must fit in the K/V buffers");
  const uint32_t Q_stage = kEarlyK0 ? K_smem + Cfg::kKVTileBytes : Q_smem;
  load_tile<Cfg, BLOCK_Q>(Q_stage, [&](int r) { return view.q_ptr(q0 + r); }, view.rows - q0, any_valid, tid);
  cp_async_commit();  // shared-memory Q: the pipeline's first wait covers this group too
  if constexpr (kEarlyK0) {
    const uint64_t t0 = probe_time(probe);
    if (num_kv_tiles > 0) load_K(0, 0);
    span(ProbeSpanKind::kLoadIssueK, 0, t0, num_kv_tiles > 0);
    cp_async_commit();  // the K(0) group the pipeline's first wait expects
  }

  // A fragments of Q (16x16): rows lane%16, columns (lane/16)*8 of each tile.
  const uint32_t Q_thread = swizzle<ROW_BYTES, SWZ>((warp_id * WARP_Q + lane_id % 16) * ROW_BYTES + (lane_id / 16) * 16);
  constexpr int kQRegTiles = Cfg::kQInSmem ? 1 : WARP_Q / kMmaM;
  constexpr int kQRegSteps = Cfg::kQInSmem ? 1 : DIM / kMmaK;
  uint32_t Q_rmem[kQRegTiles][kQRegSteps][4];
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
        ldmatrix_x4(Q_rmem[mma_id_q][mma_id_d], Q_stage + ((Q_thread + mma_id_q * kMmaM * ROW_BYTES) ^ (mma_id_d * kMmaK * 2)));
    __syncthreads();  // Q_smem aliases the K/V buffers the pipeline now fills
  }

  // Per-thread ldmatrix addresses (offsets inside one tile). Row steps of 8 or
  // 16 rows are added, column steps XOR-ed (see swizzle.cuh), and only then
  // the tile's base, so the XOR never touches the base address.
  //   K, B operand, non-trans: x2 reads d [0,16) of 8 keys, x4 d [0,32).
  //   V, B operand, trans:     x2 reads 16 keys of d [0,8), x4 d [0,16).
  const uint32_t K_thread = swizzle<ROW_BYTES, SWZ>((lane_id % 8) * ROW_BYTES + (lane_id / 8) * 8 * 2);
  const uint32_t K_thread_x2 = swizzle<ROW_BYTES, SWZ>((lane_id % 8) * ROW_BYTES + ((lane_id / 8) % 2) * 8 * 2);
  const uint32_t V_thread = swizzle<ROW_BYTES, SWZ>((lane_id % 16) * ROW_BYTES + (lane_id / 16) * 8 * 2);
  const uint32_t V_thread_x2 = swizzle<ROW_BYTES, SWZ>((lane_id % 16) * ROW_BYTES);

  float O_rmem[WARP_Q / kMmaM][DIM / kMmaN][4] = {};
  // Row state. Each thread holds rows lane/4 and lane/4 + 8 of every m16 tile;
  // l is this thread's partial sum (its 2 columns of each n8 tile), reduced
  // across the quad only at the end, since the rescale factor is quad-uniform.
  float m_rmem[WARP_Q / kMmaM][2];
  float l_rmem[WARP_Q / kMmaM][2];
#pragma unroll
  for (int i = 0; i < WARP_Q / kMmaM; ++i)
    for (int h = 0; h < 2; ++h) {
      m_rmem[i][h] = -INFINITY;
      l_rmem[i][h] = 0.0f;
    }

  // S = Q K(t)ᵀ for this warp's rows: [WARP_Q, BLOCK_KV] in C fragments.
  // Outer loop over head_dim steps, so each Q fragment (registers or shared)
  // and each K fragment is fetched once per tile and reused across the other
  // operand's tiles.
  auto compute_S = [&](uint32_t K_tile, float (&S_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4]) {
    constexpr int kStep = Cfg::kX4 ? 2 : 1;  // k16 steps per K ldmatrix
#pragma unroll
    for (int mma_id_d = 0; mma_id_d < DIM / kMmaK; mma_id_d += kStep) {
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
  };

  // O += P V(t), P given as A fragments [WARP_Q, BLOCK_KV].
  auto compute_PV = [&](uint32_t V_tile, const uint32_t (&P_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4]) {
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
  };

  // Sets tile t's masked logits to -inf: keys past the CTA's range, and
  // causal keys past each row's diagonal. Only the last tile and tiles
  // crossing this warp's diagonal need it (last_key grows with the row).
  auto mask_tile = [&](int kv_tile, float (&S_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4]) {
    const int k0 = kv_begin + kv_tile * BLOCK_KV;
    const int warp_row0 = q0 + warp_id * WARP_Q;
    const bool need_mask = k0 + BLOCK_KV > kv_end || (kCausal && k0 + BLOCK_KV - 1 > view.last_key(warp_row0));
    if (!need_mask) return;
#pragma unroll
    for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
      for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaN; ++mma_id_kv)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = warp_row0 + mma_id_q * kMmaM + lane_id / 4 + (i >= 2 ? 8 : 0);
          const int col = k0 + mma_id_kv * kMmaN + (lane_id % 4) * 2 + (i & 1);
          const bool masked = col >= kv_end || (kCausal && col > view.last_key(row));
          if (masked) S_rmem[mma_id_q][mma_id_kv][i] = -INFINITY;
        }
  };

  // Online-softmax update for one tile of (masked) logits: new running max
  // m, rescale of l and O by exp2(m_old - m_new), P = exp2(S·scale·log2e - m)
  // packed into A fragments. Branch-free, so the compiler can interleave it
  // with independent tensor-core work (the v6 pipeline relies on that).
  auto softmax_update = [&](int kv_tile, float (&S_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4],
                            uint32_t (&P_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4]) {
#pragma unroll
    for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h = 0: row lane/4, h = 1: row lane/4 + 8
        float row_max = -INFINITY;
#pragma unroll
        for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaN; ++mma_id_kv)
          row_max = fmaxf(row_max, fmaxf(S_rmem[mma_id_q][mma_id_kv][2 * h], S_rmem[mma_id_q][mma_id_kv][2 * h + 1]));
        // The 4 threads of a quad hold the same row: reduce across them.
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));

        const float m_old = m_rmem[mma_id_q][h];
        const float m_new = fmaxf(m_old, row_max * p.scale_log2);
        m_rmem[mma_id_q][h] = m_new;
        // A row with every key masked so far keeps m = -inf; subtract 0 then
        // so exp2 sees -inf - 0 (= 0) rather than -inf - -inf (= NaN).
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float rescale = fast_exp2(m_old - m_use);

        float row_sum = 0.0f;
#pragma unroll
        for (int mma_id_kv = 0; mma_id_kv < BLOCK_KV / kMmaN; ++mma_id_kv)
#pragma unroll
          for (int j = 2 * h; j < 2 * h + 2; ++j) {
            const float prob = fast_exp2(fmaf(S_rmem[mma_id_q][mma_id_kv][j], p.scale_log2, -m_use));
            S_rmem[mma_id_q][mma_id_kv][j] = prob;
            row_sum += prob;
          }
        l_rmem[mma_id_q][h] = l_rmem[mma_id_q][h] * rescale + row_sum;
        if constexpr (Probe::kEnabled) {
          // The keys of this tile the row sees: those before kv_end and, causal, up to its diagonal.
          const int row = q0 + warp_id * WARP_Q + mma_id_q * kMmaM + lane_id / 4 + h * 8;
          const int k0 = kv_begin + kv_tile * BLOCK_KV;
          const int key_end = kCausal ? min(kv_end, view.last_key(row) + 1) : kv_end;
          probe_row_state(probe, view.probe_query(row, p.probe.traced_head), probe_tile0 + kv_tile, m_new,
                          row_max * p.scale_log2, rescale, row_sum, l_rmem[mma_id_q][h],
                          max(0, min(BLOCK_KV, key_end - k0)));
        }
#pragma unroll
        for (int mma_id_d = 0; mma_id_d < DIM / kMmaN; ++mma_id_d) {
          O_rmem[mma_id_q][mma_id_d][2 * h] *= rescale;
          O_rmem[mma_id_q][mma_id_d][2 * h + 1] *= rescale;
        }
      }
      // C fragments of n8 tiles 2k and 2k+1 are exactly the A fragment of k16 tile k.
#pragma unroll
      for (int k = 0; k < BLOCK_KV / kMmaK; ++k) {
        P_rmem[mma_id_q][k][0] = Mma::pack(S_rmem[mma_id_q][2 * k][0], S_rmem[mma_id_q][2 * k][1]);
        P_rmem[mma_id_q][k][1] = Mma::pack(S_rmem[mma_id_q][2 * k][2], S_rmem[mma_id_q][2 * k][3]);
        P_rmem[mma_id_q][k][2] = Mma::pack(S_rmem[mma_id_q][2 * k + 1][0], S_rmem[mma_id_q][2 * k + 1][1]);
        P_rmem[mma_id_q][k][3] = Mma::pack(S_rmem[mma_id_q][2 * k + 1][2], S_rmem[mma_id_q][2 * k + 1][3]);
      }
    }
  };

  auto online_softmax = [&](int kv_tile, float (&S_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4],
                            uint32_t (&P_rmem)[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4]) {
    mask_tile(kv_tile, S_rmem);
    softmax_update(kv_tile, S_rmem, P_rmem);
  };

  // --- main loop over KV tiles: the three pipelines ---
  // Probe spans (`t = probe_time(probe)` ... `span(kind, tile, t)`) bracket
  // each phase; with NoProbe they compile to nothing. A wait span covers the
  // cp.async wait and the barrier after it; barriers before a load belong to
  // no span.
  if constexpr (Cfg::kPipe == Pipeline::kSerial) {
    for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
      __syncthreads();  // all warps are done reading the previous tile's K and V
      uint64_t t = probe_time(probe);
      load_K(kv_tile, 0);
      span(ProbeSpanKind::kLoadIssueK, kv_tile, t);
      t = probe_time(probe);
      load_V(kv_tile, 0);
      cp_async_commit();
      span(ProbeSpanKind::kLoadIssueV, kv_tile, t);
      t = probe_time(probe);
      cp_async_wait<0>();
      __syncthreads();  // the whole tile has landed, from every thread's copies
      span(ProbeSpanKind::kLoadWaitK, kv_tile, t);  // K and V are one copy group: one wait
      float S_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4] = {};
      uint32_t P_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4];
      t = probe_time(probe);
      compute_S(K_smem, S_rmem);
      span(ProbeSpanKind::kQK, kv_tile, t);
      t = probe_time(probe);
      online_softmax(kv_tile, S_rmem, P_rmem);
      span(ProbeSpanKind::kSoftmax, kv_tile, t);
      t = probe_time(probe);
      compute_PV(V_smem, P_rmem);
      span(ProbeSpanKind::kPV, kv_tile, t);
    }
  } else if constexpr (Cfg::kPipe == Pipeline::kKV2) {
    if (num_kv_tiles > 0) {
      uint64_t t = probe_time(probe);
      load_K(0, 0);
      span(ProbeSpanKind::kLoadIssueK, 0, t);
      t = probe_time(probe);
      load_V(0, 0);
      span(ProbeSpanKind::kLoadIssueV, 0, t);
    }
    cp_async_commit();
    for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
      const int stage = kv_tile % 2;
      __syncthreads();  // all warps are done with tile t-1, whose buffers tile t+1 reuses
      if (kv_tile + 1 < num_kv_tiles) {
        uint64_t t = probe_time(probe);
        load_K(kv_tile + 1, 1 - stage);
        span(ProbeSpanKind::kLoadIssueK, kv_tile + 1, t);
        t = probe_time(probe);
        load_V(kv_tile + 1, 1 - stage);
        span(ProbeSpanKind::kLoadIssueV, kv_tile + 1, t);
      }
      cp_async_commit();  // possibly empty: keeps "one group per tile" so wait<1> means tile t
      uint64_t t = probe_time(probe);
      cp_async_wait<1>();
      __syncthreads();  // tile t is visible to every warp; tile t+1 may still be in flight
      span(ProbeSpanKind::kLoadWaitK, kv_tile, t);  // K(t) and V(t) are one copy group: one wait
      float S_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4] = {};
      uint32_t P_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4];
      t = probe_time(probe);
      compute_S(K_smem + stage * Cfg::kKVTileBytes, S_rmem);
      span(ProbeSpanKind::kQK, kv_tile, t);
      t = probe_time(probe);
      online_softmax(kv_tile, S_rmem, P_rmem);
      span(ProbeSpanKind::kSoftmax, kv_tile, t);
      t = probe_time(probe);
      compute_PV(V_smem + stage * Cfg::kKVTileBytes, P_rmem);
      span(ProbeSpanKind::kPV, kv_tile, t);
    }
  } else if constexpr (Cfg::kPipe == Pipeline::kLookahead) {
    // v6: S(t+1) = Q·K(t+1)ᵀ is issued in the same straight-line block as the
    // softmax of tile t, so one warp keeps the tensor pipe busy while its FP32
    // and SFU work runs (FlashAttention-2 leaves that overlap to other warps).
    // K and V are double-buffered; K runs one tile ahead of V.
    // Probed, the span boundaries between Q·K(t+1)ᵀ, softmax(t) and P·V(t)
    // are timer reads in that block: they record the phases one after another
    // and keep the compiler from overlapping them as freely as in the
    // production kernel, whose timing is the one to quote.
    float S_cur[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4] = {};
    if (num_kv_tiles > 0) {
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
      cp_async_commit();  // possibly empty: keeps one group per step
      t = probe_time(probe);
      cp_async_wait<1>();
      __syncthreads();  // K(0) and V(0) have landed for every thread
      span(ProbeSpanKind::kLoadWaitK, 0, t);  // K(0) and V(0) are one copy group
      t = probe_time(probe);
      compute_S(K_smem, S_cur);
      span(ProbeSpanKind::kQK, 0, t);
    }
    for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
      const int stage = kv_tile % 2;
      __syncthreads();  // all warps are done with V(t-1), whose buffer V(t+1) takes
      uint64_t t = probe_time(probe);
      if (kv_tile + 1 < num_kv_tiles) load_V(kv_tile + 1, 1 - stage);
      span(ProbeSpanKind::kLoadIssueV, kv_tile + 1, t, kv_tile + 1 < num_kv_tiles);
      cp_async_commit();
      t = probe_time(probe);
      cp_async_wait<1>();  // K(t+1) and V(t) have landed; V(t+1) may still be in flight
      __syncthreads();     // ... for every thread's chunks; and all warps are done with K(t)
      span(ProbeSpanKind::kLoadWaitV, kv_tile, t);  // V(t), with K(t+1) in the same wait
      t = probe_time(probe);
      if (kv_tile + 2 < num_kv_tiles) load_K(kv_tile + 2, stage);
      span(ProbeSpanKind::kLoadIssueK, kv_tile + 2, t, kv_tile + 2 < num_kv_tiles);
      cp_async_commit();

      mask_tile(kv_tile, S_cur);
      // On the last tile S_next reads a stale K buffer: wasted but harmless
      // work that keeps this block free of branches (and of a span).
      float S_next[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4] = {};
      uint32_t P_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4];
      t = probe_time(probe);
      compute_S(K_smem + (1 - stage) * Cfg::kKVTileBytes, S_next);
      span(ProbeSpanKind::kQK, kv_tile + 1, t, kv_tile + 1 < num_kv_tiles);
      t = probe_time(probe);
      softmax_update(kv_tile, S_cur, P_rmem);
      span(ProbeSpanKind::kSoftmax, kv_tile, t);
      t = probe_time(probe);
      compute_PV(V_smem + stage * Cfg::kKVTileBytes, P_rmem);
      span(ProbeSpanKind::kPV, kv_tile, t);
#pragma unroll
      for (int i = 0; i < WARP_Q / kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < BLOCK_KV / kMmaN; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) S_cur[i][j][r] = S_next[i][j][r];
    }
  } else {  // Pipeline::kK2V1
    if constexpr (!kEarlyK0) {
      const uint64_t t0 = probe_time(probe);
      if (num_kv_tiles > 0) load_K(0, 0);
      span(ProbeSpanKind::kLoadIssueK, 0, t0, num_kv_tiles > 0);
      cp_async_commit();
    }
    for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
      const int stage = kv_tile % 2;
      __syncthreads();  // all warps are done with V(t-1) (one buffer) and K(t-1) (whose buffer K(t+1) takes)
      uint64_t t = probe_time(probe);
      load_V(kv_tile, 0);
      cp_async_commit();
      span(ProbeSpanKind::kLoadIssueV, kv_tile, t);
      t = probe_time(probe);
      cp_async_wait<1>();  // K(t) has landed; V(t) may still be in flight
      __syncthreads();     // ... for every thread's chunks of K(t)
      span(ProbeSpanKind::kLoadWaitK, kv_tile, t);
      float S_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaN][4] = {};
      uint32_t P_rmem[WARP_Q / kMmaM][BLOCK_KV / kMmaK][4];
      t = probe_time(probe);
      compute_S(K_smem + stage * Cfg::kKVTileBytes, S_rmem);
      span(ProbeSpanKind::kQK, kv_tile, t);
      t = probe_time(probe);
      if (kv_tile + 1 < num_kv_tiles) load_K(kv_tile + 1, 1 - stage);
      span(ProbeSpanKind::kLoadIssueK, kv_tile + 1, t, kv_tile + 1 < num_kv_tiles);
      cp_async_commit();  // possibly empty, so the wait below always means V(t)
      t = probe_time(probe);
      online_softmax(kv_tile, S_rmem, P_rmem);
      span(ProbeSpanKind::kSoftmax, kv_tile, t);
      t = probe_time(probe);
      cp_async_wait<1>();  // V(t) has landed; K(t+1) may still be in flight
      __syncthreads();     // ... for every thread's chunks of V(t)
      span(ProbeSpanKind::kLoadWaitV, kv_tile, t);
      t = probe_time(probe);
      compute_PV(V_smem, P_rmem);
      span(ProbeSpanKind::kPV, kv_tile, t);
    }
  }
  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  // --- epilogue: normalize by l, store O (bf16/fp16) and the LSE, or the
  // float partials of this KV split for the combine kernel ---
  const uint64_t epilogue_start = probe_time(probe);
#pragma unroll
  for (int mma_id_q = 0; mma_id_q < WARP_Q / kMmaM; ++mma_id_q)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_rmem[mma_id_q][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: output 0
      const int row = q0 + warp_id * WARP_Q + mma_id_q * kMmaM + lane_id / 4 + h * 8;
      if (row >= view.rows) continue;
      const float lse = l > 0.0f ? (m_rmem[mma_id_q][h] + log2f(l)) * kLn2 : -INFINITY;
      if (view.partial()) {
        float* O_row = view.partial_o(row);
#pragma unroll
        for (int mma_id_d = 0; mma_id_d < DIM / kMmaN; ++mma_id_d) {
          const float* o = O_rmem[mma_id_q][mma_id_d];
          *reinterpret_cast<float2*>(O_row + mma_id_d * kMmaN + (lane_id % 4) * 2) =
              make_float2(o[2 * h] * inv_l, o[2 * h + 1] * inv_l);
        }
        if (lane_id % 4 == 0) view.store_partial_lse(row, lse);
      } else {
        T* O_row = view.o_ptr(row);
#pragma unroll
        for (int mma_id_d = 0; mma_id_d < DIM / kMmaN; ++mma_id_d) {
          const float* o = O_rmem[mma_id_q][mma_id_d];
          *reinterpret_cast<uint32_t*>(O_row + mma_id_d * kMmaN + (lane_id % 4) * 2) =
              Mma::pack(o[2 * h] * inv_l, o[2 * h + 1] * inv_l);
        }
        if (lane_id % 4 == 0) view.store_lse(row, lse);
      }
    }
  probe_span(probe, ProbeSpanKind::kEpilogue, -1, epilogue_start);
  probe_cta_end(probe, {view.probe_batch(), view.probe_head(), q0, view.probe_split(), probe_tile0, num_kv_tiles},
                warp_id);
}

// Launches one configuration on dense tensors: q-tiles on x (reversed inside
// the kernel), heads on y, sequences on z; shared memory opted in above 48 KiB.
template <typename Cfg, typename Kernel>
cudaError_t opt_in_smem(Kernel kernel) {
  if (Cfg::kSmemBytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
}

// Probe: NoProbe (production) or GlobalTimerProbe (trace capture, whose
// parameters carry the probe buffers after the kernel's own).
template <typename Cfg, typename T, bool kCausal, typename Probe = NoProbe>
cudaError_t launch_prefill(const typename Probe::template Params<PrefillKernelParams>& p, cudaStream_t stream) {
  auto kernel = attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, Probe>;
  if (cudaError_t err = opt_in_smem<Cfg>(kernel); err != cudaSuccess) return err;
  const dim3 grid((p.q_len + Cfg::kBlockQ - 1) / Cfg::kBlockQ, p.q_heads, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// Launches one configuration over the paged cache: (q-tile x split) on x,
// kv-heads on y, sequences on z.
template <typename Cfg, typename T, bool kCausal, typename Probe = NoProbe>
cudaError_t launch_paged(const typename Probe::template Params<PagedKernelParams>& p, cudaStream_t stream,
                         bool programmatic) {
  auto kernel =
      attention_kernel<Cfg, T, kCausal, PagedView<T, Cfg::kDim, Cfg::kBlockQ, Cfg::kBlockKV, kCausal>, Probe>;
  if (cudaError_t err = opt_in_smem<Cfg>(kernel); err != cudaSuccess) return err;
  const int q_tiles = (p.q_len * p.group + Cfg::kBlockQ - 1) / Cfg::kBlockQ;
  return launch_maybe_programmatic(kernel, dim3(q_tiles * p.num_splits, p.kv_heads, p.batch), dim3(Cfg::kThreads),
                                   Cfg::kSmemBytes, stream, programmatic, p);
}

}  // namespace flashscope::kernels
