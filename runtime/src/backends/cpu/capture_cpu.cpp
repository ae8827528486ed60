// cpu_capture_layer: the CPU engine's attention of one layer, run again with
// its probes (capture_cpu_prefill_trace) on the kept query rows and the
// sequence's cache: the same PrefillParams the forward's attend() builds
// (bf16, causal bottom-right, the layer's window, attn_scale), with the kept
// rows [first, keys) as the queries. Row i sees keys [0, first + i] (within
// the window), as the prompt's prefill chunk or decode step that produced
// it did, and the tiled CPU attention computes a row from its keys alone in
// fixed 64-key tiles, so every row's numbers are that step's.
#include <algorithm>
#include <new>
#include <vector>

#include "backends/capture_backend.hpp"
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
  std::vector<uint16_t> attn_out;
  try {
    o.q.assign(q_rows, q_rows + static_cast<size_t>(job.rows) * q_elems);
    o.k.assign(cache.k, cache.k + static_cast<size_t>(job.keys) * kv_elems);
    o.lse.resize(static_cast<size_t>(c.n_heads) * job.rows);
    attn_out.resize(static_cast<size_t>(job.rows) * q_elems);
    o.traces.resize(job.heads.size());
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_attention: cannot allocate the capture's buffers"};
  }

  PrefillParams p;
  p.q = bshd(o.q.data(), job.rows, c.n_heads, c.head_dim);
  p.o = bshd(attn_out.data(), job.rows, c.n_heads, c.head_dim);
  p.k = bshd(const_cast<uint16_t*>(cache.k), cache.capacity, c.n_kv_heads, c.head_dim);
  p.v = bshd(const_cast<uint16_t*>(cache.v), cache.capacity, c.n_kv_heads, c.head_dim);
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
