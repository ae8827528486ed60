// What a probed kernel writes, as plain structs the host reads back (no CUDA
// types, so runtime/src/trace/cuda_capture.cpp includes this without nvcc).
// The device hooks that fill them are in probe.cuh; the host turns them into
// the trace records of flashscope/trace.hpp (times in ns, softmax state in
// natural-log units, CTA coordinates in the trace's q-tiles).
//
// Buffers (all zeroed by the host before the launch; every index below is in
// the kernel's own tiles, BLOCK_Q rows × BLOCK_KV keys):
//   ctas        [gridDim.z][gridDim.y][gridDim.x]  one per CTA; `valid` = 1 once
//                                                  written (an inactive varlen CTA
//                                                  leaves its record 0)
//   spans       [gridDim.x][warps][span_capacity]  per warp of a traced CTA, in the
//                                                  order the warp recorded them
//   span_counts [gridDim.x][warps]                 spans each warp tried to record;
//                                                  more than span_capacity: the rest
//                                                  were dropped, nothing overwritten
//   rows        [row slots][kv_tile_stride]        state of a traced row after each
//                                                  absolute KV tile; `written` = 1
// Only the CTAs that hold rows of (traced_batch, traced_head) record spans and
// rows, and within a traced CTA's grid row (fixed y and z) each CTA has its own
// blockIdx.x, so blockIdx.x is the span slot: nothing is shared, no atomics.
#pragma once

#include <cstdint>

namespace flashscope::kernels {

// Same numbering as flashscope::SpanKind (trace.hpp).
enum class ProbeSpanKind : uint32_t {
  kLoadIssueK = 0,
  kLoadIssueV = 1,
  kLoadWaitK = 2,
  kLoadWaitV = 3,
  kQK = 4,
  kSoftmax = 5,
  kPV = 6,
  kEpilogue = 7,
};

// One CTA. Written by thread 0: the start fields on entry, the rest at exit.
struct ProbeCtaRecord {
  uint64_t start_ns, end_ns;    // %globaltimer: ns, one clock for every SM
  uint64_t start_clk, end_clk;  // clock64 of the CTA's SM at the same two moments
  uint32_t sm;                  // %smid
  uint32_t batch;               // sequence
  uint32_t head;                // dense views: q-head; paged view: kv-head
  uint32_t row0;                // first row of the CTA's tile (paged: packed (token, q-head) row)
  uint32_t split;               // split-KV index (0 without splits)
  uint32_t kv_tile0;            // absolute index of the first KV tile it visits
  uint32_t kv_tiles;            // KV tiles it visits
  uint32_t valid;               // 1 once the CTA finished
};
static_assert(sizeof(ProbeCtaRecord) == 64, "host and device agree on the layout");

// One phase of one warp, clock64 of its SM (the host maps it to ns with the
// CTA's two (clock64, %globaltimer) pairs).
struct ProbeSpanRecord {
  uint64_t start_clk, end_clk;
  int32_t kv_tile;  // absolute KV tile; -1 outside any tile (epilogue)
  uint32_t kind;    // ProbeSpanKind
};
static_assert(sizeof(ProbeSpanRecord) == 24, "host and device agree on the layout");

// One traced row after one KV tile, as the kernel holds it: log2 units with
// the softmax scale folded in, and the state of the CTA's own KV range (a
// split's state starts afresh at its first tile; the host merges splits).
struct ProbeRowRecord {
  float m;         // running max after the tile; -inf before any visible key
  float l;         // running sum relative to m, reduced over the row's quad
  float rescale;   // exp2(m_old - m): 0 on the range's first visible tile, 1 for a tile with no visible key
  float tile_max;  // max visible logit of the tile; -inf when none
  float tile_sum;  // sum of exp2(s - m) over the tile's visible keys, unrounded
  uint32_t keys;   // keys of the tile the row sees
  uint32_t written;
  uint32_t reserved;
};
static_assert(sizeof(ProbeRowRecord) == 32, "host and device agree on the layout");

// Where a probed launch records, and what it follows. Passed inside the
// kernel's __grid_constant__ parameters (GlobalTimerProbe::Params).
struct ProbeBuffers {
  ProbeCtaRecord* ctas;    // never null
  ProbeSpanRecord* spans;  // null: no spans
  uint32_t* span_counts;   // with spans
  int span_capacity;       // records per warp
  ProbeRowRecord* rows;    // null: no softmax states
  const int32_t* row_slot; // [row_slot_count]: slot of each query of the traced sequence, or -1
  int row_slot_count;      // queries of the traced sequence
  int kv_tile_stride;      // KV tiles of the traced sequence: the row records' second extent
  int traced_batch;        // sequence whose CTAs record spans and rows
  int traced_head;         // q-head
};

}  // namespace flashscope::kernels
