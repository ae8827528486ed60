// One CTA's pipeline: its warps' spans sorted into lanes, and the shared-
// memory stage buffers those spans imply.
//
// Lanes: spans of one warp that overlap in time (v6 issues Q·K(t+1)ᵀ inside
// the softmax of tile t) cannot share a row, so each warp gets as many lanes
// as its deepest overlap (greedy: a span takes the first lane free at its
// start).
//
// Stage buffers: a K (or V) tile occupies a buffer from the first warp's
// load issue until the last warp's consumer of it finishes (QKᵀ for K, PV
// for V); it is in flight — copied but not yet waited for — from the issue
// until the last load wait ends. Where a tile has no wait of its own
// operand, K and V arrived as one copy group (v1–v4 wait once, as
// load_wait_k), so the other operand's wait lands it; with no wait at all
// (the CPU: no asynchronous copies) it lands when its issue span ends. The
// most buffers of one operand live at once is the pipeline's depth as it
// ran: 1 for v1/v2, 2 for a double buffer.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

struct LaneSpan {
  uint32_t span = 0;  // index into Trace::spans
  int lane = 0;       // row of the timeline, over all warps of the CTA
};

struct WarpLanes {
  uint32_t warp = 0;
  int first_lane = 0, lanes = 0;
};

struct StageBuffer {
  char operand = 'K';  // 'K' or 'V'
  int kv_tile = 0;
  uint64_t issue = 0, landed = 0, released = 0;  // ticks
};

struct CtaPipeline {
  uint32_t cta = 0;
  uint64_t t0 = 0, t1 = 0;  // first span start, last span end
  std::vector<LaneSpan> spans;
  std::vector<WarpLanes> warps;  // ascending warp
  int lanes = 0;
  std::vector<StageBuffer> buffers;  // K then V, ascending tile
  int max_live_k = 0, max_live_v = 0;
  double kind_us[kSpanKindCount] = {};  // span time per kind, summed over warps
};

// CTAs (indices into Trace::ctas) that have spans, ascending.
std::vector<uint32_t> ctas_with_spans(const Trace& t);

CtaPipeline build_cta_pipeline(const Trace& t, uint32_t cta);

// Most intervals [begin, end) alive at once (an end at x frees before a begin at x).
int max_concurrent(std::vector<std::pair<uint64_t, uint64_t>> intervals);

}  // namespace flashscope::viz
