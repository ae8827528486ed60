// The one-token K-quant product against per-256 activations
// (backends/cpu/quant_matmul_kdot.hpp): every build against the exact sum of
// what it multiplies (random and extreme blocks), batched rows against solo
// ones bit for bit, and the activation quantizer against the prefill tiles'.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant_matmul.hpp"
#include "backends/cpu/quant_matmul_kdot.hpp"
#include "backends/cpu/quant_matmul_kquant.hpp"
#include "flashscope/gguf.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::GgmlType;
using flashscope::cpu::BlockQ8K;
using flashscope::cpu::CpuIsa;
using flashscope::testing::SyntheticLlama;

namespace {

constexpr CpuIsa kIsas[] = {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni};

// Restores the detected instruction set when a case ends, however it ends.
struct IsaReset {
  ~IsaReset() { flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa()); }
};

// Runs matmul_q8k_rows of x [n, cols] against w in every build and checks
// each against the exact sum of the dequantized weights times the blocks'
// d · q; n > 1 also against n solo calls, bit for bit.
void check_every_build(const flashscope::cpu::QuantMatrix& w, const std::vector<float>& x, int n) {
  const IsaReset reset;
  const int64_t rows = w.rows, cols = w.cols, nsb = cols / 256;
  std::vector<float> wf(static_cast<size_t>(rows * cols));
  REQUIRE(flashscope::dequantize_row(w.type, w.data, wf.data(), rows * cols).ok());
  for (CpuIsa isa : kIsas) {
    flashscope::cpu::set_cpu_isa(isa);
    const std::string isa_name = flashscope::cpu::cpu_isa_name(flashscope::cpu::active_cpu_isa());
    CAPTURE(isa_name);
    std::vector<BlockQ8K> xq(static_cast<size_t>(n * nsb));
    for (int t = 0; t < n; ++t) flashscope::cpu::quantize_row_q8k(x.data() + t * cols, xq.data() + t * nsb, cols);
    double scale = 0, max_err = 0;
    const int64_t ldy = rows + 3;  // wider than rows: the padding must stay untouched
    std::vector<float> y(static_cast<size_t>(n * ldy), -7.0f);
    REQUIRE(flashscope::cpu::matmul_q8k_rows(w, xq.data(), n, y.data(), ldy).ok());
    for (int t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const BlockQ8K& b = xq[static_cast<size_t>(t * nsb + c / 256)];
          want += static_cast<double>(wf[static_cast<size_t>(r * cols + c)]) * b.d * b.qs[c % 256];
        }
        scale = std::max(scale, std::fabs(want));
        max_err = std::max(max_err, std::fabs(y[static_cast<size_t>(t * ldy + r)] - want));
      }
    }
    // Integer sums are exact; float accumulation of a few super-blocks' scaled sums remains.
    CHECK(scale > 0);
    CHECK(max_err <= 1e-5 * scale);
    bool padding_kept = true;
    for (int t = 0; t < n; ++t)
      for (int64_t r = rows; r < ldy; ++r) padding_kept = padding_kept && y[static_cast<size_t>(t * ldy + r)] == -7.0f;
    CHECK(padding_kept);
    for (int t = 0; n > 1 && t < n; ++t) {
      std::vector<float> solo(static_cast<size_t>(rows));
      REQUIRE(flashscope::cpu::matmul_q8k_rows(w, xq.data() + t * nsb, 1, solo.data(), rows).ok());
      CHECK(std::memcmp(solo.data(), y.data() + t * ldy, solo.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace

TEST_CASE("kquant rows: Q4_K, Q5_K, Q6_K against dequantize-then-dot of the quantized activations, every build") {
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37;  // odd
  for (const int64_t cols : {int64_t{256}, int64_t{1024}})
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::string type_name = flashscope::ggml_type_name(type);
    CAPTURE(type_name);
    CAPTURE(cols);
    REQUIRE(flashscope::cpu::is_k_quant(type));
    const auto bytes = SyntheticLlama::random_blocks(type, rows * cols, 1.0f, rng);
    const flashscope::cpu::QuantMatrix w{type, rows, cols, bytes.size() / static_cast<uint64_t>(rows), bytes.data()};
    for (int n : {1, 3}) {
      CAPTURE(n);
      // A wide range between super-blocks.
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (1.0f + static_cast<float>(i / 256 % 7));
      check_every_build(w, x, n);
    }
  }
}

TEST_CASE("kquant rows: extreme blocks (every weight and scale at its end, activations at +-127) stay exact") {
  // Q4_K / Q5_K: d = dmin = 1, all scale and min bits set (63), all nibbles
  // (and fifth bits) set or clear; Q6_K: all 6 bits set or clear, scales
  // -128 or 127. Activations at the top of their range: maddubs pairs and
  // the scaled int32 sums at their largest.
  std::mt19937_64 rng(3);
  const int64_t rows = 5, cols = 512;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::string type_name = flashscope::ggml_type_name(type);
    CAPTURE(type_name);
    const size_t block = type == GgmlType::kQ4_K ? 144 : type == GgmlType::kQ5_K ? 176 : 210;
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / 256) * block);
    for (size_t b = 0; b < bytes.size() / block; ++b) {
      uint8_t* blk = bytes.data() + b * block;
      const uint8_t fill = (b % 3 == 1) ? 0x00 : 0xFF;
      if (type == GgmlType::kQ6_K) {
        std::memset(blk, fill, 192);                       // ql, qh
        std::memset(blk + 192, b % 2 ? 0x80 : 0x7F, 16);  // int8 scales -128 or 127
        blk[208] = 0x00;                                   // d = 1.0 (fp16 0x3C00)
        blk[209] = 0x3C;
      } else {
        blk[0] = 0x00, blk[1] = 0x3C, blk[2] = 0x00, blk[3] = 0x3C;  // d, dmin = 1.0
        std::memset(blk + 4, 0xFF, 12);                              // every scale and min 63
        std::memset(blk + 16, fill, block - 16);                     // (qh,) qs
      }
    }
    const flashscope::cpu::QuantMatrix w{type, rows, cols, bytes.size() / rows, bytes.data()};
    std::vector<float> x(static_cast<size_t>(2 * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 256 % 2 ? -1.0f : 1.0f) * (rng() % 4 == 0 ? -3.0f : 3.0f);
    std::fill(x.begin(), x.begin() + 256, 3.0f);  // token 0's first super-block: every x_q = 127
    check_every_build(w, x, 2);
  }
}

TEST_CASE("kquant rows: each build quantizes as pack_q8k_tiles does, bit for bit") {
  const IsaReset reset;
  constexpr int kT = flashscope::cpu::kKTileTokens;
  std::mt19937_64 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cols = 768, nsb = 3;
  std::vector<float> x(static_cast<size_t>(kT * cols));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = normal(rng) * std::pow(10.0f, static_cast<float>(i / 256 % 13) * 5.0f - 30.0f);
  }
  // Exact .5 ties (amax 127: 1/d = 1), zeros, -0.0.
  for (int i = 0; i < 256; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 2 ? i % 100 : -(i % 100)) - 0.5f;
  x[0] = 127.0f;
  std::fill(x.begin() + 256, x.begin() + 512, -0.0f);
  flashscope::cpu::set_cpu_isa(CpuIsa::kPortable);
  std::vector<flashscope::cpu::TileQ8K> tiles(static_cast<size_t>(nsb));
  flashscope::cpu::pack_q8k_tiles(x.data(), cols, kT, cols, tiles.data());
  std::vector<std::vector<BlockQ8K>> out;
  for (CpuIsa isa : kIsas) {
    flashscope::cpu::set_cpu_isa(isa);
    if (flashscope::cpu::active_cpu_isa() != isa) continue;
    out.emplace_back(static_cast<size_t>(kT * nsb));
    for (int t = 0; t < kT; ++t) flashscope::cpu::quantize_row_q8k(x.data() + t * cols, out.back().data() + t * nsb, cols);
  }
  REQUIRE(!out.empty());
  CHECK(out[0][0].qs[1] == 0);   // 0.5 rounds to even
  CHECK(out[0][0].qs[2] == -2);  // -2.5 too
  for (size_t v = 0; v < out.size(); ++v) {
    CAPTURE(v);
    bool same = true;
    for (int t = 0; t < kT; ++t) {
      for (int64_t b = 0; b < nsb; ++b) {
        const BlockQ8K& blk = out[v][static_cast<size_t>(t * nsb + b)];
        const flashscope::cpu::TileQ8K& tile = tiles[static_cast<size_t>(b)];
        same = same && std::memcmp(&blk.d, &tile.d[t], sizeof blk.d) == 0;
        for (int i = 0; i < 256; ++i) same = same && blk.qs[i] == flashscope::cpu::q8k_value(tile, t, i);
        for (int g = 0; g < 16; ++g) same = same && blk.bsums[g] == tile.bsums[g / 2][t][g % 2];
      }
    }
    CHECK(same);
  }
}

TEST_CASE("kquant rows: a NaN activation gives NaN outputs in the portable build (zeros under a NaN scale)") {
  const IsaReset reset;
  flashscope::cpu::set_cpu_isa(CpuIsa::kPortable);
  std::mt19937_64 rng(4);
  const int64_t rows = 3, cols = 512;
  const auto bytes = SyntheticLlama::random_blocks(GgmlType::kQ4_K, rows * cols, 1.0f, rng);
  const flashscope::cpu::QuantMatrix w{GgmlType::kQ4_K, rows, cols, bytes.size() / rows, bytes.data()};
  std::vector<float> x(static_cast<size_t>(cols), 0.5f);
  x[300] = std::nanf("");
  std::vector<BlockQ8K> xq(2);
  flashscope::cpu::quantize_row_q8k(x.data(), xq.data(), cols);
  CHECK(xq[0].d == 0.5f / 127.0f);  // the other super-block as usual
  CHECK(std::isnan(xq[1].d));
  CHECK(std::all_of(std::begin(xq[1].qs), std::end(xq[1].qs), [](int8_t q) { return q == 0; }));
  std::vector<float> y(static_cast<size_t>(rows));
  REQUIRE(flashscope::cpu::matmul_q8k_rows(w, xq.data(), 1, y.data(), rows).ok());
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); }));
}

TEST_CASE("kquant rows: other types, null pointers and ragged columns are refused") {
  std::vector<uint8_t> bytes(144 * 2);
  std::vector<BlockQ8K> x(2);
  std::vector<float> y(4);
  const flashscope::cpu::QuantMatrix w{GgmlType::kQ4_K, 2, 256, 144, bytes.data()};
  CHECK(flashscope::cpu::matmul_q8k_rows(w, nullptr, 1, y.data(), 2).code() == flashscope::StatusCode::kInvalidArgument);
  CHECK(flashscope::cpu::matmul_q8k_rows(w, x.data(), 1, nullptr, 2).code() == flashscope::StatusCode::kInvalidArgument);
  const flashscope::cpu::QuantMatrix ragged{GgmlType::kQ4_K, 1, 288, 162, bytes.data()};
  CHECK(flashscope::cpu::matmul_q8k_rows(ragged, x.data(), 1, y.data(), 1).code() ==
        flashscope::StatusCode::kInvalidArgument);
  const flashscope::cpu::QuantMatrix q8{GgmlType::kQ8_0, 2, 256, 272, bytes.data()};
  CHECK_FALSE(flashscope::cpu::is_k_quant(GgmlType::kQ8_0));
  CHECK(flashscope::cpu::matmul_q8k_rows(q8, x.data(), 1, y.data(), 2).code() == flashscope::StatusCode::kUnsupported);
  CHECK(y == std::vector<float>(4, 0.0f));  // nothing written
}
