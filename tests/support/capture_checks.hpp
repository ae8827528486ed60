// What every capture_attention result must satisfy, whatever the backend
// (test_attention_capture.cpp on the CPU, test_attention_capture_gpu.cpp on
// CUDA), and the turn the suites run to get one.
//
// Tolerances:
//   probabilities  each sampled p_ij against exp(s_ij − lse_i) recomputed in
//                  double from the captured bf16 Q and K, with lse_i also
//                  from them in double: relative 1e-4 (float logits over
//                  head_dim products and a float l, as test_trace.cpp)
//   lse            the trace's m + ln l of each followed row's last tile is
//                  the kernel's lse to float rounding (1e-5 relative), and the
//                  kernel's lse is the double lse within 1e-4 relative
//   summary        first-token, previous-token and window masses against the
//                  same double recomputation: 1e-6 absolute
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope/attention_capture.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/half.hpp"
#include "flashscope/trace.hpp"
#include "support/synthetic_llama.hpp"

namespace flashscope::testing {

namespace fs = flashscope;

inline fs::Model synthetic(const SyntheticLlama& s, const fs::ModelOptions& options = {}) {
  auto file = fs::GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto model = fs::Model::from_gguf(std::move(file).value(), options);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

inline std::vector<int32_t> prompt_ids(const fs::Model& m, int n) {
  std::vector<int32_t> ids;
  const std::string text = "the quick brown fox jumps over the lazy dog, and then it rests; ";
  while (static_cast<int>(ids.size()) < n) {
    for (int32_t id : m.tokenizer().encode(text, false)) ids.push_back(id);
  }
  ids.resize(static_cast<size_t>(n));
  return ids;
}

inline fs::GenerateParams greedy(int tokens) {
  fs::GenerateParams g;
  g.max_tokens = tokens;
  g.sampling.temperature = 0.0f;
  g.stop_tokens = {-5};  // never sampled: the reply runs to max_tokens
  return g;
}

// Row i's keys (position first + i; window W: the W keys ending there).
struct Keys {
  int lo, hi;  // [lo, hi]
};
inline Keys keys_of(const fs::AttentionCapture& cap, int i) {
  const int pos = cap.first + i;
  return {cap.window > 0 ? std::max(0, pos - cap.window + 1) : 0, pos};
}

inline double logit(const fs::AttentionCapture& cap, const fs::HeadCapture& h, int i, int j, int dim) {
  double dot = 0;
  for (int d = 0; d < dim; ++d) dot += double{h.q[size_t(i * dim + d)]} * double{h.k[size_t(j * dim + d)]};
  return double{cap.softmax_scale} * dot;
}

inline double lse64(const fs::AttentionCapture& cap, const fs::HeadCapture& h, int i, int dim) {
  const Keys k = keys_of(cap, i);
  double mx = -INFINITY;
  for (int j = k.lo; j <= k.hi; ++j) mx = std::max(mx, logit(cap, h, i, j, dim));
  double sum = 0;
  for (int j = k.lo; j <= k.hi; ++j) sum += std::exp(logit(cap, h, i, j, dim) - mx);
  return mx + std::log(sum);
}

// Everything test-side that a capture must satisfy, for any model.
inline void check_capture(const fs::AttentionCapture& cap, const fs::Session& session, int dim, int model_window) {
  const std::vector<int32_t> ids = session.tokens();
  REQUIRE(cap.keys <= static_cast<int>(ids.size()));
  CHECK(cap.rows == cap.keys - cap.first);
  for (const fs::HeadCapture& h : cap.heads) {
    CAPTURE(h.head);
    const fs::Trace& t = h.trace;
    CHECK(t.meta.traced_head == h.head);
    CHECK(t.meta.q_len == cap.rows);
    CHECK(t.meta.kv_len == cap.keys);
    CHECK(t.meta.causal);
    CHECK(t.tokens.layer == cap.layer);
    REQUIRE(t.tokens.keys.size() == size_t(cap.keys));
    REQUIRE(t.tokens.row_keys.size() == size_t(cap.rows));
    for (int j = 0; j < cap.keys; ++j) {
      CHECK(t.tokens.keys[size_t(j)].id == ids[size_t(j)]);
      CHECK(t.tokens.keys[size_t(j)].text == session.model().tokenizer().token_text(ids[size_t(j)]));
    }
    for (int i = 0; i < cap.rows; ++i) CHECK(t.tokens.row_keys[size_t(i)] == uint32_t(cap.first + i));
    CHECK(fs::validate_trace(t).ok());

    // Sampled probabilities against double math from the captured operands.
    REQUIRE(!t.prob_samples.empty());
    std::vector<double> row_lse(size_t(cap.rows), NAN);
    size_t checked = 0;
    for (const fs::ProbSampleRecord& r : t.prob_samples) {
      const int i = int(r.row), j = int(r.key);
      const Keys k = keys_of(cap, i);
      const bool visible = j >= k.lo && j <= k.hi;
      CHECK((r.flags == fs::ProbSampleRecord::kMasked) == !visible);
      if (!visible || (i % 7 != 0 && i != cap.rows - 1)) continue;  // a few rows, always the last
      double& l = row_lse[size_t(i)];
      if (std::isnan(l)) l = lse64(cap, h, i, dim);
      const double p = std::exp(logit(cap, h, i, j, dim) - l);
      CHECK(double(r.prob) == doctest::Approx(p).epsilon(1e-4));
      ++checked;
    }
    CHECK(checked > 0);

    // The trace's softmax state ends at the kernel's lse.
    std::vector<const fs::SoftmaxStateRecord*> last(size_t(cap.rows), nullptr);
    for (const fs::SoftmaxStateRecord& r : t.softmax)
      if (last[r.row] == nullptr || last[r.row]->kv_tile < r.kv_tile) last[r.row] = &r;
    for (int i = 0; i < cap.rows; ++i) {
      REQUIRE(last[size_t(i)] != nullptr);
      const double lse = double(last[size_t(i)]->m) + std::log(double(last[size_t(i)]->l));
      CHECK(lse == doctest::Approx(h.lse[size_t(i)]).epsilon(1e-5));
      CHECK(double(h.lse[size_t(i)]) == doctest::Approx(lse64(cap, h, i, dim)).epsilon(1e-4));
    }

    // The summary against the same double math.
    double first = 0, prev = 0, win = 0;
    int with_prev = 0;
    for (int i = 0; i < cap.rows; ++i) {
      const Keys k = keys_of(cap, i);
      const double l = lse64(cap, h, i, dim);
      for (int j = k.lo; j <= k.hi; ++j) {
        const double p = std::exp(logit(cap, h, i, j, dim) - l);
        if (j == 0) first += p;
        if (j == k.hi - 1) prev += p;
        if (model_window > 0 && j > k.hi - model_window) win += p;
      }
      with_prev += k.hi - 1 >= k.lo;
    }
    CHECK(h.summary.rows == cap.rows);
    CHECK(std::abs(h.summary.first_token_mass - first / cap.rows) < 1e-6);
    CHECK(std::abs(h.summary.previous_token_mass - prev / with_prev) < 1e-6);
    if (model_window > 0) {
      CHECK(std::abs(h.summary.window_mass - win / cap.rows) < 1e-6);
    } else {
      CHECK(h.summary.window_mass == -1);
    }
    CHECK(h.summary.entropy >= 0);
    CHECK(h.summary.entropy <= std::log(double(cap.keys)) + 1e-9);
  }
}

// The lse the engine's decode step computed for row i: prefill() of that row
// alone (q_len 1) over its keys, as forward_cpu's attend() runs it.
inline float decode_step_lse(const fs::AttentionCapture& cap, const fs::HeadCapture& h, int i, int dim) {
  const int keys = cap.first + i + 1;
  const size_t d_len = static_cast<size_t>(dim), k_len = static_cast<size_t>(keys) * d_len;
  std::vector<uint16_t> q(d_len), k(k_len), v(k_len, 0), o(d_len);
  for (int d = 0; d < dim; ++d) q[size_t(d)] = fs::float_to_bf16(h.q[size_t(i * dim + d)]);
  for (size_t e = 0; e < k.size(); ++e) k[e] = fs::float_to_bf16(h.k[e]);
  float lse = 0;
  fs::PrefillParams p;
  p.q = fs::bshd(q.data(), 1, 1, dim);
  p.k = fs::bshd(k.data(), keys, 1, dim);
  p.v = fs::bshd(v.data(), keys, 1, dim);
  p.o = fs::bshd(o.data(), 1, 1, dim);
  p.lse = &lse;
  p.device = fs::Device::kCpu;
  p.dtype = fs::DType::kBF16;
  p.batch = p.q_heads = p.kv_heads = 1;
  p.q_len = 1;
  p.kv_len = keys;
  p.head_dim = dim;
  p.softmax_scale = cap.softmax_scale;
  p.causal = true;
  if (cap.window > 0) p.window_left = cap.window - 1;
  const fs::Status s = fs::prefill(p);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return lse;
}

}  // namespace flashscope::testing
