// viz: one CTA's warp lanes and stage buffers, and the launch's SM × time
// occupancy with its tail.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "test_viz_traces.hpp"
#include "viz/occupancy.hpp"
#include "viz/pipeline.hpp"

namespace viz = flashscope::viz;
using flashscope::SpanKind;
using flashscope::Trace;

TEST_CASE("viz: overlapping spans of one warp get their own lanes") {
  Trace t = viz_test::make_trace(64, 128, 64, 64, false, 2);
  const uint32_t c = viz_test::add_cta(t, 0, 0, 100);
  viz_test::add_span(t, c, 0, SpanKind::kQK, 1, 0, 10);
  viz_test::add_span(t, c, 0, SpanKind::kSoftmax, 0, 5, 15);  // v6: softmax(t) under Q·K(t+1)ᵀ
  viz_test::add_span(t, c, 0, SpanKind::kPV, 0, 15, 20);      // fits after the QK on lane 0
  viz_test::add_span(t, c, 1, SpanKind::kQK, 1, 2, 12);
  const uint32_t other = viz_test::add_cta(t, 1, 0, 100);
  viz_test::add_span(t, other, 0, SpanKind::kQK, 0, 0, 50);

  const viz::CtaPipeline p = viz::build_cta_pipeline(t, c);
  REQUIRE(p.warps.size() == 2);
  CHECK(p.lanes == 3);
  CHECK(p.warps[0].lanes == 2);
  CHECK(p.warps[1].first_lane == 2);
  CHECK(p.spans.size() == 4);
  CHECK(p.t0 == 0);
  CHECK(p.t1 == 20);
  for (const viz::LaneSpan& s : p.spans) {
    if (t.spans[s.span].kind == SpanKind::kSoftmax) CHECK(s.lane == 1);
    if (t.spans[s.span].kind == SpanKind::kPV) CHECK(s.lane == 0);
  }
  CHECK(p.kind_us[static_cast<int>(SpanKind::kQK)] == doctest::Approx(0.020));  // 10 + 10 ns
  const std::vector<uint32_t> with = viz::ctas_with_spans(t);
  CHECK(with.size() == 2);
}

namespace {

// One warp running `tiles` KV tiles. Single-buffered: each tile's loads are
// issued after the previous tile's P·V. Double-buffered: tile t+1's K and V
// are issued as soon as tile t's have landed, before its math.
Trace pipelined(int tiles, bool double_buffered) {
  Trace t = viz_test::make_trace(64, 64 * tiles, 64, 64, false, 1);
  const uint32_t c = viz_test::add_cta(t, 0, 0, 1000);
  uint64_t now = 0;
  auto issue = [&](int kt) {
    viz_test::add_span(t, c, 0, SpanKind::kLoadIssueK, kt, now, now + 2);
    viz_test::add_span(t, c, 0, SpanKind::kLoadIssueV, kt, now + 2, now + 4);
    now += 4;
  };
  issue(0);
  for (int kt = 0; kt < tiles; ++kt) {
    viz_test::add_span(t, c, 0, SpanKind::kLoadWaitK, kt, now, now + 6);
    now += 6;
    if (double_buffered && kt + 1 < tiles) issue(kt + 1);
    viz_test::add_span(t, c, 0, SpanKind::kQK, kt, now, now + 10);
    viz_test::add_span(t, c, 0, SpanKind::kSoftmax, kt, now + 10, now + 15);
    viz_test::add_span(t, c, 0, SpanKind::kLoadWaitV, kt, now + 15, now + 16);
    viz_test::add_span(t, c, 0, SpanKind::kPV, kt, now + 16, now + 26);
    now += 26;
    if (!double_buffered && kt + 1 < tiles) issue(kt + 1);
  }
  return t;
}

}  // namespace

TEST_CASE("viz: stage buffers show single and double buffering") {
  const Trace single = pipelined(4, false);
  const viz::CtaPipeline a = viz::build_cta_pipeline(single, 0);
  CHECK(a.buffers.size() == 8);
  CHECK(a.max_live_k == 1);
  CHECK(a.max_live_v == 1);
  CHECK(a.lanes == 1);
  // Tile 0's K: issued at 0, landed when its wait ended (10), freed after QKᵀ (20).
  const viz::StageBuffer& k0 = a.buffers[0];
  CHECK(k0.operand == 'K');
  CHECK(k0.kv_tile == 0);
  CHECK(k0.issue == 0);
  CHECK(k0.landed == 10);
  CHECK(k0.released == 20);
  // Tile 0's V: issued at 2, landed at 26 (its wait), freed after P·V (36).
  const viz::StageBuffer& v0 = a.buffers[4];
  CHECK(v0.operand == 'V');
  CHECK(v0.issue == 2);
  CHECK(v0.landed == 26);
  CHECK(v0.released == 36);

  const viz::CtaPipeline b = viz::build_cta_pipeline(pipelined(4, true), 0);
  CHECK(b.max_live_k == 2);
  CHECK(b.max_live_v == 2);
}

TEST_CASE("viz: a tile with one wait for K and V lands both buffers there") {
  // v1..v4: K and V of a tile are one copy group; the kernel waits once (load_wait_k).
  Trace t = viz_test::make_trace(64, 128, 64, 64, false, 1);
  const uint32_t c = viz_test::add_cta(t, 0, 0, 1000);
  viz_test::add_span(t, c, 0, SpanKind::kLoadIssueK, 0, 0, 2);
  viz_test::add_span(t, c, 0, SpanKind::kLoadIssueV, 0, 2, 4);
  viz_test::add_span(t, c, 0, SpanKind::kLoadWaitK, 0, 4, 30);
  viz_test::add_span(t, c, 0, SpanKind::kQK, 0, 30, 40);
  viz_test::add_span(t, c, 0, SpanKind::kPV, 0, 45, 55);
  const viz::CtaPipeline p = viz::build_cta_pipeline(t, c);
  REQUIRE(p.buffers.size() == 2);
  CHECK(p.buffers[0].operand == 'K');
  CHECK(p.buffers[0].landed == 30);
  CHECK(p.buffers[1].operand == 'V');
  CHECK(p.buffers[1].landed == 30);  // not 4, when its issue span ended
  CHECK(p.buffers[1].released == 55);
}

TEST_CASE("viz: concurrency counts intervals alive at once, touching ones do not overlap") {
  CHECK(viz::max_concurrent({{0, 10}, {10, 20}, {20, 30}}) == 1);
  CHECK(viz::max_concurrent({{0, 10}, {5, 20}, {6, 7}, {19, 30}}) == 3);
  CHECK(viz::max_concurrent({{5, 5}}) == 0);
  CHECK(viz::max_concurrent({}) == 0);
}

TEST_CASE("viz: SM occupancy, utilization, waves and the tail") {
  Trace t = viz_test::make_trace(512, 512, 64, 64, false);
  t.meta.sm_count = 4;  // SM 3 gets no CTA: an idle row
  viz_test::add_cta(t, 0, 0, 100);
  viz_test::add_cta(t, 0, 100, 200);
  viz_test::add_cta(t, 1, 0, 100);
  viz_test::add_cta(t, 1, 100, 150);
  viz_test::add_cta(t, 2, 0, 120);

  const viz::Occupancy o = viz::build_occupancy(t, 4, 0.25);
  REQUIRE(o.sm_ids.size() == 4);
  CHECK(o.active_sms == 3);
  CHECK(o.t0 == 0);
  CHECK(o.t1 == 200);
  CHECK(o.bars.size() == 5);
  CHECK(o.max_slots == 1);
  CHECK(o.utilization == doctest::Approx(470.0 / 800.0));
  CHECK(o.waves == doctest::Approx(1.25));
  REQUIRE(o.busy_sms.size() == 4);
  CHECK(o.busy_sms[0] == doctest::Approx(3.0f));
  CHECK(o.busy_sms[1] == doctest::Approx(3.0f));
  CHECK(o.busy_sms[2] == doctest::Approx(2.4f));  // SM 2 stops at 120: 0.4 of the bin
  CHECK(o.busy_sms[3] == doctest::Approx(1.0f));
  // 25 % of 3 SMs → 1: the tail starts when SM 1 finishes (150) and only SM 0 runs.
  CHECK(o.tail_sms == 1);
  CHECK(o.tail_start == 150);
  CHECK(o.tail_fraction == doctest::Approx(0.25));
  // A third of them → 2 SMs: from SM 2's finish (120).
  const viz::Occupancy wide = viz::build_occupancy(t, 4, 0.34);
  CHECK(wide.tail_sms == 2);
  CHECK(wide.tail_start == 120);
  CHECK(wide.tail_fraction == doctest::Approx(0.4));
}

TEST_CASE("viz: CTAs resident together on one SM take separate slots") {
  Trace t = viz_test::make_trace(512, 512, 64, 64, false);
  viz_test::add_cta(t, 7, 0, 100);
  viz_test::add_cta(t, 7, 50, 150);
  viz_test::add_cta(t, 7, 100, 160);  // lane 0 is free again at 100
  viz_test::add_cta(t, 3, 0, 160);
  const viz::Occupancy o = viz::build_occupancy(t, 2, 0.1);
  REQUIRE(o.sm_ids.size() == 2);  // a CPU-style trace: only the ids that occur
  CHECK(o.sm_ids[0] == 3);
  CHECK(o.sm_ids[1] == 7);
  CHECK(o.max_slots == 2);
  int slot_of_third = -1;
  for (const viz::CtaBar& b : o.bars) {
    if (b.cta == 2) slot_of_third = b.slot;
    if (b.cta == 0 || b.cta == 1 || b.cta == 2) CHECK(b.row == 1);
  }
  CHECK(slot_of_third == 0);
  // Bin 0 [0, 80): SM 7 has 1 CTA on [0, 50) and 2 on [50, 80) → 1.375 mean; SM 3 one more.
  CHECK(o.resident_ctas[0] == doctest::Approx(2.375f));
  CHECK(o.busy_sms[0] == doctest::Approx(2.0f));
  CHECK(o.utilization == doctest::Approx(1.0));
  // Both SMs finish at 160: whatever the share, no stretch runs narrower than the device.
  CHECK(o.tail_sms == 1);
  CHECK(o.tail_fraction == doctest::Approx(0.0));
}

TEST_CASE("viz: one SM has no tail") {
  Trace t = viz_test::make_trace(512, 512, 64, 64, false);
  viz_test::add_cta(t, 0, 0, 100);
  viz_test::add_cta(t, 0, 100, 300);
  const viz::Occupancy o = viz::build_occupancy(t, 3, 0.1);
  CHECK(o.active_sms == 1);
  CHECK(o.tail_start == 300);
  CHECK(o.tail_fraction == 0.0);
  CHECK(o.waves == doctest::Approx(2.0));
}
