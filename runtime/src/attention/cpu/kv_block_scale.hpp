// The scale both quantized KV caches (kv_q8.hpp, kv_q4.hpp) give a block.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "flashscope/half.hpp"

namespace flashscope::cpu {

// d = fp16(max|x| / steps) over x [n], clamped to fp16's range; NaN when the
// block holds a NaN (no code holds one: a NaN scale carries it to the
// output, as a bf16 cache would).
inline float kv_block_scale(const float* x, int n, float steps) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::numeric_limits<float>::quiet_NaN();
    amax = std::max(amax, std::fabs(x[i]));
  }
  return fp16_to_float(float_to_fp16(std::min(amax / steps, 65504.0f)));
}

}  // namespace flashscope::cpu
