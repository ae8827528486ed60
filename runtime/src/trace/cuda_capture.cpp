// capture_cuda_prefill_trace() / capture_cuda_paged_trace(): a run of the
// probed kernels (kernels/common/probe.cuh, instantiated in
// kernels/attention/*_probe_*.cu) turned into trace records.
//
// One capture is:
//   1. the same checks prefill() / paged_attention() make, then the traced
//      sequence's lengths on the host (cu_seqlens, kv_lens are device data);
//   2. the probed kernel (and the split-KV combine) on p.stream between two
//      CUDA events, writing p.o and the lse like the production path (into a
//      scratch lse when p.lse is null: the second pass needs it), and into
//      zeroed probe buffers: a record per CTA (%globaltimer and clock64 at its
//      start and end, %smid), clock64 spans per warp of the CTAs that hold
//      the traced head's rows, the online-softmax state of the traced rows
//      after each KV tile (log2 units, per split);
//   3. the second pass (kernels::launch_tile_mass): final probabilities of
//      the traced head from Q, K and the run's lse, per (q-tile, kv-tile)
//      block — the mass needs the final lse, which no tile knows while it
//      runs;
//   4. the records, in the units and definitions of trace.hpp (the same as
//      cpu_capture.cpp's): times in ns from the earliest CTA start, spans
//      mapped from clock64 onto their CTA's ns interval, m and tile_max × ln 2,
//      split-KV states merged into the one sequential recurrence, CTA
//      coordinates in the trace's q-tiles; then validate_trace().
//
// Paged traces: a CTA of the paged kernel holds (token, q-head) rows of one
// kv-head's group, token-major (r = token·group + q-head % group). The trace's
// q-tiles are tokens: block_q = max(1, kernel rows / group), and a CTA record
// names the q-head and tile of its first row. meta.kind is decode for the
// one-warp decode tile, prefill for the chunked-prefill tile.
//
// Builds without CUDA or without the probed kernels, and machines without a
// device, answer kUnsupported.
#include "trace/cuda_capture.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "trace/prefill_meta.hpp"
#include "util/math.hpp"

#if FLASHSCOPE_WITH_CUDA && FLASHSCOPE_WITH_KERNEL_PROBES
#include <cuda_runtime.h>

#include "attention/attention_validate.hpp"
#include "attention/cuda/paged_attention_cuda.hpp"
#include "attention/cuda/prefill_cuda.hpp"
#include "kernels/attention/paged_launch.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/probe_launch.h"
#endif

namespace flashscope {
namespace trace_internal {

#if FLASHSCOPE_WITH_CUDA && FLASHSCOPE_WITH_KERNEL_PROBES

namespace {

using kernels::KernelTiling;
using kernels::ProbeBuffers;
using kernels::ProbeCtaRecord;
using kernels::ProbeRowRecord;
using kernels::ProbeSpanRecord;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Spans one warp records per KV tile at most (issue K, issue V, wait K,
// wait V, Q·Kᵀ, softmax, P·V), plus the epilogue and slack.
constexpr int kSpansPerTile = 7;
constexpr int kSpansBeyondTiles = 4;
// A CTA's %globaltimer interval calibrates its clock64 spans only when it is
// long against the timer's granularity (up to 1 µs on some GPUs); shorter
// CTAs use the SM's nominal clock.
constexpr uint64_t kMinCalibrationNs = 20000;

Status cuda_check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return {};
  cudaGetLastError();  // a non-sticky error must not surface in the caller's next call
  if (err == cudaErrorMemoryAllocation) return {StatusCode::kOutOfMemory, what + ": out of device memory"};
  return device_error(what + ": " + cudaGetErrorString(err));
}

Result<DeviceBuffer> device_zeros(size_t bytes, cudaStream_t stream, const char* what) {
  auto b = DeviceBuffer::allocate(bytes);
  if (!b.ok()) return b.status();
  if (bytes > 0)
    FLASHSCOPE_RETURN_IF_ERROR(
        cuda_check(cudaMemsetAsync(b->data(), 0, bytes, stream), std::string("clearing the ") + what));
  return b;
}

template <typename T>
Status download(std::vector<T>* host, const void* device, size_t count, const char* what) {
  try {
    host->resize(count);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, std::string("GPU trace capture: cannot allocate the host copy of the ") + what};
  }
  if (count == 0) return {};
  return cuda_check(cudaMemcpy(host->data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
                    std::string("downloading the ") + what);
}

// Copies `host` to `device` in stream order (the stream may be one that does
// not wait for the legacy default stream) and waits: `host` may be a local.
Status upload(void* device, const std::vector<int32_t>& host, cudaStream_t stream, const char* what) {
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
      cudaMemcpyAsync(device, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
      std::string("uploading ") + what));
  return cuda_check(cudaStreamSynchronize(stream), std::string("uploading ") + what);
}

// The traced sequence, in the trace's tiles.
struct TracedSeq {
  int q_len = 0, kv_len = 0;
  int block_q = 1, block_kv = 1;  // the trace's q-tile (queries) and KV tile (keys)
  bool causal = false;
  int window_left = -1, window_right = -1;  // as in PrefillParams: -1 unbounded
  int shift() const { return kv_len - q_len; }
  int q_tiles() const { return ceil_div(q_len, block_q); }
  int kv_tiles() const { return ceil_div(kv_len, block_kv); }
  // The keys query i sees: [first_key(i), last_key(i)] within [0, kv_len).
  int64_t first_key(int i) const { return window_left < 0 ? 0 : std::max<int64_t>(0, int64_t(i) + shift() - window_left); }
  int64_t last_key(int i) const {
    int64_t last = kv_len - 1;
    if (causal) last = std::min<int64_t>(last, int64_t(i) + shift());
    if (window_right >= 0) last = std::min<int64_t>(last, int64_t(i) + shift() + window_right);
    return last;
  }
  bool visible(int i, int j) const { return j >= first_key(i) && j <= last_key(i); }
  bool sees_any(int i) const { return kv_len > 0 && first_key(i) <= last_key(i); }
  // Block (rows [i0, i1), keys [j0, j1)): no row sees any of its keys, so
  // the kernels never visit it (the earliest row's window begins after it,
  // or the latest row's ends before it: both edges grow with the row).
  bool skipped(int i0, int i1, int j0, int j1) const { return j0 > last_key(i1 - 1) || j1 - 1 < first_key(i0); }
  // ... some of its pairs are masked: an edge crosses it.
  bool masked(int i0, int i1, int j0, int j1) const { return j1 - 1 > last_key(i0) || j0 < first_key(i1 - 1); }
};

Status check_options(const TraceOptions& opt, const TracedSeq& s, const char* tiles) {
  for (int32_t r : opt.rows) {
    if (r < 0 || r >= s.q_len)
      return invalid_argument("TraceOptions.rows: row " + std::to_string(r) + " is out of range (sequence " +
                              std::to_string(opt.batch) + " has " + std::to_string(s.q_len) + " queries)");
  }
  for (const TileCoord& tc : opt.sample_tiles) {
    if (tc.q_tile < 0 || tc.q_tile >= s.q_tiles() || tc.kv_tile < 0 || tc.kv_tile >= s.kv_tiles())
      return invalid_argument("TraceOptions.sample_tiles: tile (" + std::to_string(tc.q_tile) + ", " +
                              std::to_string(tc.kv_tile) + ") is outside the sequence's " +
                              std::to_string(s.q_tiles()) + " x " + std::to_string(s.kv_tiles()) + " tiles of " +
                              std::to_string(s.block_q) + " " + tiles + " x " + std::to_string(s.block_kv) + " keys");
  }
  if (opt.record_spans && !opt.record_ctas)
    return invalid_argument("TraceOptions.record_spans needs record_ctas (spans point at CTA records)");
  return {};
}

// What a capture allocates on the device and reads back.
struct ProbeRun {
  // Grid of the probed kernel and the traced CTAs' grid row.
  int grid_x = 0, grid_y = 0, grid_z = 0, warps = 0;
  int traced_y = 0;  // dense: the traced q-head; paged: its kv-head
  int span_capacity = 0;
  int kv_tile_stride = 0;
  std::vector<int32_t> rows;  // the traced rows, sorted, unique; slot = index

  DeviceBuffer ctas, spans, span_counts, row_records, row_slot;
  ProbeBuffers buffers{};

  std::vector<ProbeCtaRecord> host_ctas;
  std::vector<ProbeSpanRecord> host_spans;
  std::vector<uint32_t> host_counts;
  std::vector<ProbeRowRecord> host_rows;
};

// Sizes and clears the probe buffers for a grid whose traced CTAs visit at
// most `max_tiles` KV tiles, `kv_tiles` tiles in the traced sequence.
Status prepare_probe(ProbeRun* run, const TraceOptions& opt, const TracedSeq& seq, int max_tiles,
                     const CudaCaptureLimits& limits, cudaStream_t stream) {
  const size_t ctas = size_t(run->grid_x) * size_t(run->grid_y) * size_t(run->grid_z);
  auto c = device_zeros(ctas * sizeof(ProbeCtaRecord), stream, "CTA records");
  if (!c.ok()) return c.status();
  run->ctas = std::move(c.value());
  ProbeBuffers& b = run->buffers;
  b.ctas = static_cast<ProbeCtaRecord*>(run->ctas.data());
  b.traced_batch = opt.batch;
  b.traced_head = opt.head;

  if (opt.record_spans && run->grid_x > 0) {
    const size_t slots = size_t(run->grid_x) * size_t(run->warps);
    size_t cap = limits.spans_per_warp > 0 ? size_t(limits.spans_per_warp)
                                           : size_t(kSpansPerTile) * size_t(max_tiles) + kSpansBeyondTiles;
    cap = std::max<size_t>(1, std::min(cap, limits.max_span_bytes / (slots * sizeof(ProbeSpanRecord))));
    cap = std::min<size_t>(cap, size_t(std::numeric_limits<int>::max()));
    run->span_capacity = int(cap);
    auto s = device_zeros(slots * cap * sizeof(ProbeSpanRecord), stream, "span records");
    if (!s.ok()) return s.status();
    run->spans = std::move(s.value());
    auto n = device_zeros(slots * sizeof(uint32_t), stream, "span counts");
    if (!n.ok()) return n.status();
    run->span_counts = std::move(n.value());
    b.spans = static_cast<ProbeSpanRecord*>(run->spans.data());
    b.span_counts = static_cast<uint32_t*>(run->span_counts.data());
    b.span_capacity = run->span_capacity;
  }

  run->rows = opt.rows;
  std::sort(run->rows.begin(), run->rows.end());
  run->rows.erase(std::unique(run->rows.begin(), run->rows.end()), run->rows.end());
  run->kv_tile_stride = seq.kv_tiles();
  if (!run->rows.empty() && run->kv_tile_stride > 0) {
    std::vector<int32_t> slot(size_t(seq.q_len), -1);
    for (size_t i = 0; i < run->rows.size(); ++i) slot[size_t(run->rows[i])] = int32_t(i);
    auto r = device_zeros(run->rows.size() * size_t(run->kv_tile_stride) * sizeof(ProbeRowRecord), stream,
                          "softmax records");
    if (!r.ok()) return r.status();
    run->row_records = std::move(r.value());
    auto s = DeviceBuffer::allocate(slot.size() * sizeof(int32_t));
    if (!s.ok()) return s.status();
    run->row_slot = std::move(s.value());
    FLASHSCOPE_RETURN_IF_ERROR(upload(run->row_slot.data(), slot, stream, "the traced rows"));
    b.rows = static_cast<ProbeRowRecord*>(run->row_records.data());
    b.row_slot = static_cast<const int32_t*>(run->row_slot.data());
    b.row_slot_count = seq.q_len;
    b.kv_tile_stride = run->kv_tile_stride;
  }
  return {};
}

Status read_probe(ProbeRun* run) {
  const size_t ctas = size_t(run->grid_x) * size_t(run->grid_y) * size_t(run->grid_z);
  FLASHSCOPE_RETURN_IF_ERROR(download(&run->host_ctas, run->ctas.data(), ctas, "CTA records"));
  if (run->buffers.spans != nullptr) {
    const size_t slots = size_t(run->grid_x) * size_t(run->warps);
    FLASHSCOPE_RETURN_IF_ERROR(download(&run->host_counts, run->span_counts.data(), slots, "span counts"));
    FLASHSCOPE_RETURN_IF_ERROR(
        download(&run->host_spans, run->spans.data(), slots * size_t(run->span_capacity), "span records"));
  }
  if (run->buffers.rows != nullptr)
    FLASHSCOPE_RETURN_IF_ERROR(download(&run->host_rows, run->row_records.data(),
                                        run->rows.size() * size_t(run->kv_tile_stride), "softmax records"));
  return {};
}

// How a CTA record's coordinates become the trace's (q-head, q-tile).
struct CtaMapping {
  bool paged = false;
  int group = 1;         // paged: q-heads per kv-head
  int kernel_block_q = 1;  // rows per CTA
  int trace_block_q = 1;   // queries per trace q-tile
};

// CTA records (times from the earliest start) and the traced CTAs' spans.
// SM ids are %smid, which PTX allows to be non-contiguous (up to %nsmid,
// which may exceed the SM count): where one is >= sm_count, the ids seen are
// renumbered densely in their order, so every record's sm < meta.sm_count.
void convert_ctas_and_spans(const ProbeRun& run, const CtaMapping& map, int traced_batch, double ns_per_clock,
                            bool record_ctas, int sm_count, Trace* t) {
  uint64_t origin = std::numeric_limits<uint64_t>::max();
  std::vector<uint32_t> sms;
  for (const ProbeCtaRecord& r : run.host_ctas)
    if (r.valid) {
      origin = std::min(origin, r.start_ns);
      sms.push_back(r.sm);
    }
  std::sort(sms.begin(), sms.end());
  sms.erase(std::unique(sms.begin(), sms.end()), sms.end());
  const bool renumber = !sms.empty() && sms.back() >= uint32_t(sm_count);
  auto sm_of = [&](uint32_t sm) {
    return renumber ? uint32_t(std::lower_bound(sms.begin(), sms.end(), sm) - sms.begin()) : sm;
  };
  std::vector<int64_t> index(run.host_ctas.size(), -1);  // probe CTA -> trace CTA record
  for (size_t i = 0; i < run.host_ctas.size(); ++i) {
    const ProbeCtaRecord& r = run.host_ctas[i];
    if (!r.valid) continue;  // a varlen CTA past its sequence's end: it did nothing
    CtaRecord c;
    c.start = r.start_ns - origin;
    c.end = std::max(r.end_ns, r.start_ns) - origin;
    c.sm = sm_of(r.sm);
    c.batch = r.batch;
    if (map.paged) {
      c.head = r.head * uint32_t(map.group) + r.row0 % uint32_t(map.group);
      c.q_tile = (r.row0 / uint32_t(map.group)) / uint32_t(map.trace_block_q);
    } else {
      c.head = r.head;
      c.q_tile = r.row0 / uint32_t(map.kernel_block_q);
    }
    c.split = r.split;
    c.kv_tiles = r.kv_tiles;
    if (record_ctas) {
      index[i] = int64_t(t->ctas.size());
      t->ctas.push_back(c);
    }
  }
  if (run.buffers.spans == nullptr) return;

  const size_t cap = size_t(run.span_capacity);
  for (int x = 0; x < run.grid_x; ++x) {
    const size_t cta = size_t(x) + size_t(run.grid_x) * (size_t(run.traced_y) + size_t(run.grid_y) * size_t(traced_batch));
    const ProbeCtaRecord& r = run.host_ctas[cta];
    for (int w = 0; w < run.warps; ++w) {
      const size_t slot = size_t(x) * size_t(run.warps) + size_t(w);
      const uint32_t count = run.host_counts[slot];
      const size_t kept = std::min<size_t>(count, cap);
      t->meta.dropped_spans += count - kept;
      if (kept == 0 || !r.valid || index[cta] < 0) continue;
      // clock64 -> ns on the CTA's %globaltimer interval: its own rate when the
      // interval is long enough to measure it, else the nominal clock; clamped
      // to the interval, and monotonic, so a warp's spans stay in order.
      // (Offsets from the CTA's start in double: %globaltimer itself can be
      // ~1e18, past double's integer precision.)
      const uint64_t duration = r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
      double rate = ns_per_clock;
      if (r.end_clk > r.start_clk && duration >= kMinCalibrationNs)
        rate = double(duration) / double(r.end_clk - r.start_clk);
      auto to_ns = [&](uint64_t clk) {
        const double dt = std::clamp(double(int64_t(clk - r.start_clk)) * rate, 0.0, double(duration));
        return (r.start_ns - origin) + uint64_t(std::llround(dt));
      };
      for (size_t n = 0; n < kept; ++n) {
        const ProbeSpanRecord& s = run.host_spans[slot * cap + n];
        WarpSpanRecord ws;
        ws.start = to_ns(s.start_clk);
        ws.end = std::max(ws.start, to_ns(s.end_clk));
        ws.cta = uint32_t(index[cta]);
        ws.warp = uint32_t(w);
        ws.kind = static_cast<SpanKind>(s.kind);
        ws.kv_tile = s.kv_tile;
        t->spans.push_back(ws);
      }
    }
  }
}

// The traced rows' states, as the one sequential recurrence over KV tiles.
// Each split of the KV range ran its own online softmax from -inf; before a
// split's tiles the earlier splits' final states (M, L) are merged in, so
// after tile t: m = max(M, m_s), l = L·2^(M−m) + l_s·2^(m_s−m), and the tile's
// rescale and sum are re-expressed against that m. Without splits (or while
// no earlier split has seen a key) the kernel's own numbers are kept as they are.
void convert_rows(const ProbeRun& run, int tiles_per_split, uint32_t batch, uint32_t head, Trace* t) {
  const size_t stride = size_t(run.kv_tile_stride);
  for (size_t slot = 0; slot < run.rows.size(); ++slot) {
    float M = kNegInf, L = 0.0f;        // merged final states of the finished splits (log2 units)
    float local_m = kNegInf, local_l = 0.0f;  // the current split's latest state
    float prev_m = kNegInf;              // global m after the previous tile
    int split = -1;
    for (size_t kt = 0; kt < stride; ++kt) {
      const ProbeRowRecord& r = run.host_rows[slot * stride + kt];
      if (!r.written) continue;
      const int s = tiles_per_split > 0 ? int(kt) / tiles_per_split : 0;
      if (s != split) {
        if (split >= 0 && local_m != kNegInf) {
          if (M == kNegInf) {
            M = local_m;
            L = local_l;
          } else {
            const float m = std::max(M, local_m);
            L = L * std::exp2(M - m) + local_l * std::exp2(local_m - m);
            M = m;
          }
        }
        split = s;
      }
      local_m = r.m;
      local_l = r.l;
      SoftmaxStateRecord out;
      out.batch = batch;
      out.head = head;
      out.row = uint32_t(run.rows[slot]);
      out.kv_tile = uint32_t(kt);
      out.keys = r.keys;
      float m = r.m, l = r.l, rescale = r.rescale, tile_sum = r.tile_sum;
      if (M != kNegInf) {
        m = std::max(M, r.m);
        l = L * std::exp2(M - m) + (r.m == kNegInf ? 0.0f : r.l * std::exp2(r.m - m));
        rescale = r.keys == 0 ? 1.0f : std::exp2(prev_m - m);
        tile_sum = r.keys == 0 ? 0.0f : r.tile_sum * std::exp2(r.m - m);
      }
      out.m = m * kLn2;
      out.l = l;
      out.rescale = rescale;
      out.tile_max = r.tile_max * kLn2;
      out.tile_sum = tile_sum;
      t->softmax.push_back(out);
      prev_m = m;
    }
  }
}

// The second pass and its records: tile masses (the whole grid, q-tile
// major) and the sampled blocks' probabilities.
struct MassInputs {
  kernels::TileMassParams params{};  // pointers and shape; outputs are filled in here
  kernels::ElemType type = kernels::ElemType::kBF16;
};

Status run_mass(MassInputs in, const TracedSeq& seq, const TraceOptions& opt, cudaStream_t stream, Trace* t) {
  const bool want_mass = opt.record_tile_mass;
  if ((!want_mass && opt.sample_tiles.empty()) || seq.q_tiles() == 0 || seq.kv_tiles() == 0) return {};
  // The mass kernel takes KV tiles of at most kTileMassMaxBlockKV keys; a
  // wider trace tile (the Hopper kernel's 128 or 176) is computed as `split`
  // equal sub-tiles (176 = 4 x 44) and merged here: masses add, maxima take
  // the max, sampled blocks are stitched from their sub-blocks.
  int split = ceil_div(seq.block_kv, kernels::kTileMassMaxBlockKV);
  while (seq.block_kv % split != 0) ++split;  // ends at block_kv at the latest
  const int sub_kv = seq.block_kv / split;
  const int sub_tiles = ceil_div(seq.kv_len, sub_kv);
  const size_t blocks = size_t(seq.q_tiles()) * size_t(sub_tiles);
  auto sub_index = [&](int qt, int kt, int s) { return size_t(qt) * size_t(sub_tiles) + size_t(kt * split + s); };
  // One slot per distinct sampled sub-block.
  std::vector<int32_t> slot_of(blocks, -1);
  int32_t slots = 0;
  for (const TileCoord& tc : opt.sample_tiles)
    for (int s = 0; s < split && tc.kv_tile * split + s < sub_tiles; ++s) {
      int32_t& slot = slot_of[sub_index(tc.q_tile, tc.kv_tile, s)];
      if (slot < 0) slot = slots++;
    }
  const size_t per_slot = size_t(seq.block_q) * size_t(sub_kv);
  auto mass = DeviceBuffer::allocate(2 * blocks * sizeof(float));
  if (!mass.ok()) return mass.status();
  auto samples = DeviceBuffer::allocate(size_t(slots) * per_slot * sizeof(float));
  if (!samples.ok()) return samples.status();
  auto slot_dev = DeviceBuffer::allocate(slots > 0 ? blocks * sizeof(int32_t) : 0);
  if (!slot_dev.ok()) return slot_dev.status();
  if (slots > 0) FLASHSCOPE_RETURN_IF_ERROR(upload(slot_dev->data(), slot_of, stream, "the sampled blocks"));
  kernels::TileMassParams& k = in.params;
  k.block_q = seq.block_q;
  k.block_kv = sub_kv;
  k.mass_sum = static_cast<float*>(mass->data());
  k.max_prob = k.mass_sum + blocks;
  k.sample_slot = slots > 0 ? static_cast<const int32_t*>(slot_dev->data()) : nullptr;
  k.samples = static_cast<float*>(samples->data());
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(kernels::launch_tile_mass(in.type, k, stream), "tile mass launch"));
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(stream), "tile mass pass"));
  std::vector<float> host_mass, host_samples;
  FLASHSCOPE_RETURN_IF_ERROR(download(&host_mass, mass->data(), 2 * blocks, "tile masses"));
  FLASHSCOPE_RETURN_IF_ERROR(download(&host_samples, samples->data(), size_t(slots) * per_slot, "samples"));

  const uint32_t b = uint32_t(opt.batch), h = uint32_t(opt.head);
  if (want_mass) {
    for (int qt = 0; qt < seq.q_tiles(); ++qt) {
      const int i0 = qt * seq.block_q, i1 = std::min(seq.q_len, i0 + seq.block_q);
      uint32_t seeing = 0;  // |R|
      for (int i = i0; i < i1; ++i) seeing += seq.sees_any(i);
      for (int kt = 0; kt < seq.kv_tiles(); ++kt) {
        const int j0 = kt * seq.block_kv, j1 = std::min(seq.kv_len, j0 + seq.block_kv);
        TileMassRecord r{b, h, uint32_t(qt), uint32_t(kt), 0.0f, 0.0f, seeing, 0};
        // Skipped: no row of the q-tile sees a key of the tile (the kernels'
        // causal and window tile skip).
        if (seq.skipped(i0, i1, j0, j1)) {
          r.flags = TileMassRecord::kSkipped;
        } else {
          if (seq.masked(i0, i1, j0, j1)) r.flags = TileMassRecord::kMasked;
          float sum = 0.0f, max_prob = 0.0f;
          for (int s = 0; s < split && kt * split + s < sub_tiles; ++s) {
            sum += host_mass[sub_index(qt, kt, s)];
            max_prob = std::max(max_prob, host_mass[blocks + sub_index(qt, kt, s)]);
          }
          r.mass = seeing > 0 ? sum / float(seeing) : 0.0f;
          r.max_prob = max_prob;
        }
        t->tile_mass.push_back(r);
      }
    }
  }
  for (const TileCoord& tc : opt.sample_tiles) {
    const int i0 = tc.q_tile * seq.block_q, j0 = tc.kv_tile * seq.block_kv;
    const int i1 = std::min(seq.q_len, i0 + seq.block_q), j1 = std::min(seq.kv_len, j0 + seq.block_kv);
    for (int i = i0; i < i1; ++i)
      for (int j = j0; j < j1; ++j) {
        ProbSampleRecord r{b, h, uint32_t(i), uint32_t(j), 0.0f, ProbSampleRecord::kMasked};
        if (seq.sees_any(i) && seq.visible(i, j)) {
          const int s = (j - j0) / sub_kv;
          const float* p = host_samples.data() + size_t(slot_of[sub_index(tc.q_tile, tc.kv_tile, s)]) * per_slot;
          r.prob = p[size_t(i - i0) * size_t(sub_kv) + size_t(j - j0 - s * sub_kv)];
          r.flags = 0;
        }
        t->prob_samples.push_back(r);
      }
  }
  return {};
}

// Device facts for the metadata; the SM clock also maps short CTAs' clock64.
struct DeviceFacts {
  DeviceInfo info;
  double ns_per_clock = 1.0;
};

Result<DeviceFacts> device_facts() {
  int device = 0;
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&device), "cudaGetDevice"));
  auto info = query_device(device);
  if (!info.ok()) return info.status();
  DeviceFacts f;
  f.info = std::move(info.value());
  if (f.info.name.size() > TraceMeta::kMaxDeviceChars) f.info.name.resize(TraceMeta::kMaxDeviceChars);
  f.ns_per_clock = f.info.sm_clock_ghz > 0 ? 1.0 / f.info.sm_clock_ghz : 1.0;
  return f;
}

void fill_device_meta(const DeviceFacts& d, TraceMeta* m) {
  m->producer = "flashscope";
  m->device_name = d.info.name;
  m->backend = "cuda";
  m->timer_unit = TimerUnit::kNanoseconds;
  m->timer_ticks_per_us = 1000.0;
  m->sm_count = d.info.sm_count;
  m->sol_tflops = d.info.sol_tflops;
  m->sol_dram_gbps = d.info.sol_dram_gbps;
}

const uint16_t* element(const void* base, int64_t offset) { return static_cast<const uint16_t*>(base) + offset; }

// The plan a capture of p runs with probes: prefill()'s own (the same
// kernel, tiles and refusals), after the checks every GPU capture makes.
// The one exception: the Hopper kernel has no probed window or soft-cap
// kernels, so a call with them that auto gives to it is traced on the sm80
// kernel auto runs elsewhere (whose probes record the tiles the window
// skips), and one that names hopper is refused before anything launches.
// The plan names the kernel that runs, and so does the trace's meta.
Result<PrefillPlan> traced_plan(const PrefillParams& p) {
  if (p.device != Device::kCuda)
    return invalid_argument(
        "capture_cuda_prefill_trace runs CUDA tensors (device cuda); CPU traces come from capture_cpu_prefill_trace");
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (!cuda_available()) return unsupported("GPU trace capture: no CUDA device is present (or no driver)");
  if (!needs_mods(p)) return plan_prefill(p);
  const PrefillKernel sm80 = cuda::sm80_default_kernel(p.head_dim);
  if (p.kernel == PrefillKernel::kHopper)
    return unsupported(std::string("GPU trace capture: the hopper kernel has no probed kernels for a sliding window "
                                   "or logit soft-capping; capture with kernel auto or ") +
                       prefill_kernel_name(sm80) + ", which traces them");
  PrefillParams traced = p;
  if (traced.kernel == PrefillKernel::kAuto && cuda::choose_prefill_kernel(p) == PrefillKernel::kHopper)
    traced.kernel = sm80;
  return plan_prefill(traced);
}

}  // namespace

Status capture_cuda_prefill_trace(const PrefillParams& p, const TraceOptions& opt, const CudaCaptureLimits& limits,
                                  Trace* out) {
  if (out == nullptr) return invalid_argument("capture_cuda_prefill_trace: out is null");
  auto plan = traced_plan(p);
  if (!plan.ok()) return plan.status();
  const PrefillKernel kernel = plan->kernel;
  if (opt.batch < 0 || opt.batch >= p.batch)
    return invalid_argument("TraceOptions.batch = " + std::to_string(opt.batch) + " is out of range (batch = " +
                            std::to_string(p.batch) + ")");
  if (opt.head < 0 || opt.head >= p.q_heads)
    return invalid_argument("TraceOptions.head = " + std::to_string(opt.head) + " is out of range (q_heads = " +
                            std::to_string(p.q_heads) + ")");
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // The inputs (cu_seqlens included) may still be being written on the stream.
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(stream), "waiting for the inputs"));
  auto dev = device_facts();
  if (!dev.ok()) return dev.status();

  // Sequence lengths on the host (varlen prefix sums live on the device).
  const bool varlen = p.cu_seqlens_q != nullptr;
  std::vector<int32_t> cu_q, cu_k;
  if (varlen && p.q_len > 0) {
    FLASHSCOPE_RETURN_IF_ERROR(download(&cu_q, p.cu_seqlens_q, size_t(p.batch) + 1, "cu_seqlens_q"));
    FLASHSCOPE_RETURN_IF_ERROR(download(&cu_k, p.cu_seqlens_k, size_t(p.batch) + 1, "cu_seqlens_k"));
  }
  auto seq_len = [&](int b, bool q) {
    if (p.q_len == 0) return 0;
    if (!varlen) return q ? p.q_len : p.kv_len;
    const std::vector<int32_t>& cu = q ? cu_q : cu_k;
    return int(cu[size_t(b) + 1] - cu[size_t(b)]);
  };
  const KernelTiling tiling{plan->block_q, plan->block_kv, plan->warps};
  TracedSeq seq;
  seq.q_len = seq_len(opt.batch, true);
  seq.kv_len = seq_len(opt.batch, false);
  seq.block_q = tiling.block_q;
  seq.block_kv = tiling.block_kv;
  seq.causal = p.causal;
  seq.window_left = p.window_left;
  seq.window_right = p.causal ? -1 : p.window_right;
  FLASHSCOPE_RETURN_IF_ERROR(check_options(opt, seq, "queries"));

  kernels::PrefillKernelParams k = cuda::prefill_kernel_params(p);
  const int64_t total_q = varlen ? (p.q_len > 0 ? int64_t(cu_q.back()) : 0) : int64_t(p.batch) * p.q_len;
  DeviceBuffer lse_scratch;
  if (p.lse == nullptr) {
    auto l = DeviceBuffer::allocate(size_t(total_q) * size_t(p.q_heads) * sizeof(float));
    if (!l.ok()) return l.status();
    lse_scratch = std::move(l.value());
    k.lse = static_cast<float*>(lse_scratch.data());
  }

  ProbeRun run;
  run.grid_x = ceil_div(p.q_len, tiling.block_q);
  run.grid_y = p.q_heads;
  run.grid_z = p.batch;
  run.warps = tiling.warps;
  run.traced_y = opt.head;
  FLASHSCOPE_RETURN_IF_ERROR(prepare_probe(&run, opt, seq, seq.kv_tiles(), limits, stream));

  EventTimer timer;
  FLASHSCOPE_RETURN_IF_ERROR(timer.start(p.stream));
  if (run.grid_x > 0) {
    // p's window and soft-cap reach the probed sm80 kernels through k
    // (traced_plan keeps them off the Hopper kernel's probed launch).
    const cudaError_t err = cuda::launch_prefill(plan.value(), k, &run.buffers, stream, cuda::hopper_extras_of(p));
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(err, std::string("probed prefill ") + prefill_kernel_name(kernel) + " launch"));
  }
  FLASHSCOPE_RETURN_IF_ERROR(timer.stop(p.stream));
  auto elapsed = timer.elapsed_ms();
  if (!elapsed.ok()) return elapsed.status();
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(stream), "probed prefill"));
  FLASHSCOPE_RETURN_IF_ERROR(read_probe(&run));

  Trace t;
  try {
    TraceMeta& m = t.meta;
    fill_device_meta(dev.value(), &m);
    m.kernel = prefill_kernel_name(kernel);
    trace_detail::fill_prefill_problem(p, varlen, &m);
    m.block_q = tiling.block_q;
    m.block_kv = tiling.block_kv;
    m.warps = tiling.warps;
    m.elapsed_ms = elapsed.value();
    double pairs = 0;
    for (int b = 0; b < p.batch; ++b) pairs += double(seq_len(b, true)) * double(seq_len(b, false));
    m.flops = 4.0 * pairs * p.q_heads * p.head_dim * (p.causal ? 0.5 : 1.0);
    // A window's visible pairs (prefill_flops counts them; varlen keeps the
    // dense count, its lengths being on the device).
    if (!varlen && (p.window_left >= 0 || (!p.causal && p.window_right >= 0))) m.flops = prefill_flops(p);
    m.traced_batch = opt.batch;
    m.traced_head = opt.head;

    CtaMapping map;
    map.kernel_block_q = tiling.block_q;
    map.trace_block_q = tiling.block_q;
    convert_ctas_and_spans(run, map, opt.batch, dev->ns_per_clock, opt.record_ctas, m.sm_count, &t);
    if (run.buffers.rows != nullptr)
      convert_rows(run, 0, uint32_t(opt.batch), uint32_t(opt.head), &t);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_cuda_prefill_trace: cannot allocate the trace records"};
  }

  // Second pass: the traced head's final probabilities from Q, K and the run's lse.
  MassInputs mass;
  mass.type = cuda::elem_type(p.dtype);
  kernels::TileMassParams& mp = mass.params;
  const int b = opt.batch, h = opt.head, kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t q_row0 = varlen && p.q_len > 0 ? int64_t(cu_q[size_t(b)]) : 0;
  const int64_t k_row0 = varlen && p.q_len > 0 ? int64_t(cu_k[size_t(b)]) : 0;
  mp.q = element(p.q.data, (varlen ? 0 : b * p.q.batch_stride) + q_row0 * p.q.seq_stride + h * p.q.head_stride);
  mp.q_row_stride = p.q.seq_stride;
  mp.k = element(p.k.data, (varlen ? 0 : b * p.k.batch_stride) + k_row0 * p.k.seq_stride + kv_head * p.k.head_stride);
  mp.k_row_stride = p.k.seq_stride;
  mp.lse = k.lse + (varlen ? int64_t(h) * total_q + q_row0 : (int64_t(b) * p.q_heads + h) * p.q_len);
  mp.q_len = seq.q_len;
  mp.kv_len = seq.kv_len;
  mp.head_dim = p.head_dim;
  mp.causal = p.causal;
  mp.window_left = p.window_left;
  mp.window_right = p.causal ? -1 : p.window_right;
  mp.softcap = p.softcap;
  mp.scale = t.meta.softmax_scale;
  try {
    FLASHSCOPE_RETURN_IF_ERROR(run_mass(mass, seq, opt, stream, &t));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_cuda_prefill_trace: cannot allocate the trace records"};
  }

  FLASHSCOPE_RETURN_IF_ERROR(validate_trace(t));
  *out = std::move(t);
  return {};
}

namespace {

// What capture_cuda_paged_trace refuses before it touches the device.
Status check_paged_capture(const PagedAttentionParams& p, const TraceOptions& opt) {
  if (p.device != Device::kCuda)
    return invalid_argument("capture_cuda_paged_trace runs CUDA tensors (device cuda); the CPU has no paged probes");
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (!cuda_available()) return unsupported("GPU trace capture: no CUDA device is present (or no driver)");
  if (opt.batch < 0 || opt.batch >= p.batch)
    return invalid_argument("TraceOptions.batch = " + std::to_string(opt.batch) + " is out of range (batch = " +
                            std::to_string(p.batch) + ")");
  if (opt.head < 0 || opt.head >= p.q_heads)
    return invalid_argument("TraceOptions.head = " + std::to_string(opt.head) + " is out of range (q_heads = " +
                            std::to_string(p.q_heads) + ")");
  return {};
}

// The paged run's problem and tiling in the trace's meta (the device's
// part is fill_device_meta's); FLOPs count the visible (query, key) pairs.
void fill_paged_meta(const PagedAttentionParams& p, const std::vector<int32_t>& kv_lens, const TracedSeq& seq,
                     const KernelTiling& tiling, bool decode, int splits, TraceMeta* m) {
  m->kernel = decode ? "paged-decode" : "paged-prefill";
  m->kind = decode ? TraceKind::kDecode : TraceKind::kPrefill;
  m->dtype = p.dtype;
  m->batch = p.batch;
  m->q_heads = p.q_heads;
  m->kv_heads = p.kv_heads;
  m->q_len = p.q_len;
  m->kv_len = 0;
  double pairs = 0;  // visible (query, key) pairs: a decode token sees its whole prefix
  for (int32_t len : kv_lens) {
    m->kv_len = std::max(m->kv_len, len);
    for (int tok = 0; tok < p.q_len; ++tok) {
      const int64_t pos = int64_t(len) - p.q_len + tok;
      int64_t first = 0, last = int64_t(len) - 1;
      if (p.causal) last = std::min(last, pos);
      if (!p.causal && p.window_right >= 0) last = std::min(last, pos + p.window_right);
      if (p.window_left >= 0) first = std::max<int64_t>(0, pos - p.window_left);
      pairs += double(std::max<int64_t>(0, last - first + 1));
    }
  }
  m->varlen = std::any_of(kv_lens.begin(), kv_lens.end(), [&](int32_t len) { return len != kv_lens[0]; });
  m->head_dim = p.head_dim;
  m->causal = p.causal;
  m->softmax_scale = effective_softmax_scale(p);
  m->block_q = seq.block_q;
  m->block_kv = seq.block_kv;
  m->warps = tiling.warps;
  m->page_size = p.page_size;
  m->num_splits = splits;
  m->flops = 4.0 * pairs * p.q_heads * p.head_dim;
}

// The second pass's inputs: the traced head's q rows, its KV head's pages
// and the run's lse.
MassInputs paged_mass_inputs(const PagedAttentionParams& p, const kernels::PagedKernelParams& k,
                             const TraceOptions& opt, const TracedSeq& seq, int group, float scale) {
  MassInputs mass;
  mass.type = cuda::elem_type(p.dtype);
  kernels::TileMassParams& mp = mass.params;
  const int b = opt.batch, h = opt.head;
  mp.q = element(p.q.data, b * p.q.batch_stride + h * p.q.head_stride);
  mp.q_row_stride = p.q.seq_stride;
  mp.k = p.k_pages;
  mp.block_table = p.block_tables + int64_t(b) * p.block_table_stride;
  mp.page_size_log2 = k.page_size_log2;
  mp.kv_heads = p.kv_heads;
  mp.kv_head = h / group;
  mp.lse = k.lse + (int64_t(b) * p.q_heads + h) * p.q_len;
  mp.q_len = seq.q_len;
  mp.kv_len = seq.kv_len;
  mp.head_dim = p.head_dim;
  mp.causal = p.causal;
  mp.window_left = p.window_left;
  mp.window_right = p.causal ? -1 : p.window_right;
  mp.softcap = p.softcap;
  mp.scale = scale;
  return mass;
}

}  // namespace

Status capture_cuda_paged_trace(const PagedAttentionParams& p, const TraceOptions& opt,
                                const CudaCaptureLimits& limits, Trace* out) {
  if (out == nullptr) return invalid_argument("capture_cuda_paged_trace: out is null");
  FLASHSCOPE_RETURN_IF_ERROR(check_paged_capture(p, opt));
  auto plan = cuda::plan_paged_attention(p);
  if (!plan.ok()) return plan.status();
  const int splits = plan->num_splits;
  const int group = p.q_heads / p.kv_heads;
  const int rows = p.q_len * group;
  const bool decode = kernels::paged_uses_decode_tile(rows);
  const KernelTiling tiling = kernels::paged_tiling(p.head_dim, decode);
  const int q_tiles = ceil_div(rows, tiling.block_q);
  if (int64_t(q_tiles) * splits > 0x7fffffff || p.kv_heads > 65535 || p.batch > 65535)
    return unsupported("grid too large: batch and kv_heads must be <= 65535");
  const auto stream = static_cast<cudaStream_t>(p.stream);
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(stream), "waiting for the inputs"));
  auto dev = device_facts();
  if (!dev.ok()) return dev.status();

  std::vector<int32_t> kv_lens;
  FLASHSCOPE_RETURN_IF_ERROR(download(&kv_lens, p.kv_lens, size_t(p.batch), "kv_lens"));
  TracedSeq seq;
  seq.q_len = p.q_len;
  seq.kv_len = kv_lens[size_t(opt.batch)];
  seq.block_q = std::max(1, tiling.block_q / group);
  seq.block_kv = tiling.block_kv;
  seq.causal = p.causal;
  seq.window_left = p.window_left;
  seq.window_right = p.causal ? -1 : p.window_right;
  FLASHSCOPE_RETURN_IF_ERROR(check_options(opt, seq, "tokens"));

  // The split workspace: the caller's when it is large enough, else our own.
  DeviceBuffer workspace;
  void* ws = p.workspace;
  if (splits > 1 && (p.workspace == nullptr || p.workspace_bytes < plan->workspace_bytes)) {
    auto w = DeviceBuffer::allocate(plan->workspace_bytes);
    if (!w.ok()) return w.status();
    workspace = std::move(w.value());
    ws = workspace.data();
  }
  kernels::PagedKernelParams k = cuda::paged_kernel_params(p, splits, ws);
  DeviceBuffer lse_scratch;
  if (p.lse == nullptr) {
    auto l = DeviceBuffer::allocate(size_t(p.batch) * size_t(p.q_heads) * size_t(p.q_len) * sizeof(float));
    if (!l.ok()) return l.status();
    lse_scratch = std::move(l.value());
    k.lse = static_cast<float*>(lse_scratch.data());
  }

  ProbeRun run;
  run.grid_x = q_tiles * splits;
  run.grid_y = p.kv_heads;
  run.grid_z = p.batch;
  run.warps = tiling.warps;
  run.traced_y = opt.head / group;
  // Each split takes whole tiles (attention_views.cuh, PagedView).
  const int tiles_per_split = ceil_div(seq.kv_tiles(), splits);
  FLASHSCOPE_RETURN_IF_ERROR(prepare_probe(&run, opt, seq, tiles_per_split, limits, stream));

  const auto type = cuda::elem_type(p.dtype);
  EventTimer timer;
  FLASHSCOPE_RETURN_IF_ERROR(timer.start(p.stream));
  if (run.grid_x > 0) {
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
        kernels::launch_paged_attention(type, p.head_dim, p.causal, k, stream, false, &run.buffers),
        "probed paged attention launch"));
    if (splits > 1)
      FLASHSCOPE_RETURN_IF_ERROR(
          cuda_check(kernels::launch_paged_combine(type, p.head_dim, k, stream), "split-KV combine launch"));
  }
  FLASHSCOPE_RETURN_IF_ERROR(timer.stop(p.stream));
  auto elapsed = timer.elapsed_ms();
  if (!elapsed.ok()) return elapsed.status();
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(stream), "probed paged attention"));
  FLASHSCOPE_RETURN_IF_ERROR(read_probe(&run));

  Trace t;
  try {
    TraceMeta& m = t.meta;
    fill_device_meta(dev.value(), &m);
    fill_paged_meta(p, kv_lens, seq, tiling, decode, splits, &m);
    m.elapsed_ms = elapsed.value();
    m.traced_batch = opt.batch;
    m.traced_head = opt.head;

    CtaMapping map;
    map.paged = true;
    map.group = group;
    map.kernel_block_q = tiling.block_q;
    map.trace_block_q = seq.block_q;
    convert_ctas_and_spans(run, map, opt.batch, dev->ns_per_clock, opt.record_ctas, m.sm_count, &t);
    if (run.buffers.rows != nullptr)
      convert_rows(run, tiles_per_split, uint32_t(opt.batch), uint32_t(opt.head), &t);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_cuda_paged_trace: cannot allocate the trace records"};
  }

  const MassInputs mass = paged_mass_inputs(p, k, opt, seq, group, t.meta.softmax_scale);
  try {
    FLASHSCOPE_RETURN_IF_ERROR(run_mass(mass, seq, opt, stream, &t));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_cuda_paged_trace: cannot allocate the trace records"};
  }

  FLASHSCOPE_RETURN_IF_ERROR(validate_trace(t));
  *out = std::move(t);
  return {};
}

#else  // no CUDA, or no probed kernels in this build

namespace {
Status no_probes() {
#if FLASHSCOPE_WITH_CUDA
  return unsupported("GPU trace capture: this build has no kernel probes (configure with FLASHSCOPE_KERNEL_PROBES=ON)");
#else
  return unsupported("GPU trace capture: this build of flashscope has no CUDA backend; use capture_cpu_prefill_trace");
#endif
}
}  // namespace

Status capture_cuda_prefill_trace(const PrefillParams&, const TraceOptions&, const CudaCaptureLimits&, Trace*) {
  return no_probes();
}
Status capture_cuda_paged_trace(const PagedAttentionParams&, const TraceOptions&, const CudaCaptureLimits&, Trace*) {
  return no_probes();
}

#endif

}  // namespace trace_internal

Status capture_cuda_prefill_trace(const PrefillParams& p, const TraceOptions& opt, Trace* out) {
  return trace_internal::capture_cuda_prefill_trace(p, opt, trace_internal::CudaCaptureLimits{}, out);
}

Status capture_cuda_paged_trace(const PagedAttentionParams& p, const TraceOptions& opt, Trace* out) {
  return trace_internal::capture_cuda_paged_trace(p, opt, trace_internal::CudaCaptureLimits{}, out);
}

}  // namespace flashscope
