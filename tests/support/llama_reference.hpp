// A naive float64 llama forward pass for the engine tests: every weight
// dequantized from the GGUF (the same values the engine reads), plain loops,
// double everywhere, RoPE on consecutive pairs. Optionally it rounds what a
// bf16 engine rounds (weights, GEMM inputs, q/k/v, attention probabilities
// and output), which is how the CUDA tests' bounds were sized: the rounding
// model against the exact reference predicts the error the CUDA backend
// should show.
//
// (tests/test_model_cpu.cpp has its own copy of the exact path; this one adds
// the rounding model and is shared by the CUDA tests.)
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "flashscope/model.hpp"

namespace flashscope::testing {

struct RefLayer {
  std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, gate, up, down;
};

struct RefModel {
  ModelConfig c;
  std::vector<float> embd, output_norm, output;
  std::vector<RefLayer> layers;
};

// What to round to bf16 (round to nearest even), as the CUDA backend does.
struct RefRounding {
  bool weights = false;      // every matrix (not the norms)
  bool activations = false;  // GEMM inputs: normed x, attention output, SwiGLU output
  bool qkv = false;          // q, k, v after RoPE (the bf16 cache and attention inputs)
  bool probs = false;        // softmax probabilities before P·V (FA2 kernels multiply bf16 P)
  static RefRounding bf16_engine() { return {true, true, true, true}; }
};

inline double round_bf16(double v) { return bf16_to_float(float_to_bf16(static_cast<float>(v))); }

inline std::vector<float> ref_dequant(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.find_tensor(name);
  REQUIRE_MESSAGE(t != nullptr, name);
  std::vector<float> out(static_cast<size_t>(t->n_elements()));
  REQUIRE(dequantize_rows(*t, 0, t->n_rows(), out.data()).ok());
  return out;
}

inline RefModel load_reference(const std::vector<uint8_t>& bytes, bool round_weights = false) {
  auto file = GgufFile::from_buffer(bytes);
  REQUIRE(file.ok());
  const GgufFile& f = file.value();
  RefModel r;
  auto c = ModelConfig::from_gguf(f);
  REQUIRE(c.ok());
  r.c = c.value();
  auto matrix = [&](const std::string& name) {
    std::vector<float> m = ref_dequant(f, name);
    if (round_weights)
      for (float& v : m) v = static_cast<float>(round_bf16(v));
    return m;
  };
  r.embd = matrix("token_embd.weight");
  r.output_norm = ref_dequant(f, "output_norm.weight");
  r.output = r.c.tied_embeddings ? r.embd : matrix("output.weight");
  for (int l = 0; l < r.c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    RefLayer L;
    L.attn_norm = ref_dequant(f, p + "attn_norm.weight");
    L.wq = matrix(p + "attn_q.weight");
    L.wk = matrix(p + "attn_k.weight");
    L.wv = matrix(p + "attn_v.weight");
    L.wo = matrix(p + "attn_output.weight");
    L.ffn_norm = ref_dequant(f, p + "ffn_norm.weight");
    L.gate = matrix(p + "ffn_gate.weight");
    L.up = matrix(p + "ffn_up.weight");
    L.down = matrix(p + "ffn_down.weight");
    r.layers.push_back(std::move(L));
  }
  return r;
}

// y[r] = Σ_c W[r][c] x[c], W row-major [rows, cols] (a GGUF matrix's layout).
inline std::vector<double> ref_matvec(const std::vector<float>& w, const std::vector<double>& x, size_t rows) {
  const size_t cols = x.size();
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) y[r] += static_cast<double>(w[r * cols + c]) * x[c];
  return y;
}

inline std::vector<double> ref_rmsnorm(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

// GGUF llama RoPE: rotate (v[2i], v[2i+1]) by pos · base^(−2i/rope_dim).
inline void ref_rope(std::vector<double>& v, int heads, int head_dim, int rope_dim, double base, int pos) {
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < rope_dim / 2; ++i) {
      const double theta = pos * std::pow(base, -2.0 * i / rope_dim);
      double& a = v[static_cast<size_t>(h * head_dim + 2 * i)];
      double& b = v[static_cast<size_t>(h * head_dim + 2 * i + 1)];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(theta) - b0 * std::sin(theta);
      b = a0 * std::sin(theta) + b0 * std::cos(theta);
    }
  }
}

inline void ref_round_all(std::vector<double>& v, bool on) {
  if (on)
    for (double& x : v) x = round_bf16(x);
}

// Logits of every token of `ids` (positions 0..n-1), [n][vocab]. With
// rounding.weights, pass a model loaded with round_weights = true.
inline std::vector<std::vector<double>> reference_forward(const RefModel& m, const std::vector<int32_t>& ids,
                                                         RefRounding rounding = {}) {
  const ModelConfig& c = m.c;
  const size_t n = ids.size(), H = static_cast<size_t>(c.hidden), D = static_cast<size_t>(c.head_dim);
  const size_t qd = static_cast<size_t>(c.n_heads) * D, kvd = static_cast<size_t>(c.n_kv_heads) * D;
  std::vector<std::vector<double>> x(n, std::vector<double>(H));
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < H; ++i) x[t][i] = m.embd[static_cast<size_t>(ids[t]) * H + i];
  for (const RefLayer& L : m.layers) {
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      auto xn = ref_rmsnorm(x[t], L.attn_norm, c.rms_eps);
      ref_round_all(xn, rounding.activations);
      q[t] = ref_matvec(L.wq, xn, qd);
      k[t] = ref_matvec(L.wk, xn, kvd);
      v[t] = ref_matvec(L.wv, xn, kvd);
      ref_rope(q[t], c.n_heads, c.head_dim, c.rope_dim, c.rope_base, static_cast<int>(t));
      ref_rope(k[t], c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_base, static_cast<int>(t));
      ref_round_all(q[t], rounding.qkv);
      ref_round_all(k[t], rounding.qkv);
      ref_round_all(v[t], rounding.qkv);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> o(qd, 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const size_t kh = static_cast<size_t>(h / (c.n_heads / c.n_kv_heads));
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (size_t d = 0; d < D; ++d) dot += q[t][h * D + d] * k[j][kh * D + d];
          s[j] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j) {
          const double p = rounding.probs ? round_bf16(s[j]) : s[j];  // unnormalized, as the kernels hold P
          for (size_t d = 0; d < D; ++d) o[h * D + d] += p / sum * v[j][kh * D + d];
        }
      }
      ref_round_all(o, rounding.activations);
      const auto proj = ref_matvec(L.wo, o, H);
      for (size_t i = 0; i < H; ++i) x[t][i] += proj[i];
      auto xn = ref_rmsnorm(x[t], L.ffn_norm, c.rms_eps);
      ref_round_all(xn, rounding.activations);
      auto g = ref_matvec(L.gate, xn, static_cast<size_t>(c.ffn));
      const auto u = ref_matvec(L.up, xn, static_cast<size_t>(c.ffn));
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      ref_round_all(g, rounding.activations);
      const auto down = ref_matvec(L.down, g, H);
      for (size_t i = 0; i < H; ++i) x[t][i] += down[i];
    }
  }
  std::vector<std::vector<double>> logits(n);
  for (size_t t = 0; t < n; ++t) {
    auto xn = ref_rmsnorm(x[t], m.output_norm, c.rms_eps);
    ref_round_all(xn, rounding.activations);
    logits[t] = ref_matvec(m.output, xn, static_cast<size_t>(c.vocab));
  }
  return logits;
}

struct LogitError {
  double max_abs = 0;  // max |engine − reference| over all positions and ids
  double rms_abs = 0;  // RMS of engine − reference
  double ref_rms = 0;  // RMS of the reference logits
  int argmax_mismatches = 0;
  double rel() const { return max_abs / ref_rms; }
  double rms_rel() const { return rms_abs / ref_rms; }
};

// got [positions, vocab] token-major against ref [positions][vocab]. NaN in
// got counts as an infinite error.
inline LogitError compare_logits(const std::vector<float>& got, const std::vector<std::vector<double>>& ref) {
  LogitError e;
  double ss = 0, se = 0;
  size_t count = 0;
  for (size_t t = 0; t < ref.size(); ++t) {
    const size_t V = ref[t].size();
    size_t best_got = 0, best_ref = 0;
    for (size_t i = 0; i < V; ++i) {
      const double g = got[t * V + i], r = ref[t][i];
      const double err = std::isfinite(g) ? std::fabs(g - r) : INFINITY;
      e.max_abs = std::max(e.max_abs, err);
      se += err * err;
      ss += r * r;
      ++count;
      if (g > got[t * V + best_got]) best_got = i;
      if (r > ref[t][best_ref]) best_ref = i;
    }
    if (best_got != best_ref) ++e.argmax_mismatches;
  }
  e.ref_rms = std::sqrt(ss / static_cast<double>(count));
  e.rms_abs = std::sqrt(se / static_cast<double>(count));
  return e;
}

// The same between two engine outputs of equal size (b as the reference).
inline LogitError compare_logits(const std::vector<float>& a, const std::vector<float>& b, size_t vocab) {
  std::vector<std::vector<double>> ref(b.size() / vocab, std::vector<double>(vocab));
  for (size_t i = 0; i < b.size(); ++i) ref[i / vocab][i % vocab] = b[i];
  return compare_logits(a, ref);
}

}  // namespace flashscope::testing
