// cuda_capture_layer: the CUDA engine's attention of one layer run again
// with its probes, over the engine's own page pool: the same
// PagedAttentionParams the step's attention_params() builds (the layer's
// pages, the sequence's block table, causal bottom-right, the layer's
// window, attn_scale), with the kept query rows uploaded as the new tokens.
//   the whole conversation  one call, q_len = the captured rows over their
//                           keys (the chunked-prefill tile for more than a
//                           few rows): the trace, the lse the summaries use
//   each decode step        each row fed alone, again alone: q_len 1 over
//                           its keys, the one-warp decode tile with the
//                           split-KV plan for that length, as the step ran it
// Both through capture_cuda_paged_trace (the probed instantiation of the
// production paged kernels). kUnsupported where it is (no probes, no device).
#include "backends/capture_backend.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <algorithm>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backends/cuda/cuda_model.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/trace_capture.hpp"
#include "kernels/attention/paged_launch.h"
#include "util/math.hpp"
#endif

namespace flashscope::model {

#if FLASHSCOPE_WITH_CUDA
namespace {

Status upload(DeviceBuffer* b, const void* host, size_t bytes) {
  auto r = DeviceBuffer::allocate(std::max<size_t>(bytes, 4));
  if (!r.ok()) return r.status();
  *b = std::move(r).value();
  return b->upload(host, bytes);
}

// The paged trace's tiles for q_len new tokens (capture_cuda_paged_trace's own
// arithmetic: block_q tokens, block_kv keys), to choose the sampled blocks.
struct PagedTiles {
  int block_q = 1, block_kv = 1;
};
PagedTiles paged_tiles(int q_len, int group, int head_dim) {
  const int rows = q_len * group;
  const kernels::KernelTiling t = kernels::paged_tiling(head_dim, kernels::paged_uses_decode_tile(rows));
  return {std::max(1, t.block_q / group), t.block_kv};
}

// Every block, or each q-tile's diagonal block and key block 0, for rows
// [0, q_len) at positions kv_len − q_len + i.
std::vector<TileCoord> sample_tiles(const PagedTiles& t, int q_len, int kv_len, bool all) {
  std::vector<TileCoord> tiles;
  const int q_tiles = ceil_div(q_len, t.block_q), kv_tiles = ceil_div(kv_len, t.block_kv);
  for (int qt = 0; qt < q_tiles; ++qt) {
    if (all) {
      for (int kt = 0; kt < kv_tiles; ++kt) tiles.push_back({qt, kt});
      continue;
    }
    const int last_row = std::min(q_len, (qt + 1) * t.block_q) - 1;
    const int diagonal = (kv_len - q_len + last_row) / t.block_kv;
    tiles.push_back({qt, 0});
    if (diagonal != 0) tiles.push_back({qt, diagonal});
  }
  return tiles;
}

}  // namespace

Status cuda_capture_layer(const Model::Impl& m, Sequence::State& state, const LayerCaptureJob& job,
                          LayerCaptureOut* out) {
  auto& st = static_cast<CudaState&>(state);
  CudaModel& cm = *m.cuda;
  const ModelConfig& c = m.config;
  DeviceScope device(cm.device);
  FLASHSCOPE_RETURN_IF_ERROR(device.status());
  FLASHSCOPE_RETURN_IF_ERROR(settle_sequence(st));
  const QueryTap& tap = *st.q_tap;
  const size_t qd = static_cast<size_t>(c.n_heads) * c.head_dim;
  const size_t kvd = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const uint16_t* q_rows =
      tap.rows[static_cast<size_t>(job.layer)].data() + static_cast<size_t>(job.first - tap.first) * qd;

  LayerCaptureOut o;
  try {
    o.q.assign(q_rows, q_rows + static_cast<size_t>(job.rows) * qd);
    o.k.resize(static_cast<size_t>(job.keys) * kvd);
    o.lse.resize(static_cast<size_t>(c.n_heads) * job.rows);
    o.traces.resize(job.heads.size());
    o.steps.resize(job.heads.size());
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_attention: cannot allocate the capture's buffers"};
  }

  // The pool does not move while the lock is held (another sequence's growth reallocates it).
  std::lock_guard<std::mutex> lock(cm.mutex);
  const std::vector<int32_t> kv_len = {job.keys};
  DeviceBuffer dq, dout, dlse, dtable, dlens;
  FLASHSCOPE_RETURN_IF_ERROR(upload(&dq, o.q.data(), o.q.size() * sizeof(uint16_t)));
  FLASHSCOPE_RETURN_IF_ERROR(upload(&dtable, st.pages.data(), st.pages.size() * sizeof(int32_t)));
  FLASHSCOPE_RETURN_IF_ERROR(upload(&dlens, kv_len.data(), sizeof(int32_t)));
  {
    auto b = DeviceBuffer::allocate(o.q.size() * sizeof(uint16_t));
    if (!b.ok()) return b.status();
    dout = std::move(b).value();
    auto l = DeviceBuffer::allocate(o.lse.size() * sizeof(float));
    if (!l.ok()) return l.status();
    dlse = std::move(l).value();
  }

  PagedAttentionParams p;
  p.q = bshd(dq.data(), job.rows, c.n_heads, c.head_dim);
  p.o = bshd(dout.data(), job.rows, c.n_heads, c.head_dim);
  p.lse = static_cast<float*>(dlse.data());
  p.k_pages = cm.pool.k_pages(job.layer);
  p.v_pages = cm.pool.v_pages(job.layer);
  p.block_tables = static_cast<const int32_t*>(dtable.data());
  p.block_table_stride = st.max_pages;
  p.kv_lens = static_cast<const int32_t*>(dlens.data());
  p.batch = 1;
  p.q_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.q_len = job.rows;
  p.head_dim = c.head_dim;
  p.page_size = kPageSize;
  p.max_kv_len = job.keys;
  p.causal = true;
  p.softmax_scale = job.scale;
  if (job.window > 0) p.window_left = job.window - 1;
  p.dtype = DType::kBF16;
  p.device = Device::kCuda;
  p.stream = st.scratch.stream;
  p.num_pages = cm.pool.num_pages();

  TraceOptions opt;
  opt.rows = job.follow_rows;
  try {
    opt.sample_tiles = sample_tiles(paged_tiles(job.rows, group, c.head_dim), job.rows, job.keys, job.sample_all);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "capture_attention: cannot allocate the sampled tiles"};
  }
  for (size_t i = 0; i < job.heads.size(); ++i) {
    opt.head = job.heads[i];
    FLASHSCOPE_RETURN_IF_ERROR(capture_cuda_paged_trace(p, opt, &o.traces[i]));
  }
  FLASHSCOPE_RETURN_IF_ERROR(dlse.download(o.lse.data(), o.lse.size() * sizeof(float)));

  // K of the layer: the sequence's pages [kv_heads, kPageSize, head_dim] into [keys, kv_heads · head_dim].
  {
    const size_t page_elems = static_cast<size_t>(c.n_kv_heads) * kPageSize * c.head_dim;
    std::vector<uint16_t> page(page_elems);
    for (int pi = 0; pi * kPageSize < job.keys; ++pi) {
      const char* src = static_cast<const char*>(p.k_pages) +
                        static_cast<size_t>(st.pages[static_cast<size_t>(pi)]) * page_elems * sizeof(uint16_t);
      FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemcpy(page.data(), src, page_elems * sizeof(uint16_t),
                                                       cudaMemcpyDeviceToHost),
                                            "cudaMemcpy of the layer's key pages"));
      for (int t = 0; t < kPageSize && pi * kPageSize + t < job.keys; ++t)
        for (int g = 0; g < c.n_kv_heads; ++g)
          std::copy_n(page.data() + (static_cast<size_t>(g) * kPageSize + t) * c.head_dim, c.head_dim,
                      o.k.data() + static_cast<size_t>(pi * kPageSize + t) * kvd + static_cast<size_t>(g) * c.head_dim);
    }
  }

  // Each decode step alone: its row as the one new token over its keys.
  for (int row : job.decode_rows) {
    const int keys = job.first + row + 1;
    const std::vector<int32_t> len = {keys};
    DeviceBuffer step_lens;
    FLASHSCOPE_RETURN_IF_ERROR(upload(&step_lens, len.data(), sizeof(int32_t)));
    PagedAttentionParams sp = p;
    sp.q.data = static_cast<uint16_t*>(dq.data()) + static_cast<size_t>(row) * qd;
    sp.o.data = static_cast<uint16_t*>(dout.data()) + static_cast<size_t>(row) * qd;
    sp.lse = nullptr;
    sp.kv_lens = static_cast<const int32_t*>(step_lens.data());
    sp.q_len = 1;
    sp.max_kv_len = keys;
    TraceOptions so;
    so.rows = {0};
    try {
      so.sample_tiles = sample_tiles(paged_tiles(1, group, c.head_dim), 1, keys, true);
    } catch (const std::bad_alloc&) {
      return {StatusCode::kOutOfMemory, "capture_attention: cannot allocate the sampled tiles"};
    }
    for (size_t i = 0; i < job.heads.size(); ++i) {
      so.head = job.heads[i];
      Trace t;
      FLASHSCOPE_RETURN_IF_ERROR(capture_cuda_paged_trace(sp, so, &t));
      try {
        o.steps[i].push_back(std::move(t));
      } catch (const std::bad_alloc&) {
        return {StatusCode::kOutOfMemory, "capture_attention: cannot keep the decode steps' traces"};
      }
    }
  }
  *out = std::move(o);
  return {};
}

#else

Status cuda_capture_layer(const Model::Impl&, Sequence::State&, const LayerCaptureJob&, LayerCaptureOut*) {
  return {StatusCode::kUnsupported, "capture_attention: this build has no CUDA backend"};
}

#endif

}  // namespace flashscope::model
