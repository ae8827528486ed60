// Probe hooks: what a kernel built with a probe records about its own run
// (the trace the dashboard draws, flashscope/trace.hpp), and nothing at all
// when built without one.
//
// A kernel takes the probe as a compile-time policy:
//   NoProbe           every hook below is an empty inline function and the
//                     kernel's parameters are its own: the production
//                     instantiations compile to the same code as before the
//                     hooks existed (checked by comparing SASS).
//   GlobalTimerProbe  the parameters gain a ProbeBuffers (probe_records.h)
//                     and the hooks write into it.
// and calls plain functions on a context, `typename Probe::Ctx`:
//
//   probe_cta_start(ctx, params)       first thing in the kernel: thread 0
//                                      stamps %globaltimer, clock64 and %smid
//   probe_select(ctx, traced, warp)    whether this CTA holds rows of the
//                                      traced (sequence, q-head): only those
//                                      record spans and softmax states
//                                      (probe_select_view asks the view)
//   t = probe_time(ctx); ...; probe_span(ctx, kind, kv_tile, t)
//                                      one phase of this warp: lane 0 keeps
//                                      [t, now) in clock64 ticks
//   probe_row_state(ctx, query, kv_tile, m, tile_max, rescale, sum, l, keys)
//                                      warp-collective: the online-softmax
//                                      state of the rows this thread holds
//   probe_cta_end(ctx, coords, warp)   CTA-collective (a barrier): the span
//                                      counts, then thread 0 stamps the end
//
// Times: %globaltimer is one nanosecond clock for the whole GPU but may tick
// coarsely (its update interval is implementation-defined), so a CTA records
// it only at its start and end, next to clock64; spans record clock64 alone
// (its SM's cycle counter: fine-grained, comparable within the CTA), and the
// host maps them onto the CTA's nanosecond interval. A span is issue time in
// the warp's instruction stream: asynchronous work (cp.async, the tensor
// pipe) shows up in whichever later span first waits for it.
//
// Storage never overflows into a neighbour: each traced warp owns a region of
// span_capacity records and counts what it tried to write (the host reports
// the difference as dropped); row states have one slot per (row, tile). The
// span region is chosen by blockIdx.x: the traced CTAs must differ in x (they
// do when y and z name the traced head and sequence; a persistent grid that
// loops over tiles would need its own slot).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/probe_records.h"

namespace flashscope::kernels {

// --- the special registers the probe reads -----------------------------------

// %globaltimer: nanoseconds, the same clock on every SM.
__device__ __forceinline__ uint64_t probe_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// clock64 of the SM running the thread.
__device__ __forceinline__ uint64_t probe_clock() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(c));
  return c;
}
__device__ __forceinline__ uint32_t probe_smid() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(s));
  return s;
}

__device__ __forceinline__ size_t probe_cta_index() {
  return blockIdx.x + size_t(gridDim.x) * (blockIdx.y + size_t(gridDim.y) * blockIdx.z);
}

// --- the two policies --------------------------------------------------------

struct NoProbeCtx {};

struct ProbeCtx {
  const ProbeBuffers* buf = nullptr;    // in the kernel's __grid_constant__ parameters
  ProbeSpanRecord* span_out = nullptr;  // this warp's span region; null in untraced CTAs
  uint32_t span_count = 0;              // spans this warp tried to record
  bool rows_on = false;                 // this CTA records softmax states
};

struct NoProbe {
  static constexpr bool kEnabled = false;
  template <typename P>
  using Params = P;
  using Ctx = NoProbeCtx;
};

struct GlobalTimerProbe {
  static constexpr bool kEnabled = true;
  template <typename P>
  struct Params : P {
    ProbeBuffers probe;
  };
  using Ctx = ProbeCtx;
};

// Where a CTA sits, in the terms of ProbeCtaRecord.
struct ProbeCtaCoords {
  int batch, head, row0, split, kv_tile0, kv_tiles;
};

// --- hooks: probe off --------------------------------------------------------

template <typename P>
__device__ __forceinline__ void probe_cta_start(NoProbeCtx&, const P&) {}
__device__ __forceinline__ void probe_select(NoProbeCtx&, bool, int) {}
template <typename View>
__device__ __forceinline__ void probe_select_view(NoProbeCtx&, const View&, int) {}
__device__ __forceinline__ uint64_t probe_time(const NoProbeCtx&) { return 0; }
__device__ __forceinline__ void probe_span(NoProbeCtx&, ProbeSpanKind, int, uint64_t) {}
__device__ __forceinline__ void probe_row_state(NoProbeCtx&, int, int, float, float, float, float, float, int) {}
__device__ __forceinline__ void probe_cta_end(NoProbeCtx&, const ProbeCtaCoords&, int) {}

// --- hooks: probe on ---------------------------------------------------------

// P is GlobalTimerProbe::Params<...>: its `probe` member names the buffers.
template <typename P>
__device__ __forceinline__ void probe_cta_start(ProbeCtx& c, const P& params) {
  c.buf = &params.probe;
  if (threadIdx.x == 0) {
    ProbeCtaRecord* r = c.buf->ctas + probe_cta_index();
    r->start_clk = probe_clock();
    r->start_ns = probe_globaltimer();
    r->sm = probe_smid();
  }
}

// `traced` must be the same for every thread of the CTA.
__device__ __forceinline__ void probe_select(ProbeCtx& c, bool traced, int warp) {
  if (!traced) return;
  if (c.buf->spans != nullptr) {
    const size_t warps = blockDim.x / 32;
    c.span_out = c.buf->spans + (blockIdx.x * warps + size_t(warp)) * size_t(c.buf->span_capacity);
  }
  c.rows_on = c.buf->rows != nullptr;
}
// The view answers holds_head(sequence, q-head) (attention_views.cuh).
template <typename View>
__device__ __forceinline__ void probe_select_view(ProbeCtx& c, const View& view, int warp) {
  probe_select(c, view.holds_head(c.buf->traced_batch, c.buf->traced_head), warp);
}

__device__ __forceinline__ uint64_t probe_time(const ProbeCtx&) { return probe_clock(); }

// Closes the span opened at `start` (a probe_time() of this warp).
__device__ __forceinline__ void probe_span(ProbeCtx& c, ProbeSpanKind kind, int kv_tile, uint64_t start) {
  const uint64_t end = probe_clock();
  if (c.span_out == nullptr) return;
  if ((threadIdx.x & 31) == 0 && c.span_count < uint32_t(c.buf->span_capacity))
    c.span_out[c.span_count] = {start, end, kv_tile, static_cast<uint32_t>(kind)};
  ++c.span_count;
}

// State of one row after KV tile `kv_tile` (absolute), from the thread that
// holds part of it in the mma C layout: the 4 threads of a quad (lanes 4r..4r+3)
// hold the row's columns, so sum_part and l_part are this thread's partial
// sums, reduced here in the order the kernel's epilogue reduces l (xor 1, then
// xor 2). m, tile_max (log2 units, scale folded in) and rescale are the same
// on the quad. `query` is the row's query index in its sequence if it belongs
// to the traced head (-1 otherwise). Every lane must call it: it shuffles.
__device__ __forceinline__ void probe_row_state(ProbeCtx& c, int query, int kv_tile, float m, float tile_max,
                                                float rescale, float sum_part, float l_part, int keys) {
  if (!c.rows_on) return;  // CTA-uniform
  float sum = sum_part + __shfl_xor_sync(0xffffffffu, sum_part, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  float l = l_part + __shfl_xor_sync(0xffffffffu, l_part, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if ((threadIdx.x & 3) != 0 || query < 0 || query >= c.buf->row_slot_count) return;
  const int slot = c.buf->row_slot[query];
  if (slot < 0 || kv_tile < 0 || kv_tile >= c.buf->kv_tile_stride) return;
  ProbeRowRecord* r = c.buf->rows + size_t(slot) * size_t(c.buf->kv_tile_stride) + size_t(kv_tile);
  // A tile with no visible key leaves the state as it was: rescale 1 (the
  // kernel multiplies by exp2(-inf) = 0 there only while l and O are still 0).
  *r = {m, l, keys == 0 ? 1.0f : rescale, tile_max, sum, static_cast<uint32_t>(keys), 1u, 0u};
}

// Every thread of the CTA must call it, once, after its last store.
__device__ __forceinline__ void probe_cta_end(ProbeCtx& c, const ProbeCtaCoords& at, int warp) {
  if (c.span_out != nullptr && (threadIdx.x & 31) == 0)
    c.buf->span_counts[blockIdx.x * (blockDim.x / 32) + unsigned(warp)] = c.span_count;
  __syncthreads();  // every warp has finished its epilogue: this is the CTA's end
  if (threadIdx.x == 0) {
    ProbeCtaRecord* r = c.buf->ctas + probe_cta_index();
    r->end_ns = probe_globaltimer();
    r->end_clk = probe_clock();
    r->batch = static_cast<uint32_t>(at.batch);
    r->head = static_cast<uint32_t>(at.head);
    r->row0 = static_cast<uint32_t>(at.row0);
    r->split = static_cast<uint32_t>(at.split);
    r->kv_tile0 = static_cast<uint32_t>(at.kv_tile0);
    r->kv_tiles = static_cast<uint32_t>(at.kv_tiles);
    r->valid = 1;
  }
}

}  // namespace flashscope::kernels
