#include "viz/prob_block.hpp"

#include <algorithm>
#include <utility>

namespace flashscope::viz {

namespace {

bool follows(const TraceMeta& m, uint32_t batch, uint32_t head) {
  return m.traced_head < 0 || (static_cast<int>(batch) == m.traced_batch && static_cast<int>(head) == m.traced_head);
}

}  // namespace

double ProbBlock::row_mass(int r) const {
  double s = 0;
  for (int k = 0; k < keys; ++k) s += at(r, k);
  return s;
}

std::vector<TileCoord> sampled_tiles(const Trace& t) {
  const TraceMeta& m = t.meta;
  std::vector<TileCoord> out;
  if (m.block_q <= 0 || m.block_kv <= 0) return out;
  for (const ProbSampleRecord& s : t.prob_samples) {
    if (!follows(m, s.batch, s.head)) continue;
    out.push_back({static_cast<int32_t>(s.row / static_cast<uint32_t>(m.block_q)),
                   static_cast<int32_t>(s.key / static_cast<uint32_t>(m.block_kv))});
  }
  auto less = [](const TileCoord& a, const TileCoord& b) {
    return a.q_tile != b.q_tile ? a.q_tile < b.q_tile : a.kv_tile < b.kv_tile;
  };
  auto same = [](const TileCoord& a, const TileCoord& b) { return a.q_tile == b.q_tile && a.kv_tile == b.kv_tile; };
  std::sort(out.begin(), out.end(), less);
  out.erase(std::unique(out.begin(), out.end(), same), out.end());
  return out;
}

ProbBlock extract_prob_block(const Trace& t, int q_tile, int kv_tile) {
  const TraceMeta& m = t.meta;
  ProbBlock b;
  b.q_tile = q_tile;
  b.kv_tile = kv_tile;
  if (m.block_q <= 0 || m.block_kv <= 0 || q_tile < 0 || kv_tile < 0) return b;
  b.row0 = q_tile * m.block_q;
  b.key0 = kv_tile * m.block_kv;
  // The sequence's lengths are not in meta under varlen; the samples say
  // where the block ends (a sampled block is emitted whole).
  int rows = 0, keys = 0;
  for (const ProbSampleRecord& s : t.prob_samples) {
    if (!follows(m, s.batch, s.head)) continue;
    const int r = static_cast<int>(s.row) - b.row0, k = static_cast<int>(s.key) - b.key0;
    if (r < 0 || r >= m.block_q || k < 0 || k >= m.block_kv) continue;
    rows = std::max(rows, r + 1);
    keys = std::max(keys, k + 1);
  }
  if (rows == 0) return b;
  b.rows = rows;
  b.keys = keys;
  b.present = true;
  b.prob.assign(static_cast<size_t>(rows) * keys, 0.0f);
  b.masked.assign(static_cast<size_t>(rows) * keys, 0);
  float min_positive = 0.0f;
  for (const ProbSampleRecord& s : t.prob_samples) {
    if (!follows(m, s.batch, s.head)) continue;
    const int r = static_cast<int>(s.row) - b.row0, k = static_cast<int>(s.key) - b.key0;
    if (r < 0 || r >= rows || k < 0 || k >= keys) continue;
    const size_t i = static_cast<size_t>(r) * keys + k;
    if (s.flags & ProbSampleRecord::kMasked) {
      b.masked[i] = 1;
      ++b.masked_count;
      continue;
    }
    b.prob[i] = s.prob;
    b.max_prob = std::max(b.max_prob, s.prob);
    if (s.prob > 0.0f && (min_positive == 0.0f || s.prob < min_positive)) min_positive = s.prob;
  }
  b.min_positive = min_positive;
  return b;
}

TileCoord default_tile(const TileGrid& g) {
  // Ranked: sampled and off the diagonal, sampled, off the diagonal, any. A
  // diagonal tile of a causal trace is the heaviest (its first rows see a
  // key or two) and shows only the mask; off it, the mass says what the
  // head attends to (a sink, a recent stretch).
  TileCoord best[4] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
  float mass[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
  for (int q = 0; q < g.q_tiles; ++q) {
    for (int k = 0; k < g.kv_tiles; ++k) {
      const TileCell& c = g.at(q, k);
      if (c.flags & kTileSkipped) continue;
      const bool sampled = (c.flags & kTileSampled) != 0, off_diagonal = (c.flags & kTileMasked) == 0;
      const bool fits[4] = {sampled && off_diagonal, sampled, off_diagonal, true};
      for (int r = 0; r < 4; ++r) {
        if (fits[r] && c.mass > mass[r]) {
          mass[r] = c.mass;
          best[r] = {q, k};
        }
      }
    }
  }
  for (const TileCoord& c : best) {
    if (c.q_tile >= 0) return c;
  }
  return {-1, -1};
}

std::vector<std::pair<int, float>> top_keys(const ProbBlock& b, int r, int n) {
  std::vector<std::pair<int, float>> out;
  if (!b.present || r < 0 || r >= b.rows) return out;
  for (int k = 0; k < b.keys; ++k) {
    if (!b.is_masked(r, k)) out.emplace_back(b.key0 + k, b.at(r, k));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& c) { return a.second > c.second; });
  if (static_cast<int>(out.size()) > n) out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

}  // namespace flashscope::viz
