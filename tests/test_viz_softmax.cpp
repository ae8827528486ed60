// viz: one row's online-softmax series — m, l, the rescale factor, each
// tile's share of the final probability mass, and the final normalization —
// checked against the softmax of known logits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "test_viz_traces.hpp"
#include "viz/softmax_series.hpp"

namespace viz = flashscope::viz;
using flashscope::SoftmaxStateRecord;
using flashscope::Trace;

namespace {

// Runs the recurrence of trace.hpp over tiles of logits (natural-log units)
// and appends one record per tile, as a producer would.
void record_row(Trace& t, uint32_t row, const std::vector<std::vector<double>>& tiles, uint32_t head = 0) {
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  for (size_t kt = 0; kt < tiles.size(); ++kt) {
    SoftmaxStateRecord r;
    r.head = head;
    r.row = row;
    r.kv_tile = static_cast<uint32_t>(kt);
    r.keys = static_cast<uint32_t>(tiles[kt].size());
    if (tiles[kt].empty()) {
      r.rescale = 1.0f;
      r.tile_max = -std::numeric_limits<float>::infinity();
    } else {
      const double tile_max = *std::max_element(tiles[kt].begin(), tiles[kt].end());
      const double m_new = std::max(m, tile_max);
      const double rescale = std::exp(m - m_new);
      double sum = 0;
      for (const double s : tiles[kt]) sum += std::exp(s - m_new);
      l = rescale * l + sum;
      m = m_new;
      r.rescale = static_cast<float>(rescale);
      r.tile_max = static_cast<float>(tile_max);
      r.tile_sum = static_cast<float>(sum);
    }
    r.m = static_cast<float>(m);
    r.l = static_cast<float>(l);
    t.softmax.push_back(r);
  }
}

}  // namespace

TEST_CASE("viz: a row's softmax series matches the softmax of its logits") {
  Trace t = viz_test::make_trace(64, 192, 64, 64, false);
  const std::vector<std::vector<double>> tiles = {{1.0, 2.0}, {4.0, 0.0}, {3.0}};
  record_row(t, 17, tiles);
  record_row(t, 17, {{9.0}}, /*head=*/1);  // another head's row 17: ignored

  const viz::SoftmaxSeries s = viz::build_softmax_series(t, 17);
  REQUIRE(s.valid);
  REQUIRE(s.steps.size() == 3);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(4.0) + std::exp(0.0) + std::exp(3.0);
  CHECK(s.m_final == doctest::Approx(4.0f));
  CHECK(s.l_final == doctest::Approx(z / std::exp(4.0)));
  CHECK(s.lse == doctest::Approx(std::log(z)));
  CHECK(s.inv_l == doctest::Approx(std::exp(4.0) / z));
  // Shares are the final probability mass per tile.
  CHECK(s.steps[0].share == doctest::Approx((std::exp(1.0) + std::exp(2.0)) / z));
  CHECK(s.steps[1].share == doctest::Approx((std::exp(4.0) + 1.0) / z));
  CHECK(s.steps[2].share == doctest::Approx(std::exp(3.0) / z));
  // The max rose once after the first tile (to 4 on tile 1): one rescale of O.
  CHECK_FALSE(s.steps[0].max_rose);
  CHECK(s.steps[0].rescale == 0.0f);
  CHECK(s.steps[1].max_rose);
  CHECK(s.steps[1].rescale == doctest::Approx(std::exp(-2.0)));
  CHECK_FALSE(s.steps[2].max_rose);
  CHECK(s.max_rises == 1);
  CHECK(s.max_recurrence_error < 1e-6);
}

TEST_CASE("viz: the recurrence check catches an inconsistent record") {
  Trace t = viz_test::make_trace(64, 192, 64, 64, false);
  record_row(t, 0, {{1.0, 2.0}, {4.0, 0.0}, {3.0}});
  t.softmax[1].l *= 1.01f;  // a probe that recorded l 1 % too large
  const viz::SoftmaxSeries s = viz::build_softmax_series(t, 0);
  // Tile 1's own check fails by ~1 %, and tile 2 (built on the bad l) too.
  CHECK(s.max_recurrence_error == doctest::Approx(0.0099).epsilon(0.05));
}

TEST_CASE("viz: tiles a causal row cannot see keep the state and add nothing") {
  Trace t = viz_test::make_trace(128, 192, 64, 64, true);
  record_row(t, 5, {{0.5}, {}, {}});
  record_row(t, 90, {{0.5, 0.5}, {1.5}});
  const viz::SoftmaxSeries s = viz::build_softmax_series(t, 5);
  REQUIRE(s.steps.size() == 3);
  CHECK(s.steps[1].rescale == 1.0f);
  CHECK(s.steps[1].share == 0.0);
  CHECK_FALSE(s.steps[1].max_rose);
  CHECK(s.steps[0].share == doctest::Approx(1.0));
  CHECK(s.lse == doctest::Approx(0.5));

  const std::vector<uint32_t> rows = viz::softmax_rows(t);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == 5);
  CHECK(rows[1] == 90);
  CHECK_FALSE(viz::build_softmax_series(t, 6).valid);  // no records for row 6
}
