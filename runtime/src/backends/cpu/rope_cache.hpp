// RoPE's cos/sin rows by position, computed once and copied after, with
// cpu::rope_table's values bit for bit (the same formula, rope_row).
//
// Why: the CUDA step uploads a table row per token and layer base, and
// computing it is a pow, a cos and a sin in double per pair, which for a
// prompt took longer on the host than the prompt's kernels on the GPU
// (bench/TUNING.md#engine). Positions
// repeat across steps and sessions, so rows are computed the first time a
// position is seen (the cache grows in powers of two up to kMaxCachedPositions;
// past it rows are computed each time) and copied from then on.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace flashscope::cpu {

class RopeTableCache {
 public:
  static constexpr int64_t kMaxCachedPositions = int64_t{1} << 16;

  // One table: angle = pos · scale · base^(−2i/rope_dim) / factors[i] (factors
  // [rope_dim / 2] copied, or null), as rope_table.
  RopeTableCache(int rope_dim, float base, float scale, const float* factors);

  // cos/sin [n, rope_dim / 2] for positions[0..n). Safe to call from several threads.
  void rows(const int32_t* positions, int64_t n, float* cos_out, float* sin_out);

 private:
  void grow_to(int64_t positions);  // mutex_ held

  int half_;
  std::vector<double> inv_freq_;  // [half]
  std::mutex mutex_;
  std::vector<float> cos_, sin_;  // [cached, half]
  int64_t cached_ = 0;
};

}  // namespace flashscope::cpu
