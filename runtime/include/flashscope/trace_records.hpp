// Trace records: what an attention run did, as plain values the dashboard
// draws (the file they travel in is trace_file.hpp).
//
// A Trace is a value: metadata about the run (device, kernel, shape, tiling,
// timer units, SOL) and five vectors of fixed-width records:
//   ctas         one per CTA (CPU: one per work item): where and when it ran
//   spans        per warp of selected CTAs: load / MMA / softmax / epilogue spans
//   softmax      online-softmax state of selected rows after every KV tile
//   tile_mass    attention mass per (q-tile, kv-tile) of the traced head,
//                including the tiles causal or sliding-window skipping left out
//   prob_samples final softmax probabilities of selected (q-tile, kv-tile) blocks
// and, for a capture of a model's own attention, the traced sequence's tokens
// (TraceTokens: what the views label rows and keys with).
// Producers: the captures of trace_capture.hpp (the CPU path and the GPU
// probes fill the same records). Consumers: the app's dashboard tabs, viz/,
// `flashscope-cli trace info`.
//
// Units, for every producer (the GPU kernels work in log2 units with the
// softmax scale folded in; they convert, m_nat = m_log2 · ln 2):
//   logits   s_ij = softmax_scale · q_i · k_j, natural-log units
//   m        running max of s over the keys seen so far
//   l        running Σ exp(s_ij − m) over those keys, so m + ln l is the row's
//            LSE (the lse output of prefill()) once the last tile is in
//   times    ticks of meta.timer_unit (see TimerUnit), from an arbitrary origin
// Row, key and tile indices are within the record's sequence (varlen too);
// kv_tile t covers keys [t·block_kv, (t+1)·block_kv), q_tile the rows
// [q_tile·block_q, …), with meta.block_q / block_kv the producer's tiling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope {

enum class TraceKind : uint32_t { kPrefill = 0, kDecode = 1 };

enum class TimerUnit : uint32_t {
  kNanoseconds = 0,  // CPU steady clock, GPU %globaltimer: comparable across SMs
  kCycles = 1,       // GPU clock64: per-SM counters, comparable within one SM only
};

// Run-wide facts. Strings are limited to the sizes of their file fields
// (kMax*Chars, excluding the terminator); write_trace rejects longer ones.
struct TraceMeta {
  static constexpr size_t kMaxProducerChars = 31;
  static constexpr size_t kMaxDeviceChars = 63;
  static constexpr size_t kMaxBackendChars = 7;
  static constexpr size_t kMaxKernelChars = 23;

  std::string producer;     // what wrote the trace: "flashscope", "flashscope-cli"
  std::string device_name;  // "NVIDIA H100 80GB HBM3", "CPU (2 threads)"
  std::string backend;      // "cpu" or "cuda"
  std::string kernel;       // "cpu-tiled", "v1".."v6"
  TraceKind kind = TraceKind::kPrefill;
  DType dtype = DType::kBF16;

  int32_t batch = 1, q_heads = 1, kv_heads = 1;
  int32_t q_len = 0, kv_len = 0, head_dim = 0;  // maxima over the batch when varlen
  bool causal = false;
  bool varlen = false;
  float softmax_scale = 0.0f;  // the scale used (never 0: 1/sqrt(head_dim) resolved)

  int32_t block_q = 0, block_kv = 0;  // tile sizes of the records' q_tile / kv_tile
  int32_t warps = 0;                  // warps per CTA; 1 for the CPU
  int32_t page_size = 0;              // paged decode: tokens per KV page; 0 otherwise
  int32_t num_splits = 0;             // split-KV decode: splits per sequence; 0 otherwise

  TimerUnit timer_unit = TimerUnit::kNanoseconds;
  double timer_ticks_per_us = 1000.0;  // ticks of timer_unit per microsecond

  // Speed of light and what the run achieved; 0 where unknown (CPU: no SOL).
  int32_t sm_count = 0;
  double sol_tflops = 0, sol_dram_gbps = 0;
  double elapsed_ms = 0;  // wall time of the traced run (probe overhead included)
  double flops = 0;       // prefill_flops() count of the run (causal halved)

  // What the softmax / tile-mass / sample records follow; -1 when nothing.
  int32_t traced_batch = -1, traced_head = -1;

  // Spans a producer had to drop because a warp's span storage was full (GPU
  // probes); 0 when every span it timed is in the trace.
  uint64_t dropped_spans = 0;
};

// One CTA (CPU: one work item of 64 queries × one head).
struct CtaRecord {
  uint64_t start = 0, end = 0;  // timer ticks
  uint32_t sm = 0;              // SM id (CPU: OpenMP thread number)
  uint32_t batch = 0, head = 0, q_tile = 0;
  uint32_t split = 0;     // split-KV index; 0 without splits
  uint32_t kv_tiles = 0;  // KV tiles it processed (causal and window skipping make this vary)
};

enum class SpanKind : uint32_t {
  kLoadIssueK = 0,  // issuing the K tile's copy (cp.async); CPU: converting it to float
  kLoadIssueV = 1,
  kLoadWaitK = 2,   // waiting for the K tile to land (cp.async.wait + barrier)
  kLoadWaitV = 3,
  kQK = 4,          // S = Q·Kᵀ MMAs
  kSoftmax = 5,     // max, exp2, sums, rescale
  kPV = 6,          // O += P·V MMAs
  kEpilogue = 7,    // O /= l, stores, LSE
};
constexpr uint32_t kSpanKindCount = 8;
const char* span_kind_name(SpanKind k);  // "load_issue_k", …, "epilogue"

// One span of one warp of a CTA in the trace's CTA records.
struct WarpSpanRecord {
  uint64_t start = 0, end = 0;  // timer ticks
  uint32_t cta = 0;             // index into Trace::ctas
  uint32_t warp = 0;            // warp within the CTA (CPU: 0)
  SpanKind kind = SpanKind::kQK;
  int32_t kv_tile = -1;         // absolute KV tile index; -1 for the epilogue
};

// State of one query row after one KV tile (units: see the top of the file).
//   m        = max(m_old, tile_max)
//   rescale  = exp(m_old − m): 0 on the row's first tile with a visible key
//              (m_old = −inf), 1 for a tile with no visible key (state kept)
//   tile_sum = Σ exp(s_j − m) over the tile's visible keys (unrounded)
//   l        = rescale · l_old + tile_sum
struct SoftmaxStateRecord {
  uint32_t batch = 0, head = 0;
  uint32_t row = 0;      // query index within the sequence
  uint32_t kv_tile = 0;
  float m = 0, l = 0, rescale = 0;
  float tile_max = 0;    // max s over the tile's visible keys; -inf when none
  float tile_sum = 0;
  uint32_t keys = 0;     // keys of this tile the row sees (causal: fewer on the diagonal)
};

// Attention mass of one block (q_tile, kv_tile) of the traced head.
// With p_ij = exp(s_ij − lse_i) the final (unrounded) probability of key j
// for query i, and R the rows of the q-tile that see at least one key:
//   mass     = (1/|R|) · Σ_{i∈R} Σ_{j∈kv_tile, j visible to i} p_ij
//   max_prob = max p_ij over the block
// so each q-tile's masses sum to 1 over its kv-tiles (|R| > 0), and the mass
// is the share of attention the tile's average row puts on the block. Both
// are 0 for skipped blocks and when R is empty.
struct TileMassRecord {
  static constexpr uint32_t kSkipped = 1;  // causal or window: no row can see any key; never computed
  static constexpr uint32_t kMasked = 2;   // some (row, key) pairs are masked (the causal diagonal, a window's edge)

  uint32_t batch = 0, head = 0, q_tile = 0, kv_tile = 0;
  float mass = 0, max_prob = 0;
  uint32_t rows = 0;   // |R|
  uint32_t flags = 0;  // kSkipped | kMasked
};

// The final probability p_ij of one (row, key) of a sampled block, for the
// app's "click a tile to see its softmax probabilities".
struct ProbSampleRecord {
  static constexpr uint32_t kMasked = 1;  // key not visible to the row: prob 0

  uint32_t batch = 0, head = 0;
  uint32_t row = 0, key = 0;  // within the sequence
  float prob = 0;
  uint32_t flags = 0;
};

// The tokens of the traced sequence, for captures of a model's own attention
// (attention_capture.hpp); empty for synthetic problems. keys[j] is the token
// at key j; query row i is the token at key row_keys[i] (a conversation's
// rows are its last q_len keys: row_keys[i] = kv_len − q_len + i).
struct TraceToken {
  static constexpr size_t kMaxTextBytes = 255;  // longer token texts are refused by validate_trace
  int32_t id = -1;   // the vocabulary id; -1 unknown
  std::string text;  // the bytes the token stands for (may be part of a UTF-8 character)
};
struct TraceTokens {
  int32_t layer = -1;              // the model layer whose attention this is; -1 unknown
  std::vector<TraceToken> keys;    // [kv_len of the traced sequence] or empty
  std::vector<uint32_t> row_keys;  // [q_len of the traced sequence] or empty
  bool empty() const { return keys.empty() && row_keys.empty(); }
};

struct Trace {
  TraceMeta meta;
  std::vector<CtaRecord> ctas;
  std::vector<WarpSpanRecord> spans;
  std::vector<SoftmaxStateRecord> softmax;
  std::vector<TileMassRecord> tile_mass;
  std::vector<ProbSampleRecord> prob_samples;
  TraceTokens tokens;
};

// Checks what a reader relies on: metadata in range (shape, tiling, enums,
// string lengths) and every record's indices inside it (a span's cta indexes
// ctas, rows < q_len, tiles < ceil(len / block), known kinds and flags,
// end >= start; tokens: keys ≤ kv_len, row_keys ≤ q_len and < keys, texts of
// at most kMaxTextBytes). kInvalidArgument naming the first offending field/record.
Status validate_trace(const Trace& t);

// A (q_tile, kv_tile) block of the traced head.
struct TileCoord {
  int32_t q_tile = 0, kv_tile = 0;
};

}  // namespace flashscope
