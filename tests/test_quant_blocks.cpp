// The GPU's block reader (kernels/quant/quant_blocks.h, host and device
// code) against the CPU dequantizer (dequantize_row, llama.cpp's
// arithmetic): every group of random blocks of every type the GPU keeps
// quantized decodes to the CPU's values bit for bit (a·q + b without
// contraction, group_value, is the CPU's expression), including blocks that start 2 bytes
// off a 4-byte boundary (the shifted-word loads) and the last block of a
// buffer (the 2-byte over-read stays inside kQuantTailPad).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "kernels/quant/quant_blocks.h"
#include "support/quant_blocks.hpp"

using namespace flashscope;
namespace q = flashscope::kernels::quant;


TEST_CASE("quant blocks: every group decodes to the CPU dequantizer's values") {
  const int types[] = {q::kQ4_0, q::kQ4_1, q::kQ5_0, q::kQ5_1, q::kQ8_0, q::kQ4_K, q::kQ5_K, q::kQ6_K};
  std::mt19937 rng(21);
  for (int type : types) {
    const GgmlType gt = static_cast<GgmlType>(type);
    const std::string type_name = ggml_type_name(gt);
    INFO(type_name);
    CHECK(q::block_bytes(type) == ggml_type_size(gt));
    CHECK(q::block_elems(type) == ggml_block_size(gt));
    // Odd block counts per row, so rows of the 2-byte-aligned types start on
    // both halves of a 4-byte word.
    const int rows = 3, blocks_per_row = q::block_elems(type) == 256 ? 3 : 7;
    const int k = blocks_per_row * q::block_elems(type);
    const int64_t row_bytes = int64_t(blocks_per_row) * q::block_bytes(type);
    const std::vector<uint8_t> data = flashscope::testing::random_quant_blocks(type, rows, blocks_per_row, rng);
    std::vector<float> ref(static_cast<size_t>(k));
    int mismatches = 0;
    for (int r = 0; r < rows; ++r) {
      const uint8_t* row = data.data() + r * row_bytes;
      REQUIRE(dequantize_row(gt, row, ref.data(), k).ok());
      for (int g = 0; g < k / q::kGroup; ++g) {
        float qv[q::kGroup];
        const q::GroupScales s = q::decode_group_any(type, row, g, qv);
        for (int i = 0; i < q::kGroup; ++i) {
          // bits, not ==: a zero's sign survives the rounding to bf16
          const float v = q::group_value(s, i, qv[i]), want = ref[size_t(g) * q::kGroup + i];
          if (std::memcmp(&v, &want, sizeof v) != 0) ++mismatches;
          if (qv[i] != static_cast<float>(static_cast<int>(qv[i]))) ++mismatches;  // q a small integer, exactly
        }
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("quant blocks: type table and the fp16 conversion") {
  CHECK(q::is_quant_type(q::kQ6_K));
  CHECK_FALSE(q::is_quant_type(0));   // F32
  CHECK_FALSE(q::is_quant_type(30));  // BF16
  CHECK_FALSE(q::is_quant_type(10));  // Q2_K: not read in place
  // Every fp16 bit pattern converts as flashscope::fp16_to_float does (NaN to NaN).
  int differ = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float a = q::fp16_bits_to_float(h), b = fp16_to_float(static_cast<uint16_t>(h));
    if (!(a == b || (a != a && b != b))) ++differ;
  }
  CHECK(differ == 0);
}
