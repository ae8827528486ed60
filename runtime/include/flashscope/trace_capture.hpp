// Trace capture: runs an attention problem with its probes and fills a
// Trace (trace_records.hpp) with what the run did. The CPU path runs the
// CPU backend's tiled kernel; the GPU paths run the probed instantiations
// of the CUDA kernels (CUDA builds).
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope/paged_attention.hpp"
#include "flashscope/status.hpp"
#include "flashscope/trace_records.hpp"

namespace flashscope {

// What a capture follows. Rows, tiles and the head are within sequence `batch`.
struct TraceOptions {
  int32_t batch = 0;                    // sequence traced
  int32_t head = 0;                     // q-head traced
  std::vector<int32_t> rows;            // query rows whose softmax state is recorded after every KV tile
  std::vector<TileCoord> sample_tiles;  // blocks whose probabilities are recorded (none: no samples)
  bool record_ctas = true;              // one CtaRecord per work item
  bool record_spans = true;             // phase spans of the traced head's work items
  bool record_tile_mass = true;         // the traced head's mass grid
};

// The CPU path with its probes: runs the tiled online-softmax attention of
// the CPU backend (64-query × 64-key tiles, float32, exp2 with the scale
// folded in, P rounded to the dtype before P·V) over the whole problem,
// writes p.o and p.lse like prefill() does, and fills *out with the records
// above (timer: steady clock, ns since the capture started; "sm": OpenMP
// thread). p must be a CPU problem that validate() accepts; options are
// checked against its shape (kInvalidArgument naming the option). *out is
// replaced only on success.
Status capture_cpu_prefill_trace(const PrefillParams& p, const TraceOptions& opt, Trace* out);

// The GPU path with its probes (CUDA builds; kUnsupported without CUDA or
// a device). Runs `kernel` (v1..v6, or the Hopper kernel where built;
// kAuto: what prefill() would pick, except that a sliding window or a
// soft-cap, which the Hopper kernel has no probes for, runs on the sm80
// kernel auto picks elsewhere, and naming hopper for one is kUnsupported;
// meta.kernel names the kernel that ran) built with its probe hooks compiled in,
// on p (device pointers, p.device == kCuda), writes p.o and p.lse as
// prefill() does, and fills *out: CTA records (SM id, %globaltimer start and
// end), per-warp phase spans of the CTAs that work on the traced head,
// softmax states of opt.rows after every KV tile, and the traced head's tile
// masses and sampled probabilities (from a second pass that uses the run's
// LSE). The plain kernels carry none of this: the probes are a separate
// instantiation. *out is replaced only on success.
// The trace records in the tiles of the plan it runs (meta.block_q ×
// block_kv, what TraceOptions::sample_tiles and the tile masses index), so a
// caller chooses the tiles to sample from plan_prefill(p) before it
// captures; where auto's hopper kernel is traced on the sm80 kernel (above),
// from the plan of the kernel meta.kernel names.
Status capture_cuda_prefill_trace(const PrefillParams& p, const TraceOptions& opt, Trace* out);

// The same for paged decode / chunked prefill over the page cache
// (paged_attention() with its probes): CTA records carry the split index,
// meta.page_size and meta.num_splits say how the KV range was divided.
Status capture_cuda_paged_trace(const PagedAttentionParams& p, const TraceOptions& opt, Trace* out);

}  // namespace flashscope
