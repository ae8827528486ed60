// The q-tile × kv-tile grid of the traced head: attention mass from the
// tile_mass records, time per tile from the warp spans, and which tiles
// causal masking or a sliding window skipped or cut (the diagonal, the
// window's edges: from the tile_mass records' flags).
//
// Time per tile: for each CTA of the traced head, the spans tagged with KV
// tile t (loads, QKᵀ, softmax, PV) are summed per warp and averaged over
// the warps that recorded spans — "how long a warp of this CTA spent on
// tile t". Where loads of t+1 overlap the math of t (v3..v6) both count
// toward their own tile, so the row of a pipelined kernel can sum to more
// than the CTA's wall time; that is the overlap, not an error.
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

// Flags of a cell; kSkipped and kMasked carry the trace's TileMassRecord bits.
enum TileFlag : uint32_t {
  kTileSkipped = TileMassRecord::kSkipped,  // causal or window: never computed
  kTileMasked = TileMassRecord::kMasked,    // the diagonal or a window's edge crosses it
  kTileSampled = 4,                         // the trace holds its probabilities
  kTileHasMass = 8,                         // a tile_mass record exists
  kTileHasTime = 16,                        // spans of this tile exist
};

struct TileCell {
  float mass = 0.0f;  // share of the average row's attention (see trace_records.hpp)
  float max_prob = 0.0f;
  uint32_t rows = 0;     // rows of the q-tile that see at least one key
  uint32_t flags = 0;    // TileFlag bits
  double time_us = 0.0;  // mean warp time on the tile (valid with kTileHasTime)
};

struct TileGrid {
  int q_tiles = 0, kv_tiles = 0;
  int block_q = 0, block_kv = 0;
  int batch = -1, head = -1;    // the traced sequence and head; -1: none
  std::vector<TileCell> cells;  // q-tile major: cells[q * kv_tiles + k]

  int full = 0, masked = 0, skipped = 0;  // computed tiles split by the diagonal, and skipped ones
  float max_mass = 0.0f;
  double max_time_us = 0.0, total_time_us = 0.0;
  bool has_mass = false, has_time = false;

  const TileCell& at(int q, int k) const { return cells[static_cast<size_t>(q) * kv_tiles + k]; }
};

// Skipped / masked from geometry alone (bottom-right causal alignment:
// query i sees key j iff j <= i + kv_len - q_len). 0 when not causal.
uint32_t causal_tile_flags(int q_len, int kv_len, int block_q, int block_kv, bool causal, int q_tile, int kv_tile);

// The grid of the traced (batch, head). Its size comes from the tile_mass
// records when present (the traced sequence's own lengths under varlen),
// else from meta's lengths. Tiles without a record get geometric flags.
TileGrid build_tile_grid(const Trace& t);

}  // namespace flashscope::viz
