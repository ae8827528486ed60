#include "backends/cpu/rope_cache.hpp"

#include <algorithm>
#include <cstring>

#include "backends/cpu/model_ops.hpp"

namespace flashscope::cpu {

RopeTableCache::RopeTableCache(int rope_dim, float base, float scale, const float* factors)
    : half_(std::max(rope_dim / 2, 0)), inv_freq_(rope_inv_freq(rope_dim, base, scale, factors)) {}

void RopeTableCache::grow_to(int64_t positions) {
  int64_t target = std::max<int64_t>(cached_, 256);
  while (target < positions) target *= 2;
  target = std::min(target, kMaxCachedPositions);
  if (target <= cached_) return;
  const size_t h = static_cast<size_t>(half_);
  cos_.resize(static_cast<size_t>(target) * h);
  sin_.resize(static_cast<size_t>(target) * h);
  for (int64_t p = cached_; p < target; ++p)
    rope_row(static_cast<int32_t>(p), inv_freq_.data(), half_, &cos_[static_cast<size_t>(p) * h],
             &sin_[static_cast<size_t>(p) * h]);
  cached_ = target;
}

void RopeTableCache::rows(const int32_t* positions, int64_t n, float* cos_out, float* sin_out) {
  if (half_ == 0 || n <= 0) return;
  const size_t h = static_cast<size_t>(half_);
  const int32_t top = *std::max_element(positions, positions + n);
  std::lock_guard<std::mutex> lock(mutex_);
  if (top >= cached_) grow_to(static_cast<int64_t>(top) + 1);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t p = positions[t];
    float* c = cos_out + static_cast<size_t>(t) * h;
    float* s = sin_out + static_cast<size_t>(t) * h;
    if (p >= 0 && p < cached_) {
      std::memcpy(c, &cos_[static_cast<size_t>(p) * h], h * sizeof(float));
      std::memcpy(s, &sin_[static_cast<size_t>(p) * h], h * sizeof(float));
    } else {
      rope_row(p, inv_freq_.data(), half_, c, s);
    }
  }
}

}  // namespace flashscope::cpu
