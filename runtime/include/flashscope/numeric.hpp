// Small arithmetic the library and its front-ends (viz, the CLI, the app)
// share: the checked tile count and the median of timed runs. Public and
// self-contained so viz and the front-ends use these rather than their own;
// the kernels keep their unchecked, device-side ceil_div
// (kernels/common/math.h), since they depend on nothing of the runtime.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace flashscope {

// Tiles of `block` that cover `n` (the last one partial); 0 for an empty or
// invalid block, so a shape read from outside (a trace file) gives no tiles
// rather than a division fault.
template <typename T>
constexpr T ceil_div(T n, T block) {
  return block > 0 ? (n + block - 1) / block : T{0};
}

// The median of `values` (the mean of the middle two when their count is
// even; 0 when there are none): the steady figure of a set of timed runs,
// which one slow run — a page fault, another process — does not move.
template <typename T>
T median(std::vector<T> values) {
  if (values.empty()) return T{0};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace flashscope
