// summarize_head: p_ij = exp(s_ij − lse_i) with s_ij = scale · q_i·k_j in
// double, over the keys row i saw. The kernel's lse normalises the row, so
// the summary describes the distribution the kernel computed (the sum of a
// row's p is 1 to the lse's float rounding).
#include <algorithm>
#include <cmath>

#include "engine/head_summary.hpp"

namespace flashscope::model {

HeadSummary summarize_head(const HeadOperands& h) {
  HeadSummary s;
  double entropy = 0, first = 0, previous = 0, self = 0, window = 0;
  int rows = 0, with_previous = 0;
  for (int i = 0; i < h.rows; ++i) {
    if (!std::isfinite(h.lse[i])) continue;  // a row that saw no key
    const int pos = h.first + i;
    const int lo = h.window > 0 ? std::max(0, pos - h.window + 1) : 0;
    const int win_lo = std::max(0, pos - h.model_window + 1);
    const float* q = h.q + static_cast<int64_t>(i) * h.dim;
    double row_entropy = 0;
    for (int j = lo; j <= pos && j < h.keys; ++j) {
      const float* k = h.k + static_cast<int64_t>(j) * h.dim;
      double dot = 0;
      for (int d = 0; d < h.dim; ++d) dot += double{q[d]} * double{k[d]};
      const double logit = double{h.scale} * dot;
      const double p = std::exp(logit - double{h.lse[i]});
      if (p > 0) row_entropy -= p * (logit - double{h.lse[i]});
      if (j == 0) first += p;
      if (j == pos - 1) previous += p;
      if (j == pos) self += p;
      if (h.model_window > 0 && j >= win_lo) window += p;
    }
    entropy += row_entropy;
    with_previous += pos >= 1 && lo <= pos - 1;
    ++rows;
  }
  s.rows = rows;
  if (rows > 0) {
    s.entropy = entropy / rows;
    s.first_token_mass = first / rows;
    s.self_mass = self / rows;
    if (h.model_window > 0) s.window_mass = window / rows;
  }
  if (with_previous > 0) s.previous_token_mass = previous / with_previous;
  return s;
}

}  // namespace flashscope::model
