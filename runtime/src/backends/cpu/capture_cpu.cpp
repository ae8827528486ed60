// cpu_capture_layer: the CPU engine's attention of one layer, run again with
// its probes (capture_cpu_prefill_trace) on the kept query rows and the
// sequence's cache, its keys [0, keys) gathered out of the pages: the
// attention the forward's attend() asks for (bf16, causal bottom-right, the
// layer's window, attn_scale), with the kept rows [first, keys) as the
// queries. Row i sees keys [0, first + i] (within
// the window), as the prompt's prefill chunk or decode step that produced
// it did, and the tiled CPU attention computes a row from its keys alone in
// fixed 64-key tiles, so every row's numbers are that step's.
#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "backends/capture_backend.hpp"
#include "attention/cpu/kv_q4.hpp"
#include "attention/cpu/kv_q8.hpp"
#include "flashscope/half.hpp"
#include "flashscope/trace_capture.hpp"
#include "util/math.hpp"

namespace flashscope::model {
namespace {

constexpr int kTile = 64;  // the CPU capture's block_q and block_kv (trace_capture.hpp)

// The blocks whose probabilities are recorded: all, or each q-tile's
// diagonal block (its last row's own key) and key block 0 (the sink).
std::vector<TileCoord> sample_tiles(const LayerCaptureJob& job) {
  std::vector<TileCoord> tiles;
  const int q_tiles = ceil_div(job.rows, kTile), kv_tiles = ceil_div(job.keys, kTile);
  for (int qt = 0; qt < q_tiles; ++qt) {
    if (job.sample_all) {
      for (int kt = 0; kt < kv_tiles; ++kt) tiles.push_back({qt, kt});
      continue;
    }
    const int last_row = std::min(job.rows, (qt + 1) * kTile) - 1;
    const int diagonal = (job.first + last_row) / kTile;
    tiles.push_back({qt, 0});
    if (diagonal != 0) tiles.push_back({qt, diagonal});
  }
  return tiles;
}

// Rows [0, keys) of one cache pool, token-major: out [keys, kv_heads, head_dim].
void gather_rows(const CpuLayerCache& cache, const uint16_t* pool, int keys, int kv_heads, int head_dim,
                 uint16_t* out) {
  const int P = cache.page_size;
  for (int t0 = 0; t0 < keys; t0 += P) {
    const int n = std::min(P, keys - t0);
    const uint16_t* page = pool + static_cast<int64_t>(cache.block_table[t0 / P]) * kv_heads * P * head_dim;
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < kv_heads; ++h)
        std::copy_n(page + (static_cast<int64_t>(h) * P + i) * head_dim, head_dim,
                    out + (static_cast<int64_t>(t0 + i) * kv_heads + h) * head_dim);
  }
}

// The same from a q8_0 or q4_0 cache, widened to bf16 (what the capture's
// attention and the app read).
void gather_rows_quant(const CpuLayerCache& cache, int keys, int kv_heads, int head_dim, uint16_t* k_out,
                       uint16_t* v_out) {
  const int P = cache.page_size;
  const bool q4 = cache.kv_type == KvType::kQ4_0;
  const int64_t head_bytes = q4 ? cpu::kv_q4_head_bytes(P, head_dim) : cpu::kv_q8_head_bytes(P, head_dim);
  const auto load_k = q4 ? cpu::kv_q4_load_k : cpu::kv_q8_load_k;
  const auto load_v = q4 ? cpu::kv_q4_load_v : cpu::kv_q8_load_v;
  float row[256];  // head_dim <= 256 (head_dim_supported)
  for (int t = 0; t < keys; ++t) {
    const int64_t page = cache.block_table[t / P];
    for (int h = 0; h < kv_heads; ++h) {
      const int64_t at = (page * kv_heads + h) * head_bytes;
      const int64_t dst = (static_cast<int64_t>(t) * kv_heads + h) * head_dim;
      load_k(cache.k_quant + at, head_dim, P, t % P, row);
      for (int d = 0; d < head_dim; ++d) k_out[dst + d] = float_to_bf16(row[d]);
      load_v(cache.v_quant + at, head_dim, P, t % P, row);
      for (int d = 0; d < head_dim; ++d) v_out[dst + d] = float_to_bf16(row[d]);
    }
  }
}

}  // namespace

Status cpu_capture_layer(const Model::Impl& m, Sequence::State& st, const LayerCaptureJob& job, LayerCaptureOut* out) {
  const ModelConfig& c = m.config;
  const QueryTap& tap = *st.q_tap;
  const CpuLayerCache cache = cpu_layer_cache(st, job.layer);
  const size_t q_elems = static_cast<size_t>(c.n_heads) * c.head_dim;
  const size_t kv_elems = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  const uint16_t* q_rows = tap.rows[static_cast<size_t>(job.layer)].data() +
                           static_cast<size_t>(job.first - tap.first) * q_elems;

  LayerCaptureOut o;
  std::vector<uint16_t> attn_out, v;
  try {
    o.q.assign(q_rows, q_rows + static_cast<size_t>(job.rows) * q_elems);
    o.k.resize(static_cast<size_t>(job.keys) * kv_elems);
    v.resize(o.k.size());
    o.lse.resize(static_cast<size_t>(c.n_heads) * job.rows);
    attn_out.resize(static_cast<size_t>(job.rows) * q_elems);
    o.traces.resize(job.heads.size());
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_attention: cannot allocate the capture's buffers"};
  }
  if (cache.k_quant != nullptr) {
    gather_rows_quant(cache, job.keys, c.n_kv_heads, c.head_dim, o.k.data(), v.data());
  } else {
    gather_rows(cache, cache.k_pages, job.keys, c.n_kv_heads, c.head_dim, o.k.data());
    gather_rows(cache, cache.v_pages, job.keys, c.n_kv_heads, c.head_dim, v.data());
  }

  PrefillParams p;
  p.q = bshd(o.q.data(), job.rows, c.n_heads, c.head_dim);
  p.o = bshd(attn_out.data(), job.rows, c.n_heads, c.head_dim);
  p.k = bshd(o.k.data(), job.keys, c.n_kv_heads, c.head_dim);
  p.v = bshd(v.data(), job.keys, c.n_kv_heads, c.head_dim);
  p.lse = o.lse.data();
  p.device = Device::kCpu;
  p.dtype = DType::kBF16;
  p.batch = 1;
  p.q_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.q_len = job.rows;
  p.kv_len = job.keys;
  p.head_dim = c.head_dim;
  p.softmax_scale = job.scale;
  p.causal = true;
  if (job.window > 0) p.window_left = job.window - 1;

  TraceOptions opt;
  opt.rows = job.follow_rows;
  try {
    opt.sample_tiles = sample_tiles(job);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_attention: cannot allocate the sampled tiles"};
  }
  // Each pass runs every head (its lse serves the summaries); one pass per traced head.
  for (size_t i = 0; i < job.heads.size(); ++i) {
    opt.head = job.heads[i];
    FLASHSCOPE_RETURN_IF_ERROR(capture_cpu_prefill_trace(p, opt, &o.traces[i]));
  }
  *out = std::move(o);
  return {};
}

}  // namespace flashscope::model
