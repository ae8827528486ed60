// Independent attention math over an AttentionProblem's inputs, and the
// problem edits the prefill suites share (CPU and GPU alike):
//   key_visible            the mask (causal, window) from the API's words
//   poison_invisible_keys  NaN into every K/V row no query may read
//   naive_attention        softmax(cap(scale·QKᵀ) + mask)·V, whole problem, double
//   lse_index              (b, h, i) in the problem's dense lse layout
// None of it shares code with the library beyond reading the inputs through
// the fixture.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/attention_problem.hpp"

namespace flashscope::testing {

// Whether query i of a sequence of lq queries over lk keys sees key j,
// written from the API's words (attention.hpp), apart from every library path.
inline bool key_visible(const AttentionShape& s, int lq, int lk, int i, int j) {
  const int64_t pos = int64_t(i) + (lk - lq);
  if (s.causal && j > pos) return false;
  if (s.window_left >= 0 && j < pos - s.window_left) return false;
  if (s.window_right >= 0 && j > pos + s.window_right) return false;
  return true;
}

// K and V rows no query of their sequence sees become NaN: a kernel that
// lets one reach a row's sums (a skipped tile read and not masked, a P of 0
// times a NaN V) fails. Returns how many keys were poisoned.
inline int poison_invisible_keys(AttentionProblem& prob) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const AttentionShape& s = prob.shape();
  int poisoned = 0;
  for (int b = 0; b < s.batch; ++b) {
    const int lq = prob.seq_q_len(b), lk = prob.seq_kv_len(b);
    for (int j = 0; j < lk; ++j) {
      bool seen = false;
      for (int i = 0; i < lq && !seen; ++i) seen = key_visible(s, lq, lk, i, j);
      if (seen) continue;
      ++poisoned;
      for (int g = 0; g < s.kv_heads; ++g)
        for (int d = 0; d < s.head_dim; ++d) {
          prob.set(Operand::kK, b, j, g, d, nan);
          prob.set(Operand::kV, b, j, g, d, nan);
        }
    }
  }
  return poisoned;
}

// Dense [rows, q_heads, head_dim] output and lse, in double.
struct NaiveResult {
  std::vector<double> o, lse;
};

// softmax(cap(scale · Q Kᵀ) + mask) V the obvious way: the whole score
// matrix of one (sequence, head), masked entries -inf, std::exp. A row that
// sees no key is zero with lse -inf.
inline NaiveResult naive_attention(const AttentionProblem& prob) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const AttentionShape& s = prob.shape();
  const int dim = s.head_dim;
  const double scale = s.softmax_scale != 0.0f ? s.softmax_scale : 1.0 / std::sqrt(double(dim));
  NaiveResult r;
  r.o.assign(size_t(prob.out_rows() * s.q_heads * dim), 0.0);
  r.lse.assign(size_t(prob.lse_count()), 0.0);
  int64_t row0 = 0;
  for (int b = 0; b < s.batch; ++b) {
    const int lq = prob.seq_q_len(b), lk = prob.seq_kv_len(b);
    for (int h = 0; h < s.q_heads; ++h) {
      const int g = h / (s.q_heads / s.kv_heads);
      for (int i = 0; i < lq; ++i) {
        std::vector<double> row(size_t(lk), kNegInf);
        double mx = kNegInf;
        for (int j = 0; j < lk; ++j) {
          if (!key_visible(s, lq, lk, i, j)) continue;
          double dot = 0;
          for (int d = 0; d < dim; ++d) dot += double(prob.get(Operand::kQ, b, i, h, d)) * prob.get(Operand::kK, b, j, g, d);
          double x = scale * dot;
          if (s.softcap > 0) x = s.softcap * std::tanh(x / s.softcap);
          row[size_t(j)] = x;
          mx = std::max(mx, x);
        }
        const int64_t lse_at = s.varlen ? h * prob.out_rows() + row0 + i : (int64_t(b) * s.q_heads + h) * s.q_len + i;
        double* o = &r.o[size_t(((row0 + i) * s.q_heads + h) * dim)];
        if (mx == kNegInf) {
          r.lse[size_t(lse_at)] = kNegInf;
          continue;
        }
        double sum = 0;
        for (int j = 0; j < lk; ++j) sum += std::exp(row[size_t(j)] - mx);
        for (int j = 0; j < lk; ++j) {
          if (row[size_t(j)] == kNegInf) continue;
          const double w = std::exp(row[size_t(j)] - mx) / sum;
          for (int d = 0; d < dim; ++d) o[d] += w * prob.get(Operand::kV, b, j, g, d);
        }
        r.lse[size_t(lse_at)] = mx + std::log(sum);
      }
    }
    row0 += s.varlen ? lq : s.q_len;
  }
  return r;
}

// Index of (b, h, i) in the problem's dense lse layout.
inline int64_t lse_index(const AttentionProblem& prob, int b, int h, int i) {
  const AttentionShape& sh = prob.shape();
  if (!sh.varlen) return (int64_t(b) * sh.q_heads + h) * sh.q_len + i;
  return h * prob.out_rows() + prob.cu_seqlens_q()[size_t(b)] + i;
}

// |got − want| within rel·|want| + abs.
inline bool near_rel(double got, double want, double rel, double abs = 0) {
  return std::fabs(got - want) <= rel * std::fabs(want) + abs;
}

}  // namespace flashscope::testing
