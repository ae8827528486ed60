#include "traces/capture.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include "flashscope/attention.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

constexpr int kTile = 64;  // the CPU capture's tiling; GPU kernels report their own
constexpr int kMaxRows = 24;
constexpr int kSampleEveryBlockUpTo = 40;  // computed blocks; each costs 64×64 samples

// The GPU capture on device copies of the problem. kUnsupported when the
// device or the probes are missing; the caller falls back.
// Sampled blocks are in the kernel's own tiles (v3/v4: 128 x 32, the Hopper
// kernel: up to 192 x 128): the runtime says which before the capture.
Status capture_on_gpu(SyntheticProblem& pr, const CaptureRequest& rq, Trace* out) {
  auto q = DeviceBuffer::allocate(pr.q.size() * 2);
  auto k = DeviceBuffer::allocate(pr.k.size() * 2);
  auto v = DeviceBuffer::allocate(pr.v.size() * 2);
  auto o = DeviceBuffer::allocate(pr.o.size() * 2);
  auto lse = DeviceBuffer::allocate(pr.lse.size() * sizeof(float));
  for (auto* r : {&q, &k, &v, &o, &lse}) {
    if (!r->ok()) return r->status();
  }
  FLASHSCOPE_RETURN_IF_ERROR(q.value().upload(pr.q.data(), pr.q.size() * 2));
  FLASHSCOPE_RETURN_IF_ERROR(k.value().upload(pr.k.data(), pr.k.size() * 2));
  FLASHSCOPE_RETURN_IF_ERROR(v.value().upload(pr.v.data(), pr.v.size() * 2));
  PrefillParams p = pr.params();
  p.q.data = q.value().data();
  p.k.data = k.value().data();
  p.v.data = v.value().data();
  p.o.data = o.value().data();
  p.lse = static_cast<float*>(lse.value().data());
  p.device = Device::kCuda;
  p.kernel = rq.kernel;
  // The capture runs prefill()'s plan with probes: its tiles are the trace's.
  auto plan = plan_prefill(p);
  if (!plan.ok()) return plan.status();
  return capture_cuda_prefill_trace(p, dashboard_trace_options(rq.shape, rq.head, plan->block_q, plan->block_kv),
                                    out);
}

}  // namespace

TraceOptions dashboard_trace_options(const SyntheticShape& s, int head, int tile_q, int tile_kv) {
  tile_q = std::max(tile_q, 1);
  tile_kv = std::max(tile_kv, 1);
  TraceOptions opt;
  opt.head = std::clamp(head, 0, std::max(s.q_heads - 1, 0));
  std::set<int32_t> rows;
  if (s.q_len > 0) {
    rows.insert(0);
    rows.insert(s.q_len - 1);
    for (int e = kTile; e < s.q_len && static_cast<int>(rows.size()) < kMaxRows / 2; e += kTile) {
      rows.insert(e - 1);  // the last row of a tile and the first of the next differ in what they see
      rows.insert(e);
    }
    for (int i = 1; static_cast<int>(rows.size()) < kMaxRows && i < kMaxRows; ++i) {
      rows.insert(static_cast<int32_t>(static_cast<int64_t>(s.q_len - 1) * i / kMaxRows));
    }
  }
  opt.rows.assign(rows.begin(), rows.end());

  const int qt = viz::ceil_div(s.q_len, tile_q), kt = viz::ceil_div(s.kv_len, tile_kv);
  std::vector<TileCoord> all;
  for (int a = 0; a < qt; ++a) {
    for (int b = 0; b < kt; ++b) {
      const bool computed = !s.causal || b * tile_kv <= std::min(s.q_len, (a + 1) * tile_q) - 1 + (s.kv_len - s.q_len);
      if (computed) all.push_back({a, b});
    }
  }
  if (static_cast<int>(all.size()) <= kSampleEveryBlockUpTo) {
    opt.sample_tiles = all;
  } else {
    std::set<std::pair<int, int>> picked;
    for (int a = 0; a < qt; ++a) {
      // The block holding the q-tile's last row's diagonal key (bottom-right causal).
      const int last_row = std::min(s.q_len, (a + 1) * tile_q) - 1;
      const int diag = std::clamp((last_row + s.kv_len - s.q_len) / tile_kv, 0, kt - 1);
      picked.insert({a, 0});
      picked.insert({a, diag});
      if (diag > 0) picked.insert({a, diag - 1});
    }
    for (const auto& [a, b] : picked) opt.sample_tiles.push_back({a, b});
  }
  return opt;
}

double shape_flops(const SyntheticShape& s) {
  return 4.0 * s.batch * s.q_heads * double{1} * s.q_len * s.kv_len * s.head_dim * (s.causal ? 0.5 : 1.0);
}

SyntheticShape cap_shape_for_cpu(SyntheticShape s, double max_flops) {
  if (max_flops <= 0) return s;
  while (shape_flops(s) > max_flops && s.q_len > kTile) {
    s.q_len = std::max(kTile, s.q_len / 2);
    s.kv_len = std::max(s.q_len, s.kv_len / 2);
  }
  while (shape_flops(s) > max_flops && s.batch > 1) s.batch /= 2;
  // Heads in whole GQA groups, so the ratio stays what was asked.
  const int group = std::max(1, s.q_heads / std::max(s.kv_heads, 1));
  while (shape_flops(s) > max_flops && s.kv_heads > 1) {
    s.kv_heads = std::max(1, s.kv_heads / 2);
    s.q_heads = s.kv_heads * group;
  }
  return s;
}

CaptureOutcome capture_prefill(const CaptureRequest& rq) {
  CaptureOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  SyntheticProblem pr = make_synthetic_problem(rq.shape, rq.seed);
  const TraceOptions opt = dashboard_trace_options(rq.shape, rq.head);
  std::string gpu_note;
  if (rq.try_gpu && cuda_available()) {
    out.status = capture_on_gpu(pr, rq, &out.trace);
    if (out.status.ok()) {
      out.note = "GPU probes";
    } else if (out.status.code() == StatusCode::kUnsupported) {
      gpu_note = "GPU probes unavailable (" + out.status.message() + "): CPU capture of the same inputs";
    } else {
      out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return out;  // a real GPU failure is reported, not papered over
    }
  }
  if (out.note.empty()) {
    std::string reduced;
    const SyntheticShape cpu_shape = cap_shape_for_cpu(rq.shape, rq.cpu_max_flops);
    if (cpu_shape.q_len != rq.shape.q_len || cpu_shape.q_heads != rq.shape.q_heads ||
        cpu_shape.batch != rq.shape.batch) {
      pr = make_synthetic_problem(cpu_shape, rq.seed);
      reduced = ", reduced to " + shape_label(cpu_shape);
    }
    const TraceOptions cpu_opt = reduced.empty() ? opt : dashboard_trace_options(cpu_shape, rq.head);
    PrefillParams p = pr.params();
    out.status = capture_cpu_prefill_trace(p, cpu_opt, &out.trace);
    out.note = (!gpu_note.empty() ? gpu_note : rq.try_gpu ? "CPU capture (no CUDA device)" : "CPU capture") + reduced;
  }
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace flashscope::app
