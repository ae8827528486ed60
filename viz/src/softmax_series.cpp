#include "viz/softmax_series.hpp"

#include <algorithm>
#include <cmath>

namespace flashscope::viz {

namespace {

bool follows(const TraceMeta& m, uint32_t batch, uint32_t head) {
  return m.traced_head < 0 || (static_cast<int>(batch) == m.traced_batch && static_cast<int>(head) == m.traced_head);
}

}  // namespace

std::vector<uint32_t> softmax_rows(const Trace& t) {
  std::vector<uint32_t> rows;
  for (const SoftmaxStateRecord& r : t.softmax) {
    if (follows(t.meta, r.batch, r.head)) rows.push_back(r.row);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

SoftmaxSeries build_softmax_series(const Trace& t, uint32_t row) {
  SoftmaxSeries s;
  s.row = row;
  for (const SoftmaxStateRecord& r : t.softmax) {
    if (r.row != row || !follows(t.meta, r.batch, r.head)) continue;
    SoftmaxStep st;
    st.kv_tile = static_cast<int>(r.kv_tile);
    st.m = r.m;
    st.l = r.l;
    st.rescale = r.rescale;
    st.tile_max = r.tile_max;
    st.tile_sum = r.tile_sum;
    st.keys = r.keys;
    s.steps.push_back(st);
  }
  std::sort(s.steps.begin(), s.steps.end(),
            [](const SoftmaxStep& a, const SoftmaxStep& b) { return a.kv_tile < b.kv_tile; });
  if (s.steps.empty()) return s;

  s.m_final = s.steps.back().m;
  s.l_final = s.steps.back().l;
  s.valid = s.l_final > 0.0f && std::isfinite(s.m_final);
  if (!s.valid) return s;
  s.inv_l = 1.0 / s.l_final;
  s.lse = double{s.m_final} + std::log(double{s.l_final});

  bool seen_key = false;
  double l_prev = 0;
  for (SoftmaxStep& st : s.steps) {
    if (st.keys > 0) {
      // exp(m_old − m) < 1 means the max rose; the first visible tile's rescale is 0 (m_old = −inf).
      st.max_rose = seen_key && st.rescale < 1.0f;
      s.max_rises += st.max_rose;
      seen_key = true;
      st.share = double{st.tile_sum} * std::exp(double{st.m} - s.m_final) / s.l_final;
    }
    const double expect = double{st.rescale} * l_prev + st.tile_sum;
    if (st.l > 0) s.max_recurrence_error = std::max(s.max_recurrence_error, std::fabs(st.l - expect) / st.l);
    l_prev = st.l;
  }
  return s;
}

}  // namespace flashscope::viz
