// The CPU quantizers (quantize_row: Q8_0, Q5_0, Q4_K, Q5_K, Q6_K) read back
// through the dequantizer: normal-distributed rows (and rows with an
// outlier, an all-zero block and an all-negative block) come back within
// each type's rounding step, and the bytes are llama.cpp's layout (values
// on the grid of a block round-trip exactly for Q8_0).
//
// Bounds per element: half a quantization step of the element's group,
// plus the fp16 rounding of the block scales (2^-11 relative of the group's
// range, twice for the K-quants' two levels of scales). As RMS over a
// normal row, a uniform rounding error is step/√12: Q8_0 ~0.6%, Q6_K ~2%,
// Q5_0 / Q5_K ~5%, Q4_K ~9% of σ; the bounds are about 1.5× that. A wrong
// nibble, bit or scale packing gives errors of the order of σ.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"

using namespace flashscope;

namespace {

struct Case {
  GgmlType type;
  double rms_bound;  // of σ
  int levels;        // quantization levels across a group's range (step = range / levels)
  int group;         // elements sharing a step
  double max_steps;  // the largest error, in steps: half a step, or one where the quantizer clamps
};

}  // namespace

TEST_CASE("quantize: Q8_0, Q5_0, Q4_K, Q5_K, Q6_K round-trip through the dequantizer within their step") {
  // Q5_0 (llama.cpp's rule): d = the largest-magnitude value / -16, so the
  // other sign's values up to that magnitude reach level 32 and clamp to 31.
  const Case cases[] = {{GgmlType::kQ8_0, 0.01, 254, 32, 0.5},
                        {GgmlType::kQ5_0, 0.08, 32, 32, 1.0},
                        {GgmlType::kQ4_K, 0.14, 15, 32, 0.5},
                        {GgmlType::kQ5_K, 0.075, 31, 32, 0.5},
                        {GgmlType::kQ6_K, 0.03, 62, 16, 0.5}};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : cases) {
    const std::string type_name = ggml_type_name(c.type);
    INFO(type_name);
    REQUIRE(ggml_type_can_quantize(c.type));
    const int64_t n = 4 * 256;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    x[5] = 9.0f;                                                     // an outlier
    std::fill(x.begin() + 256, x.begin() + 256 + 32, 0.0f);          // an all-zero group
    for (int i = 512; i < 512 + 32; ++i) x[i] = -std::fabs(x[i]) - 0.5f;  // an all-negative group
    std::vector<uint8_t> blocks(static_cast<size_t>(n / ggml_block_size(c.type) * ggml_type_size(c.type)));
    REQUIRE(quantize_row(c.type, x.data(), blocks.data(), n).ok());
    std::vector<float> back(static_cast<size_t>(n));
    REQUIRE(dequantize_row(c.type, blocks.data(), back.data(), n).ok());
    double se = 0;
    int over = 0;
    const bool k_quant = ggml_block_size(c.type) == 256;
    auto group_range = [&](int64_t g, float* lo, float* hi) {
      *lo = 0.0f;
      *hi = 0.0f;
      for (int l = 0; l < c.group; ++l) {
        *lo = std::min(*lo, x[static_cast<size_t>(g * c.group + l)]);
        *hi = std::max(*hi, x[static_cast<size_t>(g * c.group + l)]);
      }
      // Q4_K / Q5_K quantize [min, max] (holding 0); the symmetric types ±max|x|.
      const bool asym = c.type == GgmlType::kQ4_K || c.type == GgmlType::kQ5_K;
      return asym ? static_cast<double>(*hi - *lo) : 2.0 * std::max(-*lo, *hi);
    };
    for (int64_t g = 0; g < n / c.group; ++g) {
      float lo, hi;
      const double range = group_range(g, &lo, &hi);
      // The K-quants' group scales (and mins) are 6- or 8-bit multiples of
      // the block's largest: rounding them moves a group's extreme values by
      // up to about the block's largest range / 63.
      double extra = 2e-3 * range;  // fp16 scale
      if (k_quant) {
        const int64_t per_block = 256 / c.group, first = g / per_block * per_block;
        double block_max = 0;
        for (int64_t h = first; h < first + per_block; ++h) {
          float l2, h2;
          block_max = std::max(block_max, group_range(h, &l2, &h2));
        }
        extra = block_max / 60.0;
      }
      for (int l = 0; l < c.group; ++l) {
        const size_t i = static_cast<size_t>(g * c.group + l);
        const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
        se += err * err;
        if (err > c.max_steps * range / c.levels + extra + 1e-6) ++over;
      }
    }
    const double rms = std::sqrt(se / static_cast<double>(n));
    MESSAGE(type_name << ": round-trip RMS error " << rms << " σ");
    CHECK(rms <= c.rms_bound);
    CHECK(over == 0);
    for (int i = 256; i < 256 + 32; ++i) CHECK(back[static_cast<size_t>(i)] == 0.0f);  // zeros stay zero
  }
}

TEST_CASE("quantize: Q8_0 values on a block's grid round-trip exactly; bad arguments") {
  // amax 4, so d = 4/127 and k·d for integer k lies on the grid.
  std::vector<float> x(32);
  x[0] = -4.0f;
  for (int j = 1; j < 32; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j - 16) * (4.0f / 127.0f);
  std::vector<uint8_t> b(34);
  REQUIRE(quantize_row(GgmlType::kQ8_0, x.data(), b.data(), 32).ok());
  CHECK(static_cast<int8_t>(b[2]) == -127);
  for (int j = 1; j < 32; ++j) CHECK(static_cast<int8_t>(b[static_cast<size_t>(2 + j)]) == j - 16);

  std::vector<float> out(256);
  CHECK(quantize_row(GgmlType::kQ4_K, x.data(), b.data(), 32).code() == StatusCode::kInvalidArgument);  // not a block
  CHECK(quantize_row(GgmlType::kQ4_1, x.data(), b.data(), 32).code() == StatusCode::kUnsupported);
  x[3] = NAN;
  CHECK(quantize_row(GgmlType::kQ8_0, x.data(), b.data(), 32).code() == StatusCode::kInvalidArgument);
  CHECK(quantize_row(GgmlType::kQ8_0, nullptr, b.data(), 32).code() == StatusCode::kInvalidArgument);
}
