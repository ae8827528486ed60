#include "viz/occupancy.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace flashscope::viz {

namespace {

// Adds the overlap of [a, b) with each bin, in units of one bin, to out.
void add_interval(std::vector<float>& out, uint64_t t0, double bin_ticks, uint64_t a, uint64_t b) {
  const double lo = static_cast<double>(a - t0) / bin_ticks, hi = static_cast<double>(b - t0) / bin_ticks;
  const int n = static_cast<int>(out.size());
  for (int i = std::max(0, static_cast<int>(lo)); i < n && i < hi; ++i) {
    const double overlap = std::min(hi, i + 1.0) - std::max(lo, static_cast<double>(i));
    if (overlap > 0) out[static_cast<size_t>(i)] += static_cast<float>(overlap);
  }
}

}  // namespace

Occupancy build_occupancy(const Trace& t, int bins, double tail_share) {
  const TraceMeta& m = t.meta;
  Occupancy o;
  o.clock_aligned = m.timer_unit == TimerUnit::kNanoseconds;
  o.tail_share = tail_share;
  if (m.sm_count > 0) {
    for (int s = 0; s < m.sm_count; ++s) o.sm_ids.push_back(static_cast<uint32_t>(s));
  }
  for (const CtaRecord& c : t.ctas) {
    if (m.sm_count <= 0 || c.sm >= static_cast<uint32_t>(m.sm_count)) o.sm_ids.push_back(c.sm);
  }
  std::sort(o.sm_ids.begin(), o.sm_ids.end());
  o.sm_ids.erase(std::unique(o.sm_ids.begin(), o.sm_ids.end()), o.sm_ids.end());
  if (t.ctas.empty()) return o;

  o.t0 = t.ctas[0].start;
  o.t1 = t.ctas[0].end;
  for (const CtaRecord& c : t.ctas) {
    o.t0 = std::min(o.t0, c.start);
    o.t1 = std::max(o.t1, c.end);
  }

  // Per SM: its CTAs by start time, packed into slots; the union of their intervals.
  std::map<uint32_t, std::vector<uint32_t>> by_sm;
  for (uint32_t i = 0; i < t.ctas.size(); ++i) by_sm[t.ctas[i].sm].push_back(i);
  const double span = static_cast<double>(o.t1 - o.t0);
  const double bin_ticks = span > 0 && bins > 0 ? span / bins : 1.0;
  o.bins = span > 0 ? std::max(bins, 0) : 0;
  o.busy_sms.assign(static_cast<size_t>(o.bins), 0.0f);
  o.resident_ctas.assign(static_cast<size_t>(o.bins), 0.0f);
  double busy_ticks = 0;
  std::vector<uint64_t> finish;
  for (auto& [sm, idx] : by_sm) {
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
      return t.ctas[a].start != t.ctas[b].start ? t.ctas[a].start < t.ctas[b].start : a < b;
    });
    const int row = static_cast<int>(std::lower_bound(o.sm_ids.begin(), o.sm_ids.end(), sm) - o.sm_ids.begin());
    std::vector<uint64_t> slot_end;
    uint64_t run_a = 0, run_b = 0, last = 0;
    bool open = false;
    for (const uint32_t i : idx) {
      const CtaRecord& c = t.ctas[i];
      size_t slot = 0;
      while (slot < slot_end.size() && slot_end[slot] > c.start) ++slot;
      if (slot == slot_end.size()) slot_end.push_back(0);
      slot_end[slot] = c.end;
      o.bars.push_back({i, row, static_cast<int>(slot), c.start, c.end});
      if (o.bins > 0) add_interval(o.resident_ctas, o.t0, bin_ticks, c.start, c.end);
      last = std::max(last, c.end);
      // Union of the SM's busy intervals (sorted by start): merge while they touch.
      if (open && c.start <= run_b) {
        run_b = std::max(run_b, c.end);
      } else {
        if (open) {
          busy_ticks += static_cast<double>(run_b - run_a);
          if (o.bins > 0) add_interval(o.busy_sms, o.t0, bin_ticks, run_a, run_b);
        }
        run_a = c.start;
        run_b = c.end;
        open = true;
      }
    }
    if (open) {
      busy_ticks += static_cast<double>(run_b - run_a);
      if (o.bins > 0) add_interval(o.busy_sms, o.t0, bin_ticks, run_a, run_b);
    }
    o.max_slots = std::max(o.max_slots, static_cast<int>(slot_end.size()));
    finish.push_back(last);
  }
  o.active_sms = static_cast<int>(finish.size());
  const double rows = static_cast<double>(o.sm_ids.size());
  o.utilization = span > 0 ? busy_ticks / (rows * span) : 1.0;
  o.waves = static_cast<double>(t.ctas.size()) / (rows * std::max(o.max_slots, 1));

  std::sort(finish.begin(), finish.end());
  const int n = o.active_sms;
  o.tail_sms = std::clamp(static_cast<int>(std::ceil(tail_share * n - 1e-9)), 1, n);
  // With every SM in the tail (one SM, or a share that rounds up to all) there is no tail to speak of.
  o.tail_start = n - o.tail_sms - 1 >= 0 ? finish[static_cast<size_t>(n - o.tail_sms - 1)] : o.t1;
  o.tail_fraction = span > 0 ? static_cast<double>(o.t1 - o.tail_start) / span : 0.0;
  return o;
}

}  // namespace flashscope::viz
