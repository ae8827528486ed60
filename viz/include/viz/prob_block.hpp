// The softmax probabilities of one (q-tile, kv-tile) block, from the
// trace's prob_sample records ("click a tile to see its probabilities"),
// and which blocks a trace sampled.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "flashscope/trace_records.hpp"
#include "viz/tile_grid.hpp"

namespace flashscope::viz {

struct ProbBlock {
  int q_tile = -1, kv_tile = -1;
  int row0 = 0, key0 = 0;       // first row and key of the block, within the sequence
  int rows = 0, keys = 0;       // the block's extent (tails are shorter)
  bool present = false;         // the trace sampled this block
  std::vector<float> prob;      // [rows × keys], row-major; 0 where masked or absent
  std::vector<uint8_t> masked;  // [rows × keys]: 1 where the key is not visible to the row
  float max_prob = 0.0f, min_positive = 0.0f;
  int masked_count = 0;

  float at(int r, int k) const { return prob[static_cast<size_t>(r) * keys + k]; }
  bool is_masked(int r, int k) const { return masked[static_cast<size_t>(r) * keys + k] != 0; }
  // Σ_k p over the block for one row: the row's probability mass on this block.
  double row_mass(int r) const;
};

// Blocks of the traced head with probability samples, sorted (q-tile, kv-tile).
std::vector<TileCoord> sampled_tiles(const Trace& t);

// The block's probabilities; present = false when the trace has none for it.
ProbBlock extract_prob_block(const Trace& t, int q_tile, int kv_tile);

// The block to show first: the sampled block off the diagonal (not crossed
// by the causal mask) with the most mass, else the heaviest sampled block,
// else the heaviest block off the diagonal, else the heaviest; skipped
// blocks never; {-1, -1} for an empty grid.
TileCoord default_tile(const TileGrid& g);

// The `n` most probable keys of row r of the block, most probable first
// (key indices within the sequence), for the probability table.
std::vector<std::pair<int, float>> top_keys(const ProbBlock& b, int r, int n);

}  // namespace flashscope::viz
