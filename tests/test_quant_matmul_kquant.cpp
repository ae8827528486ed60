// The K-quant prefill GEMM against per-256 activation tiles
// (backends/cpu/quant_matmul_kquant.hpp): every build against the exact sum
// of what it multiplies, and the activation quantizer's builds bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant_matmul.hpp"
#include "backends/cpu/quant_matmul_kquant.hpp"
#include "flashscope/gguf.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::GgmlType;
using flashscope::cpu::CpuIsa;
using flashscope::cpu::TileQ8K;
using flashscope::testing::SyntheticLlama;
constexpr int kT = flashscope::cpu::kKTileTokens;

namespace {

constexpr CpuIsa kIsas[] = {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni};

// Restores the detected instruction set when a case ends, however it ends.
struct IsaReset {
  ~IsaReset() { flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa()); }
};

}  // namespace

TEST_CASE("kquant tiles: Q4_K, Q5_K, Q6_K against dequantize-then-dot of the tiled activations, every build") {
  const IsaReset reset;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37;  // odd, not a multiple of any row block
  // 1280: five super-blocks, past one column segment (4): a second, partial
  // segment adds onto the first's outputs.
  for (const int64_t cols : {int64_t{256}, int64_t{768}, int64_t{1280}})
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::string type_name = flashscope::ggml_type_name(type);
    CAPTURE(type_name);
    CAPTURE(cols);
    REQUIRE(flashscope::cpu::is_k_quant(type));
    const auto bytes = SyntheticLlama::random_blocks(type, rows * cols, 1.0f, rng);
    flashscope::cpu::QuantMatrix w{type, rows, cols, bytes.size() / static_cast<uint64_t>(rows), bytes.data()};
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    REQUIRE(flashscope::dequantize_row(type, bytes.data(), wf.data(), rows * cols).ok());
    for (int n : {kT, 2 * kT + 3}) {  // one tile; two tiles with 3 tokens the tiles leave out
      CAPTURE(n);
      const int n_tiles = n / kT;
      const int64_t nsb = cols / 256;
      // Activations with a wide range between super-blocks, and a ldx wider than cols.
      const int64_t ldx = cols + 5;
      std::vector<float> x(static_cast<size_t>(n * ldx));
      for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (1.0f + static_cast<float>(i / 256 % 7));
      std::vector<TileQ8K> tiles(static_cast<size_t>(n_tiles * nsb));
      flashscope::cpu::pack_q8k_tiles(x.data(), ldx, n, cols, tiles.data());
      // The exact sums of what the kernels multiply: the dequantized weights
      // and the tiles' d · q.
      std::vector<double> want(static_cast<size_t>(n_tiles * kT * rows));
      double scale = 0;
      for (int t = 0; t < n_tiles * kT; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double acc = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const TileQ8K& tile = tiles[static_cast<size_t>(t / kT * nsb + c / 256)];
            const double xv = static_cast<double>(tile.d[t % kT]) *
                              flashscope::cpu::q8k_value(tile, t % kT, static_cast<int>(c % 256));
            acc += static_cast<double>(wf[static_cast<size_t>(r * cols + c)]) * xv;
          }
          want[static_cast<size_t>(t * rows + r)] = acc;
          scale = std::max(scale, std::fabs(acc));
        }
      }
      for (CpuIsa isa : kIsas) {
        flashscope::cpu::set_cpu_isa(isa);
        const std::string isa_name = flashscope::cpu::cpu_isa_name(flashscope::cpu::active_cpu_isa());
        CAPTURE(isa_name);
        // ldy wider than rows; the padding must stay untouched.
        const int64_t ldy = rows + 3;
        std::vector<float> y(static_cast<size_t>(n * ldy), -7.0f);
        REQUIRE(flashscope::cpu::matmul_q8k_tiles(w, tiles.data(), n_tiles, y.data(), ldy).ok());
        double max_err = 0;
        for (int t = 0; t < n_tiles * kT; ++t)
          for (int64_t r = 0; r < rows; ++r)
            max_err = std::max(max_err, std::fabs(y[static_cast<size_t>(t * ldy + r)] -
                                                  want[static_cast<size_t>(t * rows + r)]));
        // Integer sums are exact; float accumulation of a few super-blocks' scaled sums remains.
        CHECK(max_err <= 1e-5 * scale);
        bool padding_kept = true;
        for (int t = 0; t < n; ++t)
          for (int64_t r = (t < n_tiles * kT ? rows : 0); r < ldy; ++r)
            padding_kept = padding_kept && y[static_cast<size_t>(t * ldy + r)] == -7.0f;
        CHECK(padding_kept);
      }
    }
  }
}

TEST_CASE("kquant tiles: the activations are rounded to nearest within half a step of their super-block scale") {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cols = 512;
  std::vector<float> x(static_cast<size_t>(kT * cols));
  for (float& v : x) v = normal(rng);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // token 0's second super-block: all zero
  std::vector<TileQ8K> tiles(2);
  flashscope::cpu::pack_q8k_tiles(x.data(), cols, kT, cols, tiles.data());
  for (int t = 0; t < kT; ++t) {
    for (int b = 0; b < 2; ++b) {
      const TileQ8K& tile = tiles[static_cast<size_t>(b)];
      float amax = 0;
      for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(t * cols + b * 256 + i)]));
      CHECK(tile.d[t] == amax / 127.0f);
      int sums[16] = {};
      for (int i = 0; i < 256; ++i) {
        const int q = flashscope::cpu::q8k_value(tile, t, i);
        sums[i / 16] += q;
        const float xv = x[static_cast<size_t>(t * cols + b * 256 + i)];
        CHECK(std::fabs(tile.d[t] * static_cast<float>(q) - xv) <= 0.5f * tile.d[t] * 1.0001f);
      }
      for (int g = 0; g < 16; ++g) CHECK(tile.bsums[g / 2][t][g % 2] == sums[g]);
    }
  }
}

TEST_CASE("kquant tiles: each build of the activation quantizer gives the portable one's bits") {
  const IsaReset reset;
  std::mt19937_64 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cols = 768;
  std::vector<float> x(static_cast<size_t>(2 * kT * cols));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = normal(rng) * std::pow(10.0f, static_cast<float>(i / 256 % 13) * 5.0f - 30.0f);
  }
  // Exact .5 ties (amax 127: 1/d = 1), zeros, -0.0.
  for (int i = 0; i < 256; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 2 ? i % 100 : -(i % 100)) - 0.5f;
  x[0] = 127.0f;
  std::fill(x.begin() + 256, x.begin() + 512, -0.0f);
  std::vector<std::vector<TileQ8K>> out;
  for (CpuIsa isa : kIsas) {
    flashscope::cpu::set_cpu_isa(isa);
    if (flashscope::cpu::active_cpu_isa() != isa) continue;
    out.emplace_back(6);
    flashscope::cpu::pack_q8k_tiles(x.data(), cols, 2 * kT, cols, out.back().data());
  }
  flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
  REQUIRE(!out.empty());
  CHECK(flashscope::cpu::q8k_value(out[0][0], 0, 1) == 0);   // 0.5 rounds to even
  CHECK(flashscope::cpu::q8k_value(out[0][0], 0, 2) == -2);  // -2.5 too
  for (size_t v = 1; v < out.size(); ++v) {
    CAPTURE(v);
    CHECK(std::memcmp(out[v].data(), out[0].data(), out[0].size() * sizeof(TileQ8K)) == 0);
  }
}

TEST_CASE("kquant tiles: other types, null pointers and ragged columns are refused") {
  std::vector<uint8_t> bytes(144 * 2);
  std::vector<TileQ8K> tiles(1);
  std::vector<float> y(kT * 2);
  flashscope::cpu::QuantMatrix w{GgmlType::kQ4_K, 2, 256, 144, bytes.data()};
  CHECK(flashscope::cpu::matmul_q8k_tiles(w, nullptr, 1, y.data(), 2).code() == flashscope::StatusCode::kInvalidArgument);
  CHECK(flashscope::cpu::matmul_q8k_tiles(w, tiles.data(), 1, nullptr, 2).code() ==
        flashscope::StatusCode::kInvalidArgument);
  flashscope::cpu::QuantMatrix ragged{GgmlType::kQ4_K, 1, 288, 162, bytes.data()};
  CHECK(flashscope::cpu::matmul_q8k_tiles(ragged, tiles.data(), 1, y.data(), 1).code() ==
        flashscope::StatusCode::kInvalidArgument);
  flashscope::cpu::QuantMatrix q8{GgmlType::kQ8_0, 2, 256, 272, bytes.data()};
  CHECK_FALSE(flashscope::cpu::is_k_quant(GgmlType::kQ8_0));
  CHECK(flashscope::cpu::matmul_q8k_tiles(q8, tiles.data(), 1, y.data(), 2).code() ==
        flashscope::StatusCode::kUnsupported);
}
