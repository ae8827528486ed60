// viz on a real producer: the CPU path's capture of a causal GQA prefill,
// checked for what the views rely on — each q-tile's masses sum to 1, a
// row's softmax shares sum to 1 and its LSE equals the run's lse output, a
// sampled block's probabilities average to the tile's mass, the CPU's
// pipeline is one lane with one buffer per operand, and every CTA lands on
// the occupancy chart.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope/half.hpp"
#include "flashscope/trace.hpp"
#include "viz/occupancy.hpp"
#include "viz/pipeline.hpp"
#include "viz/prob_block.hpp"
#include "viz/softmax_series.hpp"
#include "viz/tile_grid.hpp"

namespace fs = flashscope;
namespace viz = flashscope::viz;

namespace {

struct Captured {
  fs::Trace trace;
  std::vector<float> lse;  // [q_heads, q_len]
  int q_len = 0;
};

// 2 q-heads over 1 kv-head, 200 × 200 causal, head_dim 64, seeded bf16
// inputs with a wide enough spread that attention is far from uniform.
// window_left >= 0: a sliding window of that many keys before each query.
Captured capture(int window_left = -1) {
  constexpr int kLen = 200, kHeads = 2, kDim = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  auto fill = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = fs::float_to_bf16(dist(rng));
    return v;
  };
  std::vector<uint16_t> q = fill(size_t{kLen} * kHeads * kDim), k = fill(size_t{kLen} * kDim),
                        v = fill(size_t{kLen} * kDim), o(q.size());
  Captured c;
  c.q_len = kLen;
  c.lse.assign(size_t{kHeads} * kLen, 0.0f);
  fs::PrefillParams p;
  p.q = fs::bshd(q.data(), kLen, kHeads, kDim);
  p.k = fs::bshd(k.data(), kLen, 1, kDim);
  p.v = fs::bshd(v.data(), kLen, 1, kDim);
  p.o = fs::bshd(o.data(), kLen, kHeads, kDim);
  p.lse = c.lse.data();
  p.q_heads = kHeads;
  p.kv_heads = 1;
  p.q_len = p.kv_len = kLen;
  p.head_dim = kDim;
  p.causal = true;
  p.window_left = window_left;
  fs::TraceOptions opt;
  opt.head = 1;
  opt.rows = {0, 100, 199};
  opt.sample_tiles = {{3, 3}, {3, 0}, {2, 1}};
  const fs::Status s = fs::capture_cpu_prefill_trace(p, opt, &c.trace);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return c;
}

}  // namespace

TEST_CASE("viz: views of a CPU capture add up") {
  const Captured c = capture();
  const fs::Trace& t = c.trace;

  const viz::TileGrid g = viz::build_tile_grid(t);
  REQUIRE(g.q_tiles == 4);
  REQUIRE(g.kv_tiles == 4);
  CHECK(g.head == 1);
  CHECK(g.skipped == 6);
  CHECK(g.masked == 4);
  CHECK(g.full == 6);
  CHECK(g.has_time);
  for (int q = 0; q < g.q_tiles; ++q) {
    double sum = 0;
    for (int k = 0; k < g.kv_tiles; ++k) {
      const viz::TileCell& cell = g.at(q, k);
      sum += cell.mass;
      // The CPU computes exactly the tiles the diagonal does not skip, and times each.
      CHECK(((cell.flags & viz::kTileHasTime) != 0) == ((cell.flags & viz::kTileSkipped) == 0));
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }
  CHECK((g.at(3, 3).flags & viz::kTileSampled) != 0);
  CHECK((g.at(1, 1).flags & viz::kTileSampled) == 0);

  // Row 199's shares are its probability mass per tile; its LSE is the run's.
  const viz::SoftmaxSeries s = viz::build_softmax_series(t, 199);
  REQUIRE(s.valid);
  CHECK(s.steps.size() == 4);
  double shares = 0;
  for (const viz::SoftmaxStep& st : s.steps) shares += st.share;
  CHECK(shares == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(s.lse == doctest::Approx(c.lse[size_t{1} * c.q_len + 199]).epsilon(1e-5));
  CHECK(s.max_recurrence_error < 1e-5);
  // Row 0 sees one key: all of its mass is on tile 0, and l = 1 there.
  const viz::SoftmaxSeries first = viz::build_softmax_series(t, 0);
  REQUIRE(first.valid);
  CHECK(first.steps[0].share == doctest::Approx(1.0));
  CHECK(first.l_final == doctest::Approx(1.0f));

  // A block's probabilities, averaged over the rows that see a key, are the tile's mass.
  for (const auto& [qt, kt] : std::vector<std::pair<int, int>>{{3, 3}, {3, 0}, {2, 1}}) {
    const viz::ProbBlock b = viz::extract_prob_block(t, qt, kt);
    REQUIRE(b.present);
    double mass = 0;
    for (int r = 0; r < b.rows; ++r) mass += b.row_mass(r);
    INFO("block (" << qt << ", " << kt << ")");
    CHECK(mass / g.at(qt, kt).rows == doctest::Approx(g.at(qt, kt).mass).epsilon(1e-4));
    CHECK(b.max_prob == doctest::Approx(g.at(qt, kt).max_prob).epsilon(1e-4));
  }
  CHECK(viz::extract_prob_block(t, 3, 3).rows == 8);  // rows 192..199: the tail

  // The CPU's pipeline: one thread, loads then math, never two tiles of one operand at once.
  const std::vector<uint32_t> ctas = viz::ctas_with_spans(t);
  REQUIRE(ctas.size() == 4);  // the traced head's four q-tiles
  const viz::CtaPipeline p = viz::build_cta_pipeline(t, ctas.back());
  CHECK(p.lanes == 1);
  CHECK(p.max_live_k == 1);
  CHECK(p.max_live_v == 1);
  CHECK(p.buffers.size() == 2 * t.ctas[ctas.back()].kv_tiles);

  const viz::Occupancy o = viz::build_occupancy(t, 50, 0.1);
  CHECK(o.bars.size() == t.ctas.size());
  CHECK(o.active_sms >= 1);
  CHECK(o.utilization > 0.0);
  CHECK(o.utilization <= 1.0 + 1e-9);
}

TEST_CASE("viz: a sliding window's skipped tiles reach the grid") {
  // 200 × 200 causal, window 70: q-tile 3 (rows 192..199) sees keys
  // 122..199 (kv-tiles 1..3), q-tile 2 (128..191) keys 58..191 (0..2).
  const Captured c = capture(70);
  const viz::TileGrid g = viz::build_tile_grid(c.trace);
  REQUIRE(g.q_tiles == 4);
  REQUIRE(g.kv_tiles == 4);
  CHECK((g.at(3, 0).flags & viz::kTileSkipped) != 0);  // left of the window
  CHECK((g.at(3, 1).flags & viz::kTileMasked) != 0);   // the window's left edge
  CHECK((g.at(3, 2).flags & viz::kTileMasked) != 0);   // row 199 sees keys from 129 on
  CHECK((g.at(3, 3).flags & viz::kTileMasked) != 0);   // the diagonal
  CHECK((g.at(2, 0).flags & viz::kTileMasked) != 0);
  CHECK((g.at(2, 3).flags & viz::kTileSkipped) != 0);  // right of the diagonal
  CHECK(g.skipped == 7);  // 6 above the diagonal, 1 left of the window
  for (int q = 0; q < g.q_tiles; ++q) {
    double sum = 0;
    for (int k = 0; k < g.kv_tiles; ++k) {
      const viz::TileCell& cell = g.at(q, k);
      sum += cell.mass;
      CHECK(((cell.flags & viz::kTileHasTime) != 0) == ((cell.flags & viz::kTileSkipped) == 0));
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }
  // Row 199's softmax steps start at its window's first tile.
  const viz::SoftmaxSeries s = viz::build_softmax_series(c.trace, 199);
  REQUIRE(s.valid);
  REQUIRE(s.steps.size() == 3);
  CHECK(s.steps.front().kv_tile == 1);
  CHECK(s.lse == doctest::Approx(c.lse[size_t{1} * c.q_len + 199]).epsilon(1e-5));
}

// The trace the app's headless tests replay (assets/traces/, regenerated by
// make_cpu_example.sh): every view has records to draw, and they add up.
TEST_CASE("viz: the committed example trace feeds every view") {
  auto read = fs::read_trace("assets/traces/cpu-example.fstrace");
  REQUIRE_MESSAGE(read.ok(), read.status().to_string() << " (run from the repository root)");
  const fs::Trace& t = read.value();
  CHECK(t.meta.causal);
  CHECK(t.meta.kv_heads < t.meta.q_heads);  // GQA

  const viz::TileGrid g = viz::build_tile_grid(t);
  CHECK(g.has_mass);
  CHECK(g.has_time);
  CHECK(g.skipped > 0);
  CHECK(viz::sampled_tiles(t).size() >= 2);
  const flashscope::TileCoord first = viz::default_tile(g);
  CHECK(viz::extract_prob_block(t, first.q_tile, first.kv_tile).present);
  for (int q = 0; q < g.q_tiles; ++q) {
    double sum = 0;
    for (int k = 0; k < g.kv_tiles; ++k) sum += g.at(q, k).mass;
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-4));
  }
  const std::vector<uint32_t> rows = viz::softmax_rows(t);
  CHECK(rows.size() >= 4);
  for (const uint32_t r : rows) {
    const viz::SoftmaxSeries s = viz::build_softmax_series(t, r);
    REQUIRE(s.valid);
    CHECK(s.max_recurrence_error < 1e-5);
  }
  CHECK_FALSE(viz::ctas_with_spans(t).empty());
  CHECK(viz::build_occupancy(t, 50, 0.1).bars.size() == t.ctas.size());
}
