// viz: colour scales, axis ticks and units, throughput against SOL.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "viz/color_scale.hpp"
#include "viz/throughput.hpp"
#include "viz/units.hpp"

namespace viz = flashscope::viz;

TEST_CASE("viz: colormaps hit their anchors and rise in lightness") {
  for (const viz::ColorMap map : {viz::ColorMap::kViridis, viz::ColorMap::kMagma}) {
    const auto& a = viz::colormap_anchors(map);
    REQUIRE(a.size() == 11);
    const viz::Rgb lo = viz::sample_colormap(map, 0.0f), mid = viz::sample_colormap(map, 0.5f),
                   hi = viz::sample_colormap(map, 1.0f);
    CHECK(lo.r == a[0].r);
    CHECK(lo.g == a[0].g);
    CHECK(mid.g == a[5].g);
    CHECK(mid.b == a[5].b);
    CHECK(hi.r == a[10].r);
    CHECK(hi.b == a[10].b);
    // Out of range and NaN clamp to the ends.
    CHECK(viz::sample_colormap(map, -3.0f).b == a[0].b);
    CHECK(viz::sample_colormap(map, 7.0f).g == a[10].g);
    CHECK(viz::sample_colormap(map, std::numeric_limits<float>::quiet_NaN()).r == a[0].r);
    // Brighter always means more: luminance never falls along the map.
    float prev = -1.0f;
    for (int i = 0; i <= 100; ++i) {
      const float l = viz::luminance(viz::sample_colormap(map, i / 100.0f));
      CHECK(l >= prev - 1e-4f);
      prev = l;
    }
  }
  // Halfway between two anchors is their rounded mean.
  const viz::Rgb v = viz::sample_colormap(viz::ColorMap::kViridis, 0.05f);
  CHECK(v.r == 70);   // (0x44 + 0x48) / 2
  CHECK(v.g == 19);   // (0x01 + 0x24) / 2 = 18.5, rounded
  CHECK(v.b == 101);  // (0x54 + 0x75) / 2 = 100.5, rounded
  // Text on the dark end is light and on the bright end dark.
  CHECK(viz::text_color_on(viz::sample_colormap(viz::ColorMap::kViridis, 0.0f)).r > 200);
  CHECK(viz::text_color_on(viz::sample_colormap(viz::ColorMap::kViridis, 1.0f)).r < 50);
}

TEST_CASE("viz: linear and log colour scales place values where they belong") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const viz::ColorScale lin = viz::fit_scale({0.2f, 0.5f, nan, 0.9f}, false);
  CHECK(lin.lo == 0.0f);
  CHECK(lin.hi == doctest::Approx(0.9f));
  CHECK(viz::scale_position(lin, 0.45f) == doctest::Approx(0.5f));
  CHECK(viz::scale_position(lin, 2.0f) == 1.0f);

  // Log: the floor is hi · 1e-4, so 1e-6 is clamped and 1e-3 sits halfway.
  const viz::ColorScale log = viz::fit_scale({1e-6f, 1e-3f, 1e-1f, 0.0f, -1.0f}, true, 1e-4f);
  CHECK(log.log);
  CHECK(log.hi == doctest::Approx(0.1f));
  CHECK(log.lo == doctest::Approx(1e-5f));
  CHECK(viz::scale_position(log, 1e-3f) == doctest::Approx(0.5f).epsilon(1e-5));
  CHECK(viz::scale_position(log, 1e-2f) == doctest::Approx(0.75f).epsilon(1e-5));
  CHECK(viz::scale_position(log, 1e-6f) == 0.0f);
  CHECK(viz::scale_position(log, 0.0f) == 0.0f);
  CHECK(viz::scale_value(log, 0.5f) == doctest::Approx(1e-3f).epsilon(1e-4));
  CHECK(viz::scale_value(lin, 0.5f) == doctest::Approx(0.45f));

  // Quantile scales: one outlier in 20 saturates instead of darkening the rest.
  std::vector<float> times(19, 100.0f);
  times[3] = 50.0f;
  times.push_back(21000.0f);
  bool clipped = false;
  const viz::ColorScale q = viz::fit_scale_quantile(times, 0.95f, &clipped);
  CHECK(q.hi == doctest::Approx(100.0f));
  CHECK(clipped);
  CHECK(viz::scale_position(q, 50.0f) == doctest::Approx(0.5f));
  CHECK(viz::scale_position(q, 21000.0f) == 1.0f);
  CHECK(viz::fit_scale_quantile(times, 1.0f, &clipped).hi == doctest::Approx(21000.0f));
  CHECK_FALSE(clipped);
  CHECK(viz::fit_scale_quantile({}, 0.9f).hi == 1.0f);

  // Nothing usable: a defined default, and a degenerate scale maps to the top.
  const viz::ColorScale empty = viz::fit_scale({nan}, true, 1e-3f);
  CHECK(empty.lo == doctest::Approx(1e-3f));
  CHECK(viz::scale_position({0.5f, 0.5f, false}, 0.5f) == 1.0f);
}

TEST_CASE("viz: nice ticks are round, evenly spaced and inside the range") {
  const std::vector<double> a = viz::nice_ticks(0, 10, 6);
  REQUIRE(a.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(2.0 * i));

  const std::vector<double> b = viz::nice_ticks(0.13, 0.87, 5);
  REQUIRE(b.size() == 4);
  CHECK(b.front() == doctest::Approx(0.2));
  CHECK(b.back() == doctest::Approx(0.8));

  for (const auto& [lo, hi, n] : std::vector<std::tuple<double, double, int>>{
           {3.0, 3.05, 4}, {0, 38262.1, 7}, {-5, 5, 3}, {1e-6, 3e-6, 5}, {100, 1e5, 8}}) {
    const std::vector<double> t = viz::nice_ticks(lo, hi, n);
    INFO("range [" << lo << ", " << hi << "], at most " << n);
    CHECK(t.size() >= 2);
    CHECK(static_cast<int>(t.size()) <= n);
    for (const double v : t) {
      CHECK(v >= lo - 1e-9 * std::fabs(hi - lo));
      CHECK(v <= hi + 1e-9 * std::fabs(hi - lo));
    }
    for (size_t i = 2; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == doctest::Approx(t[1] - t[0]));
  }
  CHECK(viz::nice_ticks(5, 5, 4).empty());
}

TEST_CASE("viz: durations and counts print with their unit") {
  CHECK(viz::format_us(0.85) == "850 ns");
  CHECK(viz::format_us(0.0) == "0");
  CHECK(viz::format_us(12.34) == "12.3 \xC2\xB5s");
  CHECK(viz::format_us(4560) == "4.56 ms");
  CHECK(viz::format_us(1.5e6) == "1.50 s");
  CHECK(viz::format_si(2.5e12) == "2.50 T");
  CHECK(viz::format_si(999) == "999 ");
  flashscope::TraceMeta m;
  m.timer_ticks_per_us = 1980.0;  // a 1.98 GHz clock
  CHECK(viz::ticks_to_us(m, 3960.0) == doctest::Approx(2.0));
}

TEST_CASE("viz: TFLOPS, GB/s and % of SOL") {
  const viz::Rate p = viz::prefill_rate(2e12, 10.0, 400.0);  // 2 TFLOP in 10 ms
  CHECK(p.value == doctest::Approx(200.0));
  CHECK(p.has_sol);
  CHECK(p.pct_of_sol == doctest::Approx(50.0));
  const viz::Rate cpu = viz::prefill_rate(2.684e8, 39.96, 0.0);  // the CPU: no SOL to compare with
  CHECK(cpu.value == doctest::Approx(0.00671672).epsilon(1e-4));
  CHECK_FALSE(cpu.has_sol);
  CHECK(viz::prefill_rate(1e9, 0.0, 100).value == 0.0);

  const viz::Rate bw = viz::bandwidth_rate(4.8e9, 1.0, 4800.0);
  CHECK(bw.value == doctest::Approx(4800.0));
  CHECK(bw.pct_of_sol == doctest::Approx(100.0));
  // SmolLM2: 98 MB of weights, 92160 bytes of K/V per token, 1000 tokens in the cache.
  CHECK(viz::decode_step_bytes(98e6, 92160, 1000) == doctest::Approx(190.16e6));

  flashscope::TraceMeta m;
  m.kind = flashscope::TraceKind::kDecode;
  m.batch = 2;
  m.kv_heads = 8;
  m.kv_len = 4096;
  m.head_dim = 128;
  m.dtype = flashscope::DType::kBF16;
  m.elapsed_ms = 0.01;
  m.sol_dram_gbps = 4800.0;
  CHECK(viz::trace_kv_bytes(m) == doctest::Approx(33554432.0));  // 2·2·8·4096·128·2
  const viz::Rate r = viz::trace_rate(m);
  CHECK(r.value == doctest::Approx(3355.4432));
  CHECK(r.pct_of_sol == doctest::Approx(69.905));
  m.kind = flashscope::TraceKind::kPrefill;
  m.flops = 1e12;
  m.elapsed_ms = 5.0;
  m.sol_tflops = 989.4;
  CHECK(viz::trace_rate(m).value == doctest::Approx(200.0));
  CHECK(viz::trace_rate(m).pct_of_sol == doctest::Approx(20.214).epsilon(1e-4));
}

TEST_CASE("viz: a history keeps the newest values and a robust recent median") {
  viz::History h;
  h.capacity = 3;
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}) h.push(v);
  REQUIRE(h.values.size() == 3);
  CHECK(h.values.front() == 3.0f);
  CHECK(h.last() == 5.0f);
  CHECK(h.max() == 5.0f);
  CHECK(h.mean() == doctest::Approx(4.0f));
  CHECK(h.recent_median(2) == doctest::Approx(4.5f));
  CHECK(h.recent_median(10) == doctest::Approx(4.0f));
  h.push(100.0f);  // one slow outlier does not move the median of three
  CHECK(h.recent_median(3) == doctest::Approx(5.0f));
}

TEST_CASE("viz: median of timed runs (odd, even, empty, unsorted)") {
  CHECK(viz::median(std::vector<double>{3.0, 1.0, 2.0}) == 2.0);
  CHECK(viz::median(std::vector<double>{4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(viz::median(std::vector<double>{}) == 0.0);
  CHECK(viz::median(std::vector<float>{9.0f, 1.0f, 1000.0f}) == 9.0f);  // one outlier does not move it
}
