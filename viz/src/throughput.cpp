#include "viz/throughput.hpp"

#include <algorithm>

namespace flashscope::viz {

Rate prefill_rate(double flops, double ms, double sol_tflops) {
  Rate r;
  if (ms <= 0) return r;
  r.value = flops / (ms * 1e-3) / 1e12;
  r.has_sol = sol_tflops > 0;
  if (r.has_sol) r.pct_of_sol = 100.0 * r.value / sol_tflops;
  return r;
}

Rate bandwidth_rate(double bytes, double ms, double sol_gbps) {
  Rate r;
  if (ms <= 0) return r;
  r.value = bytes / (ms * 1e-3) / 1e9;
  r.has_sol = sol_gbps > 0;
  if (r.has_sol) r.pct_of_sol = 100.0 * r.value / sol_gbps;
  return r;
}

double decode_step_bytes(double weight_bytes, double kv_bytes_per_token, double context_tokens) {
  return weight_bytes + kv_bytes_per_token * context_tokens;
}

double trace_kv_bytes(const TraceMeta& m) {
  return 2.0 * m.batch * m.kv_heads * static_cast<double>(m.kv_len) * m.head_dim * dtype_size(m.dtype);
}

Rate trace_rate(const TraceMeta& m) {
  if (m.kind == TraceKind::kDecode) return bandwidth_rate(trace_kv_bytes(m), m.elapsed_ms, m.sol_dram_gbps);
  return prefill_rate(m.flops, m.elapsed_ms, m.sol_tflops);
}

void History::push(float v) {
  values.push_back(v);
  if (values.size() > capacity)
    values.erase(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() - capacity));
}

float History::max() const { return values.empty() ? 0.0f : *std::max_element(values.begin(), values.end()); }

float History::mean() const {
  if (values.empty()) return 0.0f;
  double s = 0;
  for (const float v : values) s += v;
  return static_cast<float>(s / values.size());
}

float History::recent_median(size_t n) const {
  if (values.empty() || n == 0) return 0.0f;
  const auto newest = values.end() - static_cast<std::ptrdiff_t>(std::min(n, values.size()));
  return median(std::vector<float>(newest, values.end()));
}

}  // namespace flashscope::viz
