// capture_cpu_prefill_trace(): the CPU backend's attention with probes.
//
// Why a separate pass and not a hook inside attention_tiled.cpp: the backend's
// micro-kernels interleave four rows' QKᵀ, softmax and P·V, so "the softmax
// phase of tile t" has no single place there, and a hook would cost the
// production path branches in its inner loops. This pass computes the same
// numbers the same way, one phase at a time:
//   work item  (sequence b, q-head h, 64-query block): one "CTA", one thread
//   per KV tile t of 64 keys the block may see (causal: up to its last row's
//   last key, the GPU's tile skip; a left window: from its first row's first
//   key's tile; a right window: like causal):
//     K, V → float (K transposed)                        spans kLoadIssueK, kLoadIssueV
//     s_rj  = (Σ_d q_rd·k_jd) · scale·log2(e)            span kQK: float, d in order
//     s_rj  = c'·tanh(s_rj / c'), c' = softcap·log2(e)   with a soft-cap, visible keys only
//     m_new = max(m, max_j s_rj);  alpha = exp2(m − m_new)
//     p_rj  = exp2(s_rj − m_new);  l = alpha·l + Σ_j p_rj  span kSoftmax: unrounded p in l
//     o_r   = alpha·o_r + Σ_j round(p_rj)·v_j            span kPV: P rounded to the dtype
//   then o /= l stored in the dtype, lse = m·ln2 + ln l      span kEpilogue
// Every sum runs in the order attention_tiled's micro-kernels use (d
// ascending for s, j ascending for o), so o, lse and the recorded m and l
// equal the backend's; test_trace.cpp holds them to it.
//
// What is recorded, all in preallocated arrays indexed by work item so the
// parallel loop never allocates:
//   per work item: a CtaRecord (thread id, steady-clock ns since the start);
//   traced (b, h) only: phase spans, and per (row, kv tile) the state after
//   the tile (RowTile, log2 units as computed), from which the softmax
//   records of the followed rows, the tile masses and the probability
//   samples are derived after the loop (natural-log units, see trace.hpp);
//   the sampled tiles' logits s, to turn into final probabilities once every
//   row's final m and l are known.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "attention/cpu/prefill_sequences.hpp"
#include "flashscope/trace.hpp"
#include "trace/prefill_meta.hpp"
#include "util/math.hpp"

namespace flashscope {
namespace {

using cpu::Bf16;
using cpu::Block;
using cpu::Fp16;
using cpu::Sequence;

// The CPU backend's tiles (attention_tiled.cpp): the trace's q_tile / kv_tile.
constexpr int kBlockQ = 64;
constexpr int kBlockKV = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kNoSpans = static_cast<size_t>(-1);
constexpr int kSpansPerTile = 5;  // load K, load V, QK, softmax, PV

// Which keys a query sees: causal and the window (attention.hpp), bottom-right aligned.
struct Mask {
  bool causal = false;
  int left = -1, right = -1;  // window_left / window_right; -1 unbounded

  // Query i of sequence s sees keys [lo(i), hi(i)), unclamped (the range may
  // be empty or reach past [0, kv_len)); both grow with i.
  int64_t lo(const Sequence& s, int i) const {
    return left >= 0 ? int64_t{i} + (s.kv_len - s.q_len) - left : 0;
  }
  int64_t hi(const Sequence& s, int i) const {
    const int64_t pos = int64_t{i} + (s.kv_len - s.q_len);
    int64_t h = s.kv_len;
    if (causal) h = std::min(h, pos + 1);
    if (right >= 0) h = std::min(h, pos + right + 1);
    return h;
  }
};

// The KV tiles [first, end) the block at q0 visits: those holding a key some
// row of it sees. first = end when it sees none.
struct TileRange {
  int first = 0, end = 0;
  int count() const { return end - first; }
};
TileRange block_tiles(const Sequence& s, int q0, const Mask& mask) {
  const int rows = std::min(kBlockQ, s.q_len - q0);
  const int64_t lo = std::clamp<int64_t>(mask.lo(s, q0), 0, s.kv_len);
  const int64_t hi = std::clamp<int64_t>(mask.hi(s, q0 + rows - 1), 0, s.kv_len);
  if (hi <= lo) return {};
  return {static_cast<int>(lo / kBlockKV), static_cast<int>(ceil_div<int64_t>(hi, kBlockKV))};
}

// Keys [begin, end) of tile [t0, t0 + n) that query i sees, relative to t0.
struct KeyRange {
  int begin = 0, end = 0;
  int count() const { return end > begin ? end - begin : 0; }
};
KeyRange visible_keys(const Sequence& s, int i, int t0, int n, const Mask& mask) {
  return {static_cast<int>(std::clamp<int64_t>(mask.lo(s, i) - t0, 0, n)),
          static_cast<int>(std::clamp<int64_t>(mask.hi(s, i) - t0, 0, n))};
}

// State of one row of the traced head after one KV tile, as computed (log2 units).
struct RowTile {
  float m = kNegInf, l = 0.0f, alpha = 1.0f, tile_max = kNegInf, tile_sum = 0.0f;
  uint32_t keys = 0;
};

// Float scratch of one thread, rows of head_dim `dim`:
//   q, v, o [kBlockQ, dim]; kt [dim, kBlockKV]; s, p [kBlockQ, kBlockKV];
//   acc [dim]; m, l, alpha, keys, first_key [kBlockQ]
struct Scratch {
  float *q, *kt, *v, *o, *s, *p, *acc, *m, *l, *alpha;
  int *keys, *first_key;  // per row: visible keys of the tile, and the first one
};

size_t scratch_floats(int dim) {
  return 4 * size_t{kBlockQ} * dim + 2 * size_t{kBlockQ} * kBlockKV + dim + 5 * size_t{kBlockQ};
}

Scratch carve(float* base, int dim) {
  const size_t tile = size_t{kBlockQ} * dim;
  Scratch w;
  w.q = base;
  w.kt = w.q + tile;
  w.v = w.kt + tile;
  w.o = w.v + tile;
  w.s = w.o + tile;
  w.p = w.s + kBlockQ * kBlockKV;
  w.acc = w.p + kBlockQ * kBlockKV;
  w.m = w.acc + dim;
  w.l = w.m + kBlockQ;
  w.alpha = w.l + kBlockQ;
  w.keys = reinterpret_cast<int*>(w.alpha + kBlockQ);  // int and float are both 4 bytes
  w.first_key = w.keys + kBlockQ;
  return w;
}
static_assert(sizeof(int) == sizeof(float), "Scratch::keys shares the float slab");
static_assert(kBlockQ == kBlockKV, "Scratch sizes kt and v like a q tile");

// Everything a work item reads or writes.
struct Capture {
  const PrefillParams* p = nullptr;
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
  uint16_t* o = nullptr;
  int dim = 0, group = 1;
  float scale_log2 = 0;
  float cap_log2 = 0;  // softcap · log2(e); 0: no soft-cap
  Mask mask;
  int64_t lse_head_stride = 0;
  const std::vector<Sequence>* seqs = nullptr;
  const std::vector<Block>* blocks = nullptr;

  int traced_seq = 0, traced_head = 0;
  int traced_kv_tiles = 0;                         // KV tiles of the traced sequence
  RowTile* states = nullptr;                       // [q_len of traced seq, traced_kv_tiles]
  const std::vector<TileCoord>* samples = nullptr;
  float* sample_s = nullptr;                       // [samples, kBlockQ, kBlockKV] logits, log2 units
  CtaRecord* ctas = nullptr;                       // [items] or null
  WarpSpanRecord* spans = nullptr;
  const size_t* span_begin = nullptr;              // [items]: first span slot, kNoSpans if untraced
  std::chrono::steady_clock::time_point t0;

  uint64_t now() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
};

template <typename T>
void run_item(const Capture& c, int64_t item, int tid, const Scratch& w) {
  const PrefillParams& p = *c.p;
  const uint64_t item_start = c.now();
  const Block& blk = (*c.blocks)[static_cast<size_t>(item / p.q_heads)];
  const int h = static_cast<int>(item % p.q_heads);
  const Sequence& seq = (*c.seqs)[static_cast<size_t>(blk.seq)];
  const bool traced = blk.seq == c.traced_seq && h == c.traced_head;
  WarpSpanRecord* span_out =
      c.spans != nullptr && c.span_begin[item] != kNoSpans ? c.spans + c.span_begin[item] : nullptr;
  auto span = [&](SpanKind kind, int kv_tile, uint64_t start) {
    if (span_out != nullptr) *span_out++ = {start, c.now(), static_cast<uint32_t>(item), 0, kind, kv_tile};
  };

  const int dim = c.dim;
  const int q0 = blk.q0;
  const int kv_head = h / c.group;
  const int rows = std::min(kBlockQ, seq.q_len - q0);
  for (int r = 0; r < rows; ++r) {
    const uint16_t* src = c.q + seq.q_offset + (q0 + r) * p.q.seq_stride + h * p.q.head_stride;
    for (int d = 0; d < dim; ++d) w.q[r * dim + d] = T::load(src[d]);
  }
  std::fill(w.o, w.o + rows * dim, 0.0f);
  std::fill(w.m, w.m + rows, kNegInf);
  std::fill(w.l, w.l + rows, 0.0f);

  const TileRange tiles = block_tiles(seq, q0, c.mask);
  const int kv_end = static_cast<int>(std::clamp<int64_t>(c.mask.hi(seq, q0 + rows - 1), 0, seq.kv_len));
  for (int t = tiles.first; t < tiles.end; ++t) {
    const int t0 = t * kBlockKV;
    const int n = std::min(kBlockKV, kv_end - t0);

    uint64_t start = c.now();
    for (int j = 0; j < n; ++j) {
      const uint16_t* src = c.k + seq.k_offset + (t0 + j) * p.k.seq_stride + kv_head * p.k.head_stride;
      for (int d = 0; d < dim; ++d) w.kt[d * kBlockKV + j] = T::load(src[d]);
    }
    span(SpanKind::kLoadIssueK, t, start);
    start = c.now();
    for (int j = 0; j < n; ++j) {
      const uint16_t* src = c.v + seq.v_offset + (t0 + j) * p.v.seq_stride + kv_head * p.v.head_stride;
      for (int d = 0; d < dim; ++d) w.v[j * dim + d] = T::load(src[d]);
    }
    span(SpanKind::kLoadIssueV, t, start);

    // s [rows, n]: d outer so each element sums its products in d order.
    start = c.now();
    for (int r = 0; r < rows; ++r) {
      float* s = w.s + r * kBlockKV;
      std::fill(s, s + n, 0.0f);
      for (int d = 0; d < dim; ++d) {
        const float q_rd = w.q[r * dim + d];
        const float* k_d = w.kt + d * kBlockKV;
        for (int j = 0; j < n; ++j) s[j] += q_rd * k_d[j];
      }
      for (int j = 0; j < n; ++j) s[j] *= c.scale_log2;
    }
    span(SpanKind::kQK, t, start);

    start = c.now();
    float* sample = nullptr;
    if (traced) {
      for (size_t i = 0; i < c.samples->size(); ++i) {
        const TileCoord& tc = (*c.samples)[i];
        if (tc.q_tile == q0 / kBlockQ && tc.kv_tile == t) sample = c.sample_s + i * kBlockQ * kBlockKV;
      }
    }
    for (int r = 0; r < rows; ++r) {
      float* s = w.s + r * kBlockKV;
      float* pr = w.p + r * kBlockKV;
      const KeyRange vis = visible_keys(seq, q0 + r, t0, n, c.mask);
      const int keys = vis.count();
      w.keys[r] = keys;
      w.first_key[r] = vis.begin;
      float tile_max = kNegInf, row_sum = 0.0f;
      if (keys == 0) {
        w.alpha[r] = 1.0f;  // nothing visible: m, l and o stay as they are
      } else {
        if (c.cap_log2 > 0.0f)
          for (int j = vis.begin; j < vis.end; ++j) s[j] = c.cap_log2 * std::tanh(s[j] / c.cap_log2);
        tile_max = s[vis.begin];
        for (int j = vis.begin + 1; j < vis.end; ++j) tile_max = std::max(tile_max, s[j]);
        const float m_new = std::max(w.m[r], tile_max);
        w.alpha[r] = std::exp2(w.m[r] - m_new);  // 0 on the row's first tile (m = -inf)
        for (int j = vis.begin; j < vis.end; ++j) {
          const float pj = std::exp2(s[j] - m_new);
          row_sum += pj;
          pr[j] = T::round(pj);
        }
        w.l[r] = w.l[r] * w.alpha[r] + row_sum;
        w.m[r] = m_new;
      }
      if (traced) {
        c.states[static_cast<size_t>(q0 + r) * c.traced_kv_tiles + t] =
            {w.m[r], w.l[r], w.alpha[r], tile_max, row_sum, static_cast<uint32_t>(keys)};
        if (sample != nullptr) std::copy(s, s + n, sample + r * kBlockKV);
      }
    }
    span(SpanKind::kSoftmax, t, start);

    // o_r = alpha·o_r + Σ_j p_rj·v_j, j ascending, as the backend's pv_rows.
    start = c.now();
    for (int r = 0; r < rows; ++r) {
      const int keys = w.keys[r];
      if (keys == 0) continue;
      std::fill(w.acc, w.acc + dim, 0.0f);
      for (int j = w.first_key[r]; j < w.first_key[r] + keys; ++j) {
        const float p_rj = w.p[r * kBlockKV + j];
        const float* v_j = w.v + j * dim;
        for (int d = 0; d < dim; ++d) w.acc[d] += p_rj * v_j[d];
      }
      float* o_r = w.o + r * dim;
      for (int d = 0; d < dim; ++d) o_r[d] = o_r[d] * w.alpha[r] + w.acc[d];
    }
    span(SpanKind::kPV, t, start);
  }

  const uint64_t epilogue = c.now();
  for (int r = 0; r < rows; ++r) {
    uint16_t* dst = c.o + seq.o_offset + (q0 + r) * p.o.seq_stride + h * p.o.head_stride;
    const float l = w.l[r];
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // l = 0: no key seen, o is 0 too
    for (int d = 0; d < dim; ++d) dst[d] = T::store(w.o[r * dim + d] * inv_l);
    if (p.lse != nullptr) {
      p.lse[seq.lse_offset + h * c.lse_head_stride + q0 + r] = l > 0.0f ? w.m[r] * kLn2 + std::log(l) : kNegInf;
    }
  }
  span(SpanKind::kEpilogue, -1, epilogue);
  if (c.ctas != nullptr) {
    c.ctas[item] = {item_start, c.now(), static_cast<uint32_t>(tid), static_cast<uint32_t>(blk.seq),
                    static_cast<uint32_t>(h), static_cast<uint32_t>(q0 / kBlockQ), 0,
                    static_cast<uint32_t>(tiles.count())};
  }
}

template <typename T>
void run_all(const Capture& c, int64_t items, float* scratch, size_t per_thread) {
  cpu::parallel_items(
      items, [&](int tid) { return carve(scratch + static_cast<size_t>(tid) * per_thread, c.dim); },
      [&](int64_t item, int tid, const Scratch& w) { run_item<T>(c, item, tid, w); });
}

Status check_options(const TraceOptions& opt, const PrefillParams& p, const Sequence& seq) {
  if (opt.batch < 0 || opt.batch >= p.batch)
    return invalid_argument("TraceOptions.batch = " + std::to_string(opt.batch) + " is out of range (batch = " +
                            std::to_string(p.batch) + ")");
  if (opt.head < 0 || opt.head >= p.q_heads)
    return invalid_argument("TraceOptions.head = " + std::to_string(opt.head) + " is out of range (q_heads = " +
                            std::to_string(p.q_heads) + ")");
  for (int32_t r : opt.rows) {
    if (r < 0 || r >= seq.q_len)
      return invalid_argument("TraceOptions.rows: row " + std::to_string(r) + " is out of range (sequence " +
                              std::to_string(opt.batch) + " has " + std::to_string(seq.q_len) + " queries)");
  }
  const int q_tiles = ceil_div(seq.q_len, kBlockQ), kv_tiles = ceil_div(seq.kv_len, kBlockKV);
  for (const TileCoord& tc : opt.sample_tiles) {
    if (tc.q_tile < 0 || tc.q_tile >= q_tiles || tc.kv_tile < 0 || tc.kv_tile >= kv_tiles)
      return invalid_argument("TraceOptions.sample_tiles: tile (" + std::to_string(tc.q_tile) + ", " +
                              std::to_string(tc.kv_tile) + ") is outside the sequence's " + std::to_string(q_tiles) +
                              " x " + std::to_string(kv_tiles) + " tiles of 64 x 64");
  }
  if (opt.record_spans && !opt.record_ctas)
    return invalid_argument("TraceOptions.record_spans needs record_ctas (spans point at CTA records)");
  return {};
}

// Final m (log2 units) and l of query i of the traced sequence; l = 0 when it sees no key.
struct RowFinal {
  float m = kNegInf, l = 0.0f;
};

// The records derived from the traced head's states, appended to *t.
void derive_records(const Capture& c, const Sequence& seq, const TraceOptions& opt, Trace* t) {
  const int kv_tiles = c.traced_kv_tiles;
  const int q_tiles = ceil_div(seq.q_len, kBlockQ);
  const uint32_t b = static_cast<uint32_t>(opt.batch), h = static_cast<uint32_t>(opt.head);
  auto tiles_of = [&](int qt) { return block_tiles(seq, qt * kBlockQ, c.mask); };
  auto state = [&](int i, int kt) -> const RowTile& { return c.states[static_cast<size_t>(i) * kv_tiles + kt]; };

  std::vector<RowFinal> fin(static_cast<size_t>(seq.q_len));
  for (int i = 0; i < seq.q_len; ++i) {
    const TileRange r = tiles_of(i / kBlockQ);
    if (r.count() > 0) fin[static_cast<size_t>(i)] = {state(i, r.end - 1).m, state(i, r.end - 1).l};
  }
  // p_ij = exp(s − lse) = exp2(s₂ − m₂) / l with s₂, m₂ in the log2 units the pass computed in.
  auto prob = [&](int i, float s2) {
    const RowFinal& f = fin[static_cast<size_t>(i)];
    return f.l > 0.0f ? std::exp2(double{s2} - f.m) / f.l : 0.0;
  };

  std::vector<int32_t> rows = opt.rows;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (int32_t i : rows) {
    const TileRange visited = tiles_of(i / kBlockQ);
    for (int kt = visited.first; kt < visited.end; ++kt) {
      const RowTile& s = state(i, kt);
      t->softmax.push_back({b, h, static_cast<uint32_t>(i), static_cast<uint32_t>(kt), s.m * kLn2, s.l, s.alpha,
                            s.tile_max * kLn2, s.tile_sum, s.keys});
    }
  }

  if (opt.record_tile_mass) {
    for (int qt = 0; qt < q_tiles; ++qt) {
      const int i0 = qt * kBlockQ, i1 = std::min(seq.q_len, i0 + kBlockQ);
      uint32_t seeing = 0;  // |R|: rows that see at least one key
      for (int i = i0; i < i1; ++i) seeing += fin[static_cast<size_t>(i)].l > 0.0f;
      const TileRange visited = tiles_of(qt);
      for (int kt = 0; kt < kv_tiles; ++kt) {
        TileMassRecord r{b, h, static_cast<uint32_t>(qt), static_cast<uint32_t>(kt), 0.0f, 0.0f, seeing, 0};
        if (kt < visited.first || kt >= visited.end) {
          r.flags = TileMassRecord::kSkipped;
        } else {
          // Every row sees every key of the tile iff the last row's first
          // key and the first row's last key (both grow with the row) bound it.
          const int first_key = kt * kBlockKV;
          const int last_key = std::min(seq.kv_len, (kt + 1) * kBlockKV) - 1;
          if (c.mask.lo(seq, i1 - 1) > first_key || c.mask.hi(seq, i0) <= last_key) r.flags = TileMassRecord::kMasked;
          double mass = 0, max_prob = 0;
          for (int i = i0; i < i1; ++i) {
            const RowTile& s = state(i, kt);
            if (s.keys == 0) continue;
            // This tile's p at the tile-time max m, brought to the final max.
            mass += s.tile_sum * prob(i, s.m);
            max_prob = std::max(max_prob, prob(i, s.tile_max));
          }
          r.mass = seeing > 0 ? static_cast<float>(mass / seeing) : 0.0f;
          r.max_prob = static_cast<float>(max_prob);
        }
        t->tile_mass.push_back(r);
      }
    }
  }

  for (size_t n = 0; n < c.samples->size(); ++n) {
    const TileCoord& tc = (*c.samples)[n];
    const float* s = c.sample_s + n * kBlockQ * kBlockKV;
    const int i0 = tc.q_tile * kBlockQ, j0 = tc.kv_tile * kBlockKV;
    const int i1 = std::min(seq.q_len, i0 + kBlockQ), j1 = std::min(seq.kv_len, j0 + kBlockKV);
    const TileRange visited = tiles_of(tc.q_tile);
    const bool computed = tc.kv_tile >= visited.first && tc.kv_tile < visited.end;
    for (int i = i0; i < i1; ++i) {
      // Visible keys of a visited tile are exactly those the pass computed.
      const KeyRange vis = computed ? visible_keys(seq, i, j0, j1 - j0, c.mask) : KeyRange{};
      for (int j = j0; j < j1; ++j) {
        ProbSampleRecord r{b, h, static_cast<uint32_t>(i), static_cast<uint32_t>(j), 0.0f, ProbSampleRecord::kMasked};
        if (j - j0 >= vis.begin && j - j0 < vis.end) {
          r.prob = static_cast<float>(prob(i, s[(i - i0) * kBlockKV + (j - j0)]));
          r.flags = 0;
        }
        t->prob_samples.push_back(r);
      }
    }
  }
}

}  // namespace

Status capture_cpu_prefill_trace(const PrefillParams& p, const TraceOptions& opt, Trace* out) {
  if (out == nullptr) return invalid_argument("capture_cpu_prefill_trace: out is null");
  if (p.device != Device::kCpu)
    return invalid_argument("capture_cpu_prefill_trace runs CPU tensors (device cpu); GPU traces come from the kernel probes");
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));

  const bool varlen = p.cu_seqlens_q != nullptr;
  const float scale = effective_softmax_scale(p);
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif

  Capture c;
  c.p = &p;
  c.q = static_cast<const uint16_t*>(p.q.data);
  c.k = static_cast<const uint16_t*>(p.k.data);
  c.v = static_cast<const uint16_t*>(p.v.data);
  c.o = static_cast<uint16_t*>(p.o.data);
  c.dim = p.head_dim;
  c.group = p.q_heads / p.kv_heads;
  c.scale_log2 = scale * kLog2e;
  c.cap_log2 = p.softcap > 0.0f ? p.softcap * kLog2e : 0.0f;
  c.mask = {p.causal, p.window_left, p.window_right};
  c.lse_head_stride = varlen ? p.cu_seqlens_q[p.batch] : p.q_len;
  c.traced_seq = opt.batch;
  c.traced_head = opt.head;
  c.samples = &opt.sample_tiles;

  Trace t;
  std::vector<Sequence> seqs;
  std::vector<Block> blocks;
  std::vector<float> scratch, sample_s;
  std::vector<RowTile> states;
  std::vector<size_t> span_begin;
  int64_t items = 0;
  const size_t per_thread = scratch_floats(p.head_dim);
  try {
    cpu::prefill_sequences(p, kBlockQ, &seqs, &blocks);
    FLASHSCOPE_RETURN_IF_ERROR(check_options(opt, p, seqs[static_cast<size_t>(opt.batch)]));
    const Sequence& traced = seqs[static_cast<size_t>(opt.batch)];
    c.traced_kv_tiles = ceil_div(traced.kv_len, kBlockKV);

    items = static_cast<int64_t>(blocks.size()) * p.q_heads;
    scratch.resize(per_thread * static_cast<size_t>(threads));
    states.resize(static_cast<size_t>(traced.q_len) * c.traced_kv_tiles);
    sample_s.resize(opt.sample_tiles.size() * kBlockQ * kBlockKV);
    if (opt.record_ctas) t.ctas.resize(static_cast<size_t>(items));
    if (opt.record_spans) {
      span_begin.assign(static_cast<size_t>(items), kNoSpans);
      size_t spans = 0;
      for (size_t bi = 0; bi < blocks.size(); ++bi) {
        if (blocks[bi].seq != opt.batch) continue;
        span_begin[bi * static_cast<size_t>(p.q_heads) + static_cast<size_t>(opt.head)] = spans;
        spans += size_t{kSpansPerTile} * block_tiles(traced, blocks[bi].q0, c.mask).count() + 1;
      }
      t.spans.resize(spans);
    }
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_cpu_prefill_trace: cannot allocate the trace buffers"};
  }
  c.seqs = &seqs;
  c.blocks = &blocks;
  c.states = states.data();
  c.sample_s = sample_s.data();
  c.ctas = opt.record_ctas ? t.ctas.data() : nullptr;
  c.spans = opt.record_spans ? t.spans.data() : nullptr;
  c.span_begin = span_begin.data();

  c.t0 = std::chrono::steady_clock::now();
  if (p.dtype == DType::kBF16) {
    run_all<Bf16>(c, items, scratch.data(), per_thread);
  } else {
    run_all<Fp16>(c, items, scratch.data(), per_thread);
  }
  const double elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.t0).count();

  try {
    derive_records(c, seqs[static_cast<size_t>(opt.batch)], opt, &t);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_cpu_prefill_trace: cannot allocate the trace records"};
  }

  TraceMeta& m = t.meta;
  m.producer = "flashscope";
  m.device_name = "CPU (" + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
  m.backend = "cpu";
  m.kernel = "cpu-tiled";
  trace_detail::fill_prefill_problem(p, varlen, &m);
  m.softmax_scale = scale;  // the scale the capture computed with
  m.block_q = kBlockQ;
  m.block_kv = kBlockKV;
  m.warps = 1;
  m.timer_unit = TimerUnit::kNanoseconds;
  m.timer_ticks_per_us = 1000.0;
  m.elapsed_ms = elapsed_ms;
  m.flops = prefill_flops(p);
  m.traced_batch = opt.batch;
  m.traced_head = opt.head;
  *out = std::move(t);
  return {};
}

}  // namespace flashscope
