#include "viz/pipeline.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "viz/units.hpp"

namespace flashscope::viz {

std::vector<uint32_t> ctas_with_spans(const Trace& t) {
  std::vector<uint32_t> out;
  for (const WarpSpanRecord& s : t.spans) out.push_back(s.cta);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int max_concurrent(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::vector<std::pair<uint64_t, int>> events;
  for (const auto& [b, e] : intervals) {
    if (e <= b) continue;
    events.emplace_back(b, +1);
    events.emplace_back(e, -1);
  }
  std::sort(events.begin(), events.end());  // at equal times −1 sorts first: an end frees before a begin
  int live = 0, best = 0;
  for (const auto& ev : events) best = std::max(best, live += ev.second);
  return best;
}

CtaPipeline build_cta_pipeline(const Trace& t, uint32_t cta) {
  CtaPipeline p;
  p.cta = cta;
  std::map<uint32_t, std::vector<uint32_t>> by_warp;
  bool any = false;
  for (uint32_t i = 0; i < t.spans.size(); ++i) {
    const WarpSpanRecord& s = t.spans[i];
    if (s.cta != cta) continue;
    by_warp[s.warp].push_back(i);
    p.t0 = any ? std::min(p.t0, s.start) : s.start;
    p.t1 = any ? std::max(p.t1, s.end) : s.end;
    any = true;
    p.kind_us[static_cast<uint32_t>(s.kind)] += ticks_to_us(t.meta, static_cast<double>(s.end - s.start));
  }

  for (auto& [warp, idx] : by_warp) {
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
      return t.spans[a].start != t.spans[b].start ? t.spans[a].start < t.spans[b].start : a < b;
    });
    std::vector<uint64_t> lane_end;  // per lane of this warp: when its last span ends
    for (const uint32_t i : idx) {
      const WarpSpanRecord& s = t.spans[i];
      size_t lane = 0;
      while (lane < lane_end.size() && lane_end[lane] > s.start) ++lane;
      if (lane == lane_end.size()) lane_end.push_back(0);
      lane_end[lane] = s.end;
      p.spans.push_back({i, p.lanes + static_cast<int>(lane)});
    }
    p.warps.push_back({warp, p.lanes, static_cast<int>(lane_end.size())});
    p.lanes += static_cast<int>(lane_end.size());
  }

  // Stage buffers, per operand and tile, across warps.
  struct Acc {
    bool issued = false, waited = false, consumed = false;
    uint64_t issue = 0, issue_end = 0, wait_end = 0, consumer_end = 0;
  };
  std::map<std::pair<char, int>, Acc> acc;
  for (const LaneSpan& ls : p.spans) {
    const WarpSpanRecord& s = t.spans[ls.span];
    if (s.kv_tile < 0) continue;
    char op = 0;
    int role = 0;  // 1 issue, 2 wait, 3 consumer
    switch (s.kind) {
      case SpanKind::kLoadIssueK:
        op = 'K';
        role = 1;
        break;
      case SpanKind::kLoadIssueV:
        op = 'V';
        role = 1;
        break;
      case SpanKind::kLoadWaitK:
        op = 'K';
        role = 2;
        break;
      case SpanKind::kLoadWaitV:
        op = 'V';
        role = 2;
        break;
      case SpanKind::kQK:
        op = 'K';
        role = 3;
        break;
      case SpanKind::kPV:
        op = 'V';
        role = 3;
        break;
      default:
        break;
    }
    if (op == 0) continue;
    Acc& a = acc[{op, s.kv_tile}];
    if (role == 1) {
      a.issue = a.issued ? std::min(a.issue, s.start) : s.start;
      a.issue_end = std::max(a.issue_end, s.end);
      a.issued = true;
    } else if (role == 2) {
      a.wait_end = std::max(a.wait_end, s.end);
      a.waited = true;
    } else {
      a.consumer_end = std::max(a.consumer_end, s.end);
      a.consumed = true;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> live_k, live_v;
  for (const auto& [key, a] : acc) {
    if (!a.issued) continue;  // a consumer without a load: nothing says when the buffer filled
    StageBuffer b;
    b.operand = key.first;
    b.kv_tile = key.second;
    b.issue = a.issue;
    uint64_t wait_end = a.waited ? a.wait_end : a.issue_end;
    if (!a.waited) {
      // One copy group for K and V: the other operand's wait on this tile lands it too.
      const auto other = acc.find({key.first == 'K' ? 'V' : 'K', key.second});
      if (other != acc.end() && other->second.waited && other->second.wait_end >= a.issue)
        wait_end = other->second.wait_end;
    }
    b.landed = std::max(a.issue_end, wait_end);
    b.released = std::max(b.landed, a.consumed ? a.consumer_end : b.landed);
    p.buffers.push_back(b);
    (b.operand == 'K' ? live_k : live_v).emplace_back(b.issue, b.released);
  }
  p.max_live_k = max_concurrent(live_k);
  p.max_live_v = max_concurrent(live_v);
  return p;
}

}  // namespace flashscope::viz
