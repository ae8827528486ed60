#include "viz/tile_grid.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "viz/units.hpp"

namespace flashscope::viz {

namespace {

bool follows(const TraceMeta& m, uint32_t batch, uint32_t head) {
  return m.traced_head < 0 || (static_cast<int>(batch) == m.traced_batch && static_cast<int>(head) == m.traced_head);
}

}  // namespace

uint32_t causal_tile_flags(int q_len, int kv_len, int block_q, int block_kv, bool causal, int q_tile, int kv_tile) {
  if (!causal || block_q <= 0 || block_kv <= 0) return 0;
  const int shift = kv_len - q_len;
  const int first_row = q_tile * block_q;
  const int last_row = std::min(q_len, first_row + block_q) - 1;
  const int first_key = kv_tile * block_kv;
  const int last_key = std::min(kv_len, first_key + block_kv) - 1;
  if (first_key > last_row + shift) return kTileSkipped;
  if (last_key > first_row + shift) return kTileMasked;
  return 0;
}

TileGrid build_tile_grid(const Trace& t) {
  const TraceMeta& m = t.meta;
  TileGrid g;
  g.block_q = m.block_q;
  g.block_kv = m.block_kv;
  g.batch = m.traced_batch;
  g.head = m.traced_head;
  g.q_tiles = ceil_div(m.q_len, m.block_q);
  g.kv_tiles = ceil_div(m.kv_len, m.block_kv);
  bool from_records = false;
  for (const TileMassRecord& r : t.tile_mass) {
    if (!follows(m, r.batch, r.head)) continue;
    if (!from_records) g.q_tiles = g.kv_tiles = 0;
    from_records = true;
    g.q_tiles = std::max(g.q_tiles, static_cast<int>(r.q_tile) + 1);
    g.kv_tiles = std::max(g.kv_tiles, static_cast<int>(r.kv_tile) + 1);
  }
  g.cells.assign(static_cast<size_t>(g.q_tiles) * g.kv_tiles, TileCell{});
  for (int q = 0; q < g.q_tiles; ++q) {
    for (int k = 0; k < g.kv_tiles; ++k) {
      g.cells[static_cast<size_t>(q) * g.kv_tiles + k].flags =
          causal_tile_flags(m.q_len, m.kv_len, m.block_q, m.block_kv, m.causal, q, k);
    }
  }
  auto cell = [&](uint32_t q, uint32_t k) -> TileCell* {
    if (static_cast<int>(q) >= g.q_tiles || static_cast<int>(k) >= g.kv_tiles) return nullptr;
    return &g.cells[static_cast<size_t>(q) * g.kv_tiles + k];
  };

  for (const TileMassRecord& r : t.tile_mass) {
    if (!follows(m, r.batch, r.head)) continue;
    TileCell* c = cell(r.q_tile, r.kv_tile);
    c->mass = r.mass;
    c->max_prob = r.max_prob;
    c->rows = r.rows;
    c->flags =
        (c->flags & ~uint32_t{kTileSkipped | kTileMasked}) | (r.flags & (kTileSkipped | kTileMasked)) | kTileHasMass;
    g.has_mass = true;
  }
  for (const ProbSampleRecord& s : t.prob_samples) {
    if (!follows(m, s.batch, s.head) || m.block_q <= 0 || m.block_kv <= 0) continue;
    if (TileCell* c = cell(s.row / static_cast<uint32_t>(m.block_q), s.key / static_cast<uint32_t>(m.block_kv))) {
      c->flags |= kTileSampled;
    }
  }

  // Time: per (q-tile, kv-tile), the span time summed over the CTAs of the
  // traced head, divided by the warps of each CTA that recorded spans.
  std::map<uint32_t, std::set<uint32_t>> warps_of_cta;
  for (const WarpSpanRecord& s : t.spans) {
    if (s.cta < t.ctas.size()) warps_of_cta[s.cta].insert(s.warp);
  }
  for (const WarpSpanRecord& s : t.spans) {
    if (s.kv_tile < 0 || s.cta >= t.ctas.size()) continue;
    const CtaRecord& c = t.ctas[s.cta];
    if (!follows(m, c.batch, c.head)) continue;
    TileCell* cl = cell(c.q_tile, static_cast<uint32_t>(s.kv_tile));
    if (cl == nullptr) continue;
    const double warps = static_cast<double>(warps_of_cta[s.cta].size());
    cl->time_us += ticks_to_us(m, static_cast<double>(s.end - s.start)) / warps;
    cl->flags |= kTileHasTime;
    g.has_time = true;
  }

  for (const TileCell& c : g.cells) {
    if (c.flags & kTileSkipped)
      ++g.skipped;
    else if (c.flags & kTileMasked)
      ++g.masked;
    else
      ++g.full;
    g.max_mass = std::max(g.max_mass, c.mass);
    g.max_time_us = std::max(g.max_time_us, c.time_us);
    g.total_time_us += c.time_us;
  }
  return g;
}

}  // namespace flashscope::viz
