// FlashAttention-2 forward for sm80+: one templated kernel whose config names
// the steps of gau-nernst's learn-cuda `07_attention` FlashAttention-2
// write-up, so v1..v5 are configurations, not copies.
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
// Config steps (what each version adds), each a pipeline below or a branch
// of a step in prefill_steps.cuh:
//   kSwizzle   v2+  XOR-swizzled shared memory: ldmatrix without bank conflicts
//   kPipeline  v3+  K and V tiles double-buffered: tile t+1 loads while t computes
//              v5   K double-buffered, V single: V(t) loads during S = Q·K(t)ᵀ,
//                   K(t+1) during the softmax and P·V, for 3/4 of the smem
//              v6   Q·K(t+1)ᵀ in the same instruction stream as softmax(t)
//   kX4        v4+  ldmatrix.x4 for K and V: half the ldmatrix instructions
//
// Semantics: causal (bottom-right aligned, tiles past the diagonal skipped,
// the diagonal tiles masked), sliding windows and soft-capping (kMods,
// prefill_config.cuh: a CTA visits only the key tiles its rows' windows
// reach, masks only those crossing a window's edge), GQA (kv-head = q-head / group, no K/V copies),
// varlen (cu_seqlens), tails of any length (zero-filled loads, masked keys,
// guarded stores). Layouts are arbitrary strides with head_dim contiguous.
//
// Probe (kernels/common/probe.cuh): NoProbe for the production kernels, whose
// hooks are empty; GlobalTimerProbe for the trace capture, which stamps each
// CTA, times each warp's phases (load issue/wait, Q·Kᵀ, softmax, P·V,
// epilogue) and records the online-softmax state of traced rows per tile.
// Probe spans (`t = probe_time(probe)` ... `span(kind, tile, t)`) bracket
// each phase; with NoProbe they compile to nothing. A wait span covers the
// cp.async wait and the barrier after it; barriers before a load belong to
// no span.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_views.cuh"
#include "kernels/attention/prefill_config.cuh"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_steps.cuh"
#include "kernels/common/math.h"
#include "kernels/common/probe.cuh"
#include "kernels/common/ptx.cuh"

namespace flashscope::kernels {

namespace detail {

// The teaching ladder's pipelines (v1..v4; the production v5 and v6 loops
// stay in the kernel's body, where they compile to the SASS they always had).
// v1, v2: load K(t), V(t); wait; compute.
template <typename Cta>
__device__ __forceinline__ void pipeline_serial(Cta& cta, int num_kv_tiles) {
  using SFrag = typename Cta::SFrag;
  using PFrag = typename Cta::PFrag;
  for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
    __syncthreads();  // all warps are done reading the previous tile's K and V
    uint64_t t = probe_time(cta.probe);
    cta.load_K(kv_tile, 0);
    cta.span(ProbeSpanKind::kLoadIssueK, kv_tile, t);
    t = probe_time(cta.probe);
    cta.load_V(kv_tile, 0);
    cp_async_commit();
    cta.span(ProbeSpanKind::kLoadIssueV, kv_tile, t);
    t = probe_time(cta.probe);
    cp_async_wait<0>();
    __syncthreads();  // the whole tile has landed, from every thread's copies
    cta.span(ProbeSpanKind::kLoadWaitK, kv_tile, t);  // K and V are one copy group: one wait
    SFrag S_rmem = {};
    PFrag P_rmem;
    t = probe_time(cta.probe);
    cta.compute_S(cta.K_smem, S_rmem);
    cta.span(ProbeSpanKind::kQK, kv_tile, t);
    t = probe_time(cta.probe);
    cta.online_softmax(kv_tile, S_rmem, P_rmem);
    cta.span(ProbeSpanKind::kSoftmax, kv_tile, t);
    t = probe_time(cta.probe);
    cta.compute_PV(cta.V_smem, P_rmem);
    cta.span(ProbeSpanKind::kPV, kv_tile, t);
  }
}

// v3, v4: K and V double-buffered; tile t+1 loads while tile t computes.
template <typename Cta>
__device__ __forceinline__ void pipeline_kv2(Cta& cta, int num_kv_tiles) {
  using Cfg = typename Cta::Config;
  using SFrag = typename Cta::SFrag;
  using PFrag = typename Cta::PFrag;
  if (num_kv_tiles > 0) {
    uint64_t t = probe_time(cta.probe);
    cta.load_K(0, 0);
    cta.span(ProbeSpanKind::kLoadIssueK, 0, t);
    t = probe_time(cta.probe);
    cta.load_V(0, 0);
    cta.span(ProbeSpanKind::kLoadIssueV, 0, t);
  }
  cp_async_commit();
  for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
    const int stage = kv_tile % 2;
    __syncthreads();  // all warps are done with tile t-1, whose buffers tile t+1 reuses
    if (kv_tile + 1 < num_kv_tiles) {
      uint64_t t = probe_time(cta.probe);
      cta.load_K(kv_tile + 1, 1 - stage);
      cta.span(ProbeSpanKind::kLoadIssueK, kv_tile + 1, t);
      t = probe_time(cta.probe);
      cta.load_V(kv_tile + 1, 1 - stage);
      cta.span(ProbeSpanKind::kLoadIssueV, kv_tile + 1, t);
    }
    cp_async_commit();  // possibly empty: keeps "one group per tile" so wait<1> means tile t
    uint64_t t = probe_time(cta.probe);
    cp_async_wait<1>();
    __syncthreads();  // tile t is visible to every warp; tile t+1 may still be in flight
    cta.span(ProbeSpanKind::kLoadWaitK, kv_tile, t);  // K(t) and V(t) are one copy group: one wait
    SFrag S_rmem = {};
    PFrag P_rmem;
    t = probe_time(cta.probe);
    cta.compute_S(cta.K_smem + stage * Cfg::kKVTileBytes, S_rmem);
    cta.span(ProbeSpanKind::kQK, kv_tile, t);
    t = probe_time(cta.probe);
    cta.online_softmax(kv_tile, S_rmem, P_rmem);
    cta.span(ProbeSpanKind::kSoftmax, kv_tile, t);
    t = probe_time(cta.probe);
    cta.compute_PV(cta.V_smem + stage * Cfg::kKVTileBytes, P_rmem);
    cta.span(ProbeSpanKind::kPV, kv_tile, t);
  }
}

}  // namespace detail

template <typename Cfg, typename T, bool kCausal, typename View, typename Probe = NoProbe, int kMods = kModNone>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    attention_kernel(const __grid_constant__ typename Probe::template Params<typename View::Params> p) {
  using Cta = detail::PrefillCta<Cfg, T, kCausal, View, Probe, kMods>;
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
  if constexpr (Cta::kPaged) {
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
  const int num_kv_tiles = kv_end > kv_begin ? ceil_div(kv_end - kv_begin, Cfg::kBlockKV) : 0;
  probe_select_view(probe, view, warp_id);
  const int probe_tile0 = kv_begin / Cfg::kBlockKV;
  const T* const any_valid = view.q_ptr(q0);
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t smem_base = smem_addr(smem);
  const uint32_t Q_smem = smem_base;
  const uint32_t K_smem = smem_base + Cfg::kQRegionBytes;
  const uint32_t V_smem = K_smem + Cfg::kKStages * Cfg::kKVTileBytes;
  uint32_t Q_rmem[Cta::kQRegTiles][Cta::kQRegSteps][4];
  uint32_t Q_thread, K_thread, K_thread_x2, V_thread, V_thread_x2;
  float O_rmem[Cfg::kWarpQ / detail::kMmaM][Cfg::kDim / detail::kMmaN][4];
  float m_rmem[Cfg::kWarpQ / detail::kMmaM][2];
  float l_rmem[Cfg::kWarpQ / detail::kMmaM][2];
  // The steps see these through references, as the lambdas they were
  // written as did: the kernel's own locals, in the same order, which keeps
  // the production kernels' code as it was.
  Cta cta{p, probe, view, tid, warp_id, lane_id, q0, kv_begin, kv_end, num_kv_tiles, probe_tile0, any_valid,
          Q_smem, K_smem, V_smem, Q_rmem, Q_thread, K_thread, K_thread_x2, V_thread, V_thread_x2, O_rmem, m_rmem, l_rmem};
  // The main loop over KV tiles, one pipeline per config, whose steps are
  // PrefillCta's (prefill_steps.cuh). The production loops (v5, v6) stay in
  // the kernel's own body: moved into a function of their own they compile
  // to different SASS (same instructions, other order; more spills for v6
  // at head_dim 64). They mask through detail::mask_tile with the kernel's
  // own locals, not through cta.mask_tile, for the same reason.
  cta.load_q();
  if constexpr (Cfg::kPipe == Pipeline::kSerial) {
    detail::pipeline_serial(cta, num_kv_tiles);
  } else if constexpr (Cfg::kPipe == Pipeline::kKV2) {
    detail::pipeline_kv2(cta, num_kv_tiles);
  } else if constexpr (Cfg::kPipe == Pipeline::kLookahead) {
    // v6: S(t+1) = Q·K(t+1)ᵀ is issued in the same straight-line block as the
    // softmax of tile t, so one warp keeps the tensor pipe busy while its FP32
    // and SFU work runs (FlashAttention-2 leaves that overlap to other warps).
    // K and V are double-buffered; K runs one tile ahead of V.
    // Probed, the span boundaries between Q·K(t+1)ᵀ, softmax(t) and P·V(t)
    // are timer reads in that block: they record the phases one after another
    // and keep the compiler from overlapping them as freely as in the
    // production kernel, whose timing is the one to quote.
    typename Cta::SFrag S_cur = {};
    if (num_kv_tiles > 0) cta.lookahead_first_tile(S_cur);
    for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
      const int stage = kv_tile % 2;
      __syncthreads();  // all warps are done with V(t-1), whose buffer V(t+1) takes
      uint64_t t = probe_time(probe);
      if (kv_tile + 1 < num_kv_tiles) cta.load_V(kv_tile + 1, 1 - stage);
      cta.span(ProbeSpanKind::kLoadIssueV, kv_tile + 1, t, kv_tile + 1 < num_kv_tiles);
      cp_async_commit();
      t = probe_time(probe);
      cp_async_wait<1>();  // K(t+1) and V(t) have landed; V(t+1) may still be in flight
      __syncthreads();     // ... for every thread's chunks; and all warps are done with K(t)
      cta.span(ProbeSpanKind::kLoadWaitV, kv_tile, t);  // V(t), with K(t+1) in the same wait
      t = probe_time(probe);
      if (kv_tile + 2 < num_kv_tiles) cta.load_K(kv_tile + 2, stage);
      cta.span(ProbeSpanKind::kLoadIssueK, kv_tile + 2, t, kv_tile + 2 < num_kv_tiles);
      cp_async_commit();

      if constexpr (Cta::kSoftcap) detail::softcap_tile<Cfg>(p.softcap, S_cur);
      detail::mask_tile<Cfg, kCausal, View, Cta::kWindow>(view, q0, warp_id, lane_id, kv_begin, kv_end, kv_tile,
                                                          S_cur);
      // On the last tile S_next reads a stale K buffer: wasted but harmless
      // work that keeps this block free of branches (and of a span).
      typename Cta::SFrag S_next = {};
      typename Cta::PFrag P_rmem;
      t = probe_time(probe);
      cta.compute_S(K_smem + (1 - stage) * Cfg::kKVTileBytes, S_next);
      cta.span(ProbeSpanKind::kQK, kv_tile + 1, t, kv_tile + 1 < num_kv_tiles);
      t = probe_time(probe);
      cta.softmax_update(kv_tile, S_cur, P_rmem);
      cta.span(ProbeSpanKind::kSoftmax, kv_tile, t);
      t = probe_time(probe);
      cta.compute_PV(V_smem + stage * Cfg::kKVTileBytes, P_rmem);
      cta.span(ProbeSpanKind::kPV, kv_tile, t);
      detail::copy_tile<Cfg>(S_next, S_cur);
    }
  } else {  // Pipeline::kK2V1
    // v5: K double-buffered, V single; V(t) loads under S = Q·K(t)ᵀ, K(t+1)
    // under the softmax and P·V.
    if constexpr (!Cta::kEarlyK0) cta.issue_K0();  // else load_q has
    for (int kv_tile = 0; kv_tile < num_kv_tiles; ++kv_tile) {
      const int stage = kv_tile % 2;
      __syncthreads();  // all warps are done with V(t-1) (one buffer) and K(t-1) (whose buffer K(t+1) takes)
      uint64_t t = probe_time(probe);
      cta.load_V(kv_tile, 0);
      cp_async_commit();
      cta.span(ProbeSpanKind::kLoadIssueV, kv_tile, t);
      t = probe_time(probe);
      cp_async_wait<1>();  // K(t) has landed; V(t) may still be in flight
      __syncthreads();     // ... for every thread's chunks of K(t)
      cta.span(ProbeSpanKind::kLoadWaitK, kv_tile, t);
      typename Cta::SFrag S_rmem = {};
      typename Cta::PFrag P_rmem;
      t = probe_time(probe);
      cta.compute_S(K_smem + stage * Cfg::kKVTileBytes, S_rmem);
      cta.span(ProbeSpanKind::kQK, kv_tile, t);
      t = probe_time(probe);
      if (kv_tile + 1 < num_kv_tiles) cta.load_K(kv_tile + 1, 1 - stage);
      cta.span(ProbeSpanKind::kLoadIssueK, kv_tile + 1, t, kv_tile + 1 < num_kv_tiles);
      cp_async_commit();  // possibly empty, so the wait below always means V(t)
      t = probe_time(probe);
      if constexpr (Cta::kSoftcap) detail::softcap_tile<Cfg>(p.softcap, S_rmem);
      detail::mask_tile<Cfg, kCausal, View, Cta::kWindow>(view, q0, warp_id, lane_id, kv_begin, kv_end, kv_tile,
                                                          S_rmem);
      cta.softmax_update(kv_tile, S_rmem, P_rmem);
      cta.span(ProbeSpanKind::kSoftmax, kv_tile, t);
      t = probe_time(probe);
      cp_async_wait<1>();  // V(t) has landed; K(t+1) may still be in flight
      __syncthreads();     // ... for every thread's chunks of V(t)
      cta.span(ProbeSpanKind::kLoadWaitV, kv_tile, t);
      t = probe_time(probe);
      cta.compute_PV(V_smem, P_rmem);
      cta.span(ProbeSpanKind::kPV, kv_tile, t);
    }
  }
  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory
  cta.epilogue();
}

// Launches one configuration on dense tensors: q-tiles on x (reversed inside
// the kernel), heads on y, sequences on z; shared memory opted in above 48 KiB.
template <typename Cfg, typename Kernel>
cudaError_t opt_in_smem(Kernel kernel) {
  if (Cfg::kSmemBytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
}

// Probe: NoProbe (production) or GlobalTimerProbe (trace capture, whose
// parameters carry the probe buffers after the kernel's own). kMods with
// kModWindow: instantiated non-causal (causal is p.window_right = 0).
template <typename Cfg, typename T, bool kCausal, typename Probe = NoProbe, int kMods = kModNone>
cudaError_t launch_prefill(const typename Probe::template Params<PrefillKernelParams>& p, cudaStream_t stream) {
  static_assert(kMods == kModNone || (kMods & kModWindow && !kCausal), "modified kernels take causal as a window");
  using View = std::conditional_t<kMods == kModNone, DenseView<T, Cfg::kBlockQ, kCausal>,
                                  DenseView<T, Cfg::kBlockQ, false, true, Cfg::kBlockKV>>;
  auto kernel = attention_kernel<Cfg, T, kCausal, View, Probe, kMods>;
  if (cudaError_t err = opt_in_smem<Cfg>(kernel); err != cudaSuccess) return err;
  const dim3 grid(ceil_div(p.q_len, Cfg::kBlockQ), p.q_heads, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// Launches one configuration over the paged cache: (q-tile x split) on x,
// kv-heads on y, sequences on z.
template <typename Cfg, typename T, bool kCausal, typename Probe = NoProbe, int kMods = kModNone>
cudaError_t launch_paged(const typename Probe::template Params<PagedKernelParams>& p, cudaStream_t stream,
                         bool programmatic) {
  static_assert(kMods == kModNone || (kMods & kModWindow && !kCausal), "modified kernels take causal as a window");
  using View = PagedView<T, Cfg::kDim, Cfg::kBlockQ, Cfg::kBlockKV, kCausal, (kMods & kModWindow) != 0>;
  auto kernel = attention_kernel<Cfg, T, kCausal, View, Probe, kMods>;
  if (cudaError_t err = opt_in_smem<Cfg>(kernel); err != cudaSuccess) return err;
  const int q_tiles = ceil_div(p.q_len * p.group, Cfg::kBlockQ);
  return launch_maybe_programmatic(kernel, dim3(q_tiles * p.num_splits, p.kv_heads, p.batch), dim3(Cfg::kThreads),
                                   Cfg::kSmemBytes, stream, programmatic, p);
}

}  // namespace flashscope::kernels
