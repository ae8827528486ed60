// Throughput against the speed of light (SOL), as the dashboard states it:
//   prefill  TFLOPS = flops / elapsed, flops = 4·B·Hq·Lq·Lk·D (halved when
//            causal: prefill_flops(), the count PyTorch and FlashAttention use)
//   decode   GB/s = bytes read / elapsed; a decode step reads every weight
//            once and the K and V of every cached token of every layer
//   % of SOL = achieved / SOL, only where the SOL is known (a CUDA device;
//            the CPU has none, and the app says so instead of inventing one)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashscope/numeric.hpp"
#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

// The median of timed runs (mean of the middle two when even; 0 for none):
// the library's (flashscope/numeric.hpp).
using flashscope::median;

struct Rate {
  double value = 0;       // TFLOPS or GB/s
  double pct_of_sol = 0;  // valid when has_sol
  bool has_sol = false;
};

// flops over ms → TFLOPS, and its share of sol_tflops (0: unknown).
Rate prefill_rate(double flops, double ms, double sol_tflops);
// bytes over ms → GB/s (10^9 bytes), and its share of sol_gbps (0: unknown).
Rate bandwidth_rate(double bytes, double ms, double sol_gbps);

// Bytes one decode step reads: the weights once, K and V of context_tokens
// tokens (kv_bytes_per_token covers all layers).
double decode_step_bytes(double weight_bytes, double kv_bytes_per_token, double context_tokens);

// K and V bytes a decode trace's attention reads: B·Hkv·Lk·D·2·sizeof(dtype).
double trace_kv_bytes(const TraceMeta& m);

// What a trace's run achieved: TFLOPS for prefill, GB/s of K/V for decode,
// against the SOL recorded in the trace. value 0 when elapsed is unknown.
Rate trace_rate(const TraceMeta& m);

// The last `capacity` values of a live series, oldest first; the caller owns it.
struct History {
  size_t capacity = 120;
  std::vector<float> values;

  void push(float v);
  float last() const { return values.empty() ? 0.0f : values.back(); }
  float max() const;
  float mean() const;
  // The median of the newest n values: the lab's steady figure.
  float recent_median(size_t n) const;
};

}  // namespace flashscope::viz
