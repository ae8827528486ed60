// Random GGUF blocks for tests of the quantized paths: random bytes with
// finite fp16 scales of either sign in every block's fp16 fields, so every
// quant value and bit pattern of the packing occurs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flashscope/half.hpp"
#include "kernels/quant/quant_blocks.h"

namespace flashscope::testing {

// Offsets of a block's fp16 fields.
inline std::vector<int> quant_half_fields(int type) {
  namespace q = flashscope::kernels::quant;
  switch (type) {
    case q::kQ4_1:
    case q::kQ5_1:
    case q::kQ4_K:
    case q::kQ5_K: return {0, 2};
    case q::kQ6_K: return {208};
    default: return {0};
  }
}

// rows × blocks_per_row blocks of `type`, plus the tail the kernels may read past the last row.
template <typename Rng>
std::vector<uint8_t> random_quant_blocks(int type, int rows, int blocks_per_row, Rng& rng, float max_scale = 0.05f) {
  namespace q = flashscope::kernels::quant;
  const int bb = q::block_bytes(type);
  std::vector<uint8_t> data(size_t(rows) * blocks_per_row * bb + q::kQuantTailPad);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-max_scale, max_scale);
  for (uint8_t& b : data) b = static_cast<uint8_t>(byte(rng));
  for (int blk = 0; blk < rows * blocks_per_row; ++blk) {
    for (int off : quant_half_fields(type)) {
      const uint16_t h = float_to_fp16(scale(rng));
      data[size_t(blk) * bb + off] = static_cast<uint8_t>(h & 0xFF);
      data[size_t(blk) * bb + off + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  return data;
}

}  // namespace flashscope::testing
