// The block reader host and device share (kernels/quant/quant_blocks.h),
// which the CPU's dequantize_row also decodes these types with, against
// llama.cpp's dequantize_row_* loops written out (support/dequant_reference.hpp):
// every group of random blocks of every type the GPU keeps quantized decodes
// to llama.cpp's values bit for bit, including rows of the 2-byte-aligned
// types that start 2 bytes off a 4-byte boundary and the last block of a
// buffer; and dequantize_row gives the same bits.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "kernels/quant/quant_blocks.h"
#include "support/dequant_reference.hpp"
#include "support/quant_blocks.hpp"

using namespace flashscope;
namespace q = flashscope::kernels::quant;


TEST_CASE("quant blocks: every group decodes to llama.cpp's values, and so does dequantize_row") {
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
    std::vector<float> ref(static_cast<size_t>(k)), cpu(static_cast<size_t>(k));
    int mismatches = 0, cpu_mismatches = 0;
    for (int r = 0; r < rows; ++r) {
      const uint8_t* row = data.data() + r * row_bytes;
      REQUIRE(flashscope::testing::dequant_reference::dequantize(gt, row, ref.data(), k));
      REQUIRE(dequantize_row(gt, row, cpu.data(), k).ok());
      cpu_mismatches += std::memcmp(cpu.data(), ref.data(), ref.size() * sizeof(float)) != 0 ? 1 : 0;
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
    CHECK(cpu_mismatches == 0);
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

// The few-row GEMM's view of a row (parts, quant_blocks.h): the four parts
// of a step hold each of the step's groups once, part_of_group inverts
// part_group, and a part loaded once decodes each of its groups to
// llama.cpp's values, bit for bit (decode_group goes through one part per group; here a
// part's bytes serve all of its groups, as they do in the kernel).
TEST_CASE("quant blocks: the parts of a step cover its groups and decode as the CPU does") {
  const int types[] = {q::kQ4_0, q::kQ4_1, q::kQ5_0, q::kQ5_1, q::kQ8_0, q::kQ4_K, q::kQ5_K, q::kQ6_K};
  std::mt19937 rng(2112);
  for (int type : types) {
    const GgmlType gt = static_cast<GgmlType>(type);
    INFO(ggml_type_name(gt));
    const int per_step = q::step_groups(type);
    CHECK(per_step * q::kGroup == (q::block_elems(type) == 256 ? 256 : 128));
    // Every group of two steps: found once among the parts, and mapped back.
    std::vector<int> seen(size_t(2 * per_step), 0);
    for (int step = 0; step < 2; ++step) {
      for (int part = 0; part < 4; ++part) {
        for (int sub = 0; sub < q::part_groups(type); ++sub) {
          const int g = q::part_group(type, step, part, sub);
          REQUIRE(g >= step * per_step);
          REQUIRE(g < (step + 1) * per_step);
          ++seen[size_t(g)];
          const q::PartOfGroup at = q::part_of_group(type, g);
          CHECK(at.step == step);
          CHECK(at.part == part);
          CHECK(at.sub == sub);
        }
      }
    }
    for (int n : seen) CHECK(n == 1);

    // A row of 2 steps plus a partial one for the 32-element types (k = 11
    // groups: the kernel's last step has parts past the row's end), two rows
    // so the second starts off a 4-byte boundary for the 2-byte-aligned types.
    const int blocks_per_row = q::block_elems(type) == 256 ? 3 : 11;
    const int k = blocks_per_row * q::block_elems(type), groups = k / q::kGroup;
    const int64_t row_bytes = int64_t(blocks_per_row) * q::block_bytes(type);
    const std::vector<uint8_t> data = flashscope::testing::random_quant_blocks(type, 2, blocks_per_row, rng);
    std::vector<float> ref(static_cast<size_t>(k));
    int mismatches = 0, decoded = 0;
    for (int r = 0; r < 2; ++r) {
      const uint8_t* row = data.data() + r * row_bytes;
      REQUIRE(flashscope::testing::dequant_reference::dequantize(gt, row, ref.data(), k));
      for (int step = 0; step * per_step < groups; ++step) {
        for (int part = 0; part < 4; ++part) {
          if (q::part_group(type, step, part, 0) >= groups) continue;  // the kernel reads no such part
          q::PartBytes b{};
          switch (type) {
            case q::kQ4_0: q::load_part<q::kQ4_0>(row, step, part, b); break;
            case q::kQ4_1: q::load_part<q::kQ4_1>(row, step, part, b); break;
            case q::kQ5_0: q::load_part<q::kQ5_0>(row, step, part, b); break;
            case q::kQ5_1: q::load_part<q::kQ5_1>(row, step, part, b); break;
            case q::kQ8_0: q::load_part<q::kQ8_0>(row, step, part, b); break;
            case q::kQ4_K: q::load_part<q::kQ4_K>(row, step, part, b); break;
            case q::kQ5_K: q::load_part<q::kQ5_K>(row, step, part, b); break;
            default: q::load_part<q::kQ6_K>(row, step, part, b); break;
          }
          for (int sub = 0; sub < q::part_groups(type); ++sub) {
            const int g = q::part_group(type, step, part, sub);
            float qv[q::kGroup];
            q::GroupScales s;
            switch (type) {
              case q::kQ4_0: s = q::decode_part<q::kQ4_0>(b, part, sub, qv); break;
              case q::kQ4_1: s = q::decode_part<q::kQ4_1>(b, part, sub, qv); break;
              case q::kQ5_0: s = q::decode_part<q::kQ5_0>(b, part, sub, qv); break;
              case q::kQ5_1: s = q::decode_part<q::kQ5_1>(b, part, sub, qv); break;
              case q::kQ8_0: s = q::decode_part<q::kQ8_0>(b, part, sub, qv); break;
              case q::kQ4_K: s = q::decode_part<q::kQ4_K>(b, part, sub, qv); break;
              case q::kQ5_K: s = q::decode_part<q::kQ5_K>(b, part, sub, qv); break;
              default: s = q::decode_part<q::kQ6_K>(b, part, sub, qv); break;
            }
            for (int i = 0; i < q::kGroup; ++i) {
              const float v = q::group_value(s, i, qv[i]), want = ref[size_t(g) * q::kGroup + i];
              if (std::memcmp(&v, &want, sizeof v) != 0) ++mismatches;
            }
            ++decoded;
          }
        }
      }
    }
    CHECK(decoded == 2 * groups);
    CHECK(mismatches == 0);
  }
}
