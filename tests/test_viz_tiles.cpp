// viz: the q-tile × kv-tile grid (mass, flags, time per tile) and the
// sampled probability blocks behind "click a tile".
#include <doctest/doctest.h>

#include <vector>

#include "test_viz_traces.hpp"
#include "viz/prob_block.hpp"
#include "viz/tile_grid.hpp"

namespace viz = flashscope::viz;
using flashscope::SpanKind;
using flashscope::TileMassRecord;
using flashscope::Trace;

TEST_CASE("viz: causal tile flags follow the bottom-right diagonal") {
  // Square 256 × 256 in 64 × 64 tiles: the diagonal is masked, above it skipped.
  CHECK(viz::causal_tile_flags(256, 256, 64, 64, true, 0, 0) == viz::kTileMasked);
  CHECK(viz::causal_tile_flags(256, 256, 64, 64, true, 0, 1) == viz::kTileSkipped);
  CHECK(viz::causal_tile_flags(256, 256, 64, 64, true, 1, 0) == 0u);
  CHECK(viz::causal_tile_flags(256, 256, 64, 64, true, 3, 3) == viz::kTileMasked);
  CHECK(viz::causal_tile_flags(256, 256, 64, 64, false, 0, 3) == 0u);
  // Chunked prefill: 64 new tokens after 192 cached see every earlier key.
  for (int k = 0; k < 3; ++k) CHECK(viz::causal_tile_flags(64, 256, 64, 64, true, 0, k) == 0u);
  CHECK(viz::causal_tile_flags(64, 256, 64, 64, true, 0, 3) == viz::kTileMasked);
  // A 128-row q-tile over 64-key tiles: tile (0, 1) is crossed by the diagonal, (0, 2) never seen.
  CHECK(viz::causal_tile_flags(256, 256, 128, 64, true, 0, 1) == viz::kTileMasked);
  CHECK(viz::causal_tile_flags(256, 256, 128, 64, true, 0, 2) == viz::kTileSkipped);
  // Tails: 100 × 100, the last tile holds rows and keys 64..99 and is cut by the diagonal.
  CHECK(viz::causal_tile_flags(100, 100, 64, 64, true, 1, 1) == viz::kTileMasked);
  CHECK(viz::causal_tile_flags(100, 100, 64, 64, true, 1, 0) == 0u);
}

namespace {

void add_mass(Trace& t, uint32_t q, uint32_t k, float mass, float max_prob, uint32_t flags, uint32_t head = 0) {
  TileMassRecord r;
  r.head = head;
  r.q_tile = q;
  r.kv_tile = k;
  r.mass = mass;
  r.max_prob = max_prob;
  r.rows = 64;
  r.flags = flags;
  t.tile_mass.push_back(r);
}

void add_prob(Trace& t, uint32_t row, uint32_t key, float p, bool masked, uint32_t head = 0) {
  flashscope::ProbSampleRecord s;
  s.head = head;
  s.row = row;
  s.key = key;
  s.prob = masked ? 0.0f : p;
  s.flags = masked ? flashscope::ProbSampleRecord::kMasked : 0;
  t.prob_samples.push_back(s);
}

}  // namespace

TEST_CASE("viz: the tile grid takes mass from the records and time from the spans") {
  Trace t = viz_test::make_trace(128, 128, 64, 64, true, 2);
  add_mass(t, 0, 0, 1.0f, 0.5f, TileMassRecord::kMasked);
  add_mass(t, 0, 1, 0.0f, 0.0f, TileMassRecord::kSkipped);
  add_mass(t, 1, 0, 0.7f, 0.02f, 0);
  add_mass(t, 1, 1, 0.3f, 0.3f, TileMassRecord::kMasked);
  add_mass(t, 1, 1, 0.9f, 0.9f, 0, /*head=*/1);  // another head: not the traced one
  // q-tile 1's CTA: two warps; on kv tile 0 warp 0 spends 1000 ns and warp 1 3000 ns → 2 µs a warp.
  const uint32_t c1 = viz_test::add_cta(t, 0, 0, 10000, /*q_tile=*/1);
  viz_test::add_span(t, c1, 0, SpanKind::kQK, 0, 0, 1000);
  viz_test::add_span(t, c1, 1, SpanKind::kQK, 0, 0, 2500);
  viz_test::add_span(t, c1, 1, SpanKind::kSoftmax, 0, 2500, 3000);
  viz_test::add_span(t, c1, 0, SpanKind::kPV, 1, 4000, 4500);         // kv tile 1: 500 ns / 2 warps
  viz_test::add_span(t, c1, 0, SpanKind::kEpilogue, -1, 5000, 9000);  // no tile: not counted
  const uint32_t other = viz_test::add_cta(t, 1, 0, 10000, 1, /*head=*/1);
  viz_test::add_span(t, other, 0, SpanKind::kQK, 0, 0, 99000);  // another head's CTA: ignored
  add_prob(t, 70, 3, 0.25f, false);                             // row 70, key 3: block (1, 0)

  const viz::TileGrid g = viz::build_tile_grid(t);
  REQUIRE(g.q_tiles == 2);
  REQUIRE(g.kv_tiles == 2);
  CHECK(g.has_mass);
  CHECK(g.has_time);
  CHECK(g.at(1, 0).mass == doctest::Approx(0.7f));
  CHECK(g.at(1, 1).mass == doctest::Approx(0.3f));  // head 1's 0.9 did not leak in
  CHECK(g.max_mass == doctest::Approx(1.0f));
  CHECK(g.full == 1);
  CHECK(g.masked == 2);
  CHECK(g.skipped == 1);
  CHECK((g.at(0, 1).flags & viz::kTileSkipped) != 0);
  CHECK(g.at(1, 0).time_us == doctest::Approx(2.0));
  CHECK(g.at(1, 1).time_us == doctest::Approx(0.25));
  CHECK((g.at(0, 0).flags & viz::kTileHasTime) == 0);
  CHECK(g.max_time_us == doctest::Approx(2.0));
  CHECK(g.total_time_us == doctest::Approx(2.25));
  CHECK((g.at(1, 0).flags & viz::kTileSampled) != 0);
  CHECK((g.at(1, 1).flags & viz::kTileSampled) == 0);

  // With cycles at 2 ticks per µs the same spans take half the time.
  t.meta.timer_unit = flashscope::TimerUnit::kCycles;
  t.meta.timer_ticks_per_us = 2000.0;
  CHECK(viz::build_tile_grid(t).at(1, 0).time_us == doctest::Approx(1.0));
}

TEST_CASE("viz: the grid's size comes from the records, else from the shape") {
  Trace t = viz_test::make_trace(300, 300, 64, 64, true);  // varlen maxima: 5 × 5 tiles
  CHECK(viz::build_tile_grid(t).q_tiles == 5);
  const viz::TileGrid shape_only = viz::build_tile_grid(t);
  CHECK(shape_only.skipped == 10);  // 5 × 5 lower triangle with the diagonal: 10 above it
  CHECK(shape_only.masked == 5);
  CHECK_FALSE(shape_only.has_mass);
  t.meta.varlen = true;
  add_mass(t, 0, 0, 1.0f, 0.1f, TileMassRecord::kMasked);
  add_mass(t, 1, 0, 0.5f, 0.1f, 0);
  add_mass(t, 1, 1, 0.5f, 0.1f, TileMassRecord::kMasked);
  add_mass(t, 0, 1, 0.0f, 0.0f, TileMassRecord::kSkipped);
  const viz::TileGrid g = viz::build_tile_grid(t);  // the traced sequence has only 2 × 2
  CHECK(g.q_tiles == 2);
  CHECK(g.kv_tiles == 2);
}

TEST_CASE("viz: a sampled block's probabilities, masks and most probable keys") {
  Trace t = viz_test::make_trace(100, 100, 64, 64, true);
  // Block (1, 1): rows 64..99, keys 64..99, causal. Row 64 sees key 64 only.
  for (uint32_t r = 64; r < 100; ++r) {
    for (uint32_t k = 64; k < 100; ++k) add_prob(t, r, k, k <= r ? 0.01f * static_cast<float>(k - 63) : 0.0f, k > r);
  }
  for (uint32_t k = 0; k < 64; ++k) add_prob(t, 5, k, k <= 5 ? 1.0f / 6 : 0.0f, k > 5);  // block (0, 0), row 5 only
  add_prob(t, 3, 1, 0.5f, false, /*head=*/1);                                            // another head

  const std::vector<flashscope::TileCoord> tiles = viz::sampled_tiles(t);
  REQUIRE(tiles.size() == 2);
  CHECK(tiles[0].q_tile == 0);
  CHECK(tiles[0].kv_tile == 0);
  CHECK(tiles[1].q_tile == 1);
  CHECK(tiles[1].kv_tile == 1);

  const viz::ProbBlock b = viz::extract_prob_block(t, 1, 1);
  REQUIRE(b.present);
  CHECK(b.row0 == 64);
  CHECK(b.key0 == 64);
  CHECK(b.rows == 36);  // the tail tile
  CHECK(b.keys == 36);
  CHECK(b.masked_count == 36 * 35 / 2);
  CHECK(b.is_masked(0, 1));
  CHECK_FALSE(b.is_masked(1, 1));
  CHECK(b.at(35, 35) == doctest::Approx(0.36f));
  CHECK(b.max_prob == doctest::Approx(0.36f));
  CHECK(b.min_positive == doctest::Approx(0.01f));
  CHECK(b.row_mass(2) == doctest::Approx(0.06));  // 0.01 + 0.02 + 0.03
  const auto top = viz::top_keys(b, 2, 2);
  REQUIRE(top.size() == 2);
  CHECK(top[0].first == 66);
  CHECK(top[1].first == 65);
  CHECK(viz::top_keys(b, 0, 5).size() == 1);  // masked keys are not candidates

  // Block (0, 0) holds only row 5: the block ends where the samples end.
  const viz::ProbBlock first = viz::extract_prob_block(t, 0, 0);
  REQUIRE(first.present);
  CHECK(first.rows == 6);
  CHECK(first.row_mass(5) == doctest::Approx(1.0));
  CHECK_FALSE(viz::extract_prob_block(t, 1, 0).present);
}

TEST_CASE("viz: the first tile shown is the heaviest sampled one") {
  Trace t = viz_test::make_trace(128, 128, 64, 64, false);
  add_mass(t, 0, 0, 0.9f, 0.1f, 0);
  add_mass(t, 0, 1, 0.1f, 0.1f, 0);
  add_mass(t, 1, 0, 0.4f, 0.1f, 0);
  add_mass(t, 1, 1, 0.6f, 0.1f, 0);
  CHECK(viz::default_tile(viz::build_tile_grid(t)).q_tile == 0);  // nothing sampled: the heaviest
  add_prob(t, 64, 0, 0.01f, false);                               // block (1, 0)
  add_prob(t, 100, 70, 0.02f, false);                             // block (1, 1)
  const flashscope::TileCoord c = viz::default_tile(viz::build_tile_grid(t));
  CHECK(c.q_tile == 1);
  CHECK(c.kv_tile == 1);
}

TEST_CASE("viz: in a causal trace the first tile shown is off the diagonal, where the mass says something") {
  // Causal, 3 × 3 tiles: the diagonal tiles are masked and hold the most
  // mass ((0, 0) all of row 0's); (2, 0) is the heaviest tile off it.
  Trace t = viz_test::make_trace(192, 192, 64, 64, true);
  const uint32_t masked = TileMassRecord::kMasked, skipped = TileMassRecord::kSkipped;
  add_mass(t, 0, 0, 1.0f, 1.0f, masked);
  add_mass(t, 1, 0, 0.3f, 0.1f, 0);
  add_mass(t, 1, 1, 0.7f, 0.5f, masked);
  add_mass(t, 2, 0, 0.45f, 0.2f, 0);
  add_mass(t, 2, 1, 0.1f, 0.1f, 0);
  add_mass(t, 2, 2, 0.45f, 0.5f, masked);
  for (uint32_t k : {1u, 2u}) add_mass(t, 0, k, 0.0f, 0.0f, skipped);
  add_mass(t, 1, 2, 0.0f, 0.0f, skipped);
  flashscope::TileCoord c = viz::default_tile(viz::build_tile_grid(t));
  CHECK(c.q_tile == 2);  // nothing sampled: the heaviest off the diagonal
  CHECK(c.kv_tile == 0);
  add_prob(t, 5, 3, 0.2f, false);    // block (0, 0): sampled, on the diagonal
  add_prob(t, 70, 10, 0.05f, false);  // block (1, 0): sampled, off it
  c = viz::default_tile(viz::build_tile_grid(t));
  CHECK(c.q_tile == 1);
  CHECK(c.kv_tile == 0);
}
