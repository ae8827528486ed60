// The CPU engine's element-wise ops that have vector builds (issue #25):
// each build against the portable one and against a double-precision
// formula, on this CPU's builds (the AVX2 one is skipped where it is absent);
// and the RoPE row cache the CUDA step packs its angles from.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/model_ops.hpp"
#include "backends/cpu/rope_cache.hpp"
#include "backends/cpu/quant_matmul.hpp"

using flashscope::cpu::CpuIsa;

TEST_CASE("cpu model ops: swiglu's builds agree with silu(g)·u in double, within a few ulp") {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  // Odd length (a vector tail) and past the parallel threshold (the team's pieces).
  for (const int64_t n : {int64_t{13}, int64_t{1536}, int64_t{128 * 1536 + 5}}) {
    CAPTURE(n);
    std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (float& g : gate) g = normal(rng);
    for (float& u : up) u = normal(rng);
    const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, 88.5f, -88.5f, 100.0f, -100.0f, 1e30f,
                           -1e30f};
    for (size_t i = 0; i < std::size(edges) && i < gate.size(); ++i) gate[i] = edges[i];
    for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2}) {
      flashscope::cpu::set_cpu_isa(isa);
      if (flashscope::cpu::active_cpu_isa() != isa) continue;
      const std::string name = flashscope::cpu::cpu_isa_name(isa);
      CAPTURE(name);
      std::vector<float> out = gate;
      flashscope::cpu::swiglu(out.data(), up.data(), n);
      int bad = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double g = gate[i];
        const double want = g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]);
        const double err = std::fabs(static_cast<double>(out[i]) - want);
        // Relative 1e-6 (a few ulp through exp, the division and the product); below 1e-30
        // absolute where silu(g) is ~0 (std::exp overflows to infinity there, ours stays finite).
        if (!(err <= 1e-6 * std::fabs(want) + 1e-30)) {
          if (++bad <= 5) MESSAGE("i " << i << " g " << gate[i] << " u " << up[i] << " got " << out[i] << " want " << want);
        }
      }
      CHECK(bad == 0);
    }
    flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
  }
}

TEST_CASE("cpu model ops: geglu_tanh's builds agree with gelu_tanh(g)·u in double, within a few ulp") {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int64_t n : {int64_t{13}, int64_t{2048}, int64_t{128 * 2048 + 5}}) {
    CAPTURE(n);
    std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (float& g : gate) g = normal(rng);
    for (float& u : up) u = normal(rng);
    const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 5.0f, -5.0f, 10.0f, -10.0f, 30.0f, -30.0f, 1e30f, -1e30f};
    for (size_t i = 0; i < std::size(edges) && i < gate.size(); ++i) gate[i] = edges[i];
    for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2}) {
      flashscope::cpu::set_cpu_isa(isa);
      if (flashscope::cpu::active_cpu_isa() != isa) continue;
      const std::string name = flashscope::cpu::cpu_isa_name(isa);
      CAPTURE(name);
      std::vector<float> out = gate;
      flashscope::cpu::geglu_tanh(out.data(), up.data(), n);
      int bad = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double g = gate[i];
        const double u = std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
        // 0.5·g·(1 + tanh u), written as g / (1 + e^(−2u)) so that it keeps its
        // relative precision where tanh u rounds to −1 in double.
        const double want = g / (1.0 + std::exp(-2.0 * u)) * static_cast<double>(up[i]);
        const double err = std::fabs(static_cast<double>(out[i]) - want);
        // A few ulp, plus the float rounding of the exponent −2u (relative error |2u|·2^-24 in
        // e^(−2u)); below 1e-30 absolute where the value is ~0.
        const double tol = std::fabs(want) * (2e-6 + 1.2e-7 * std::fabs(2.0 * u)) + 1e-30;
        if (!(err <= tol)) {
          if (++bad <= 5) MESSAGE("i " << i << " g " << gate[i] << " u " << up[i] << " got " << out[i] << " want " << want);
        }
      }
      CHECK(bad == 0);
    }
    flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
  }
}

TEST_CASE("cpu model ops: RoPE rows from the position cache equal rope_table's bit for bit, from several threads") {
  // Gemma 3's head (256 → 128 pairs) with Llama 3-style frequency factors and a scale.
  const int rope_dim = 256, half = rope_dim / 2;
  std::vector<float> factors(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) factors[static_cast<size_t>(i)] = 1.0f + 7.0f * static_cast<float>(i) / half;
  flashscope::cpu::RopeTableCache cache(rope_dim, 1e6f, 0.5f, factors.data());
  auto want = [&](const std::vector<int32_t>& pos, std::vector<float>& c, std::vector<float>& s) {
    c.assign(pos.size() * half, 0.0f);
    s.assign(pos.size() * half, 0.0f);
    flashscope::cpu::rope_table(pos.data(), static_cast<int64_t>(pos.size()), rope_dim, 1e6f, 0.5f, factors.data(),
                                c.data(), s.data());
  };
  auto check = [&](const std::vector<int32_t>& pos) {
    std::vector<float> wc, ws, gc(pos.size() * half, -9.0f), gs(pos.size() * half, -9.0f);
    want(pos, wc, ws);
    cache.rows(pos.data(), static_cast<int64_t>(pos.size()), gc.data(), gs.data());
    return std::memcmp(wc.data(), gc.data(), wc.size() * sizeof(float)) == 0 &&
           std::memcmp(ws.data(), gs.data(), ws.size() * sizeof(float)) == 0;
  };
  // Growth (300 past the first 256 rows), repeats, out of order, past the
  // cached range (computed each time) and a negative position.
  const int64_t past = flashscope::cpu::RopeTableCache::kMaxCachedPositions;
  CHECK(check({0, 1, 5}));
  CHECK(check({300, 299, 5, 4095, 17}));
  CHECK(check({static_cast<int32_t>(past - 1), static_cast<int32_t>(past), static_cast<int32_t>(past + 12345), -3, 2}));
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(static_cast<uint32_t>(k));
      std::uniform_int_distribution<int32_t> position(0, 20000);
      int good = 0;
      for (int round = 0; round < 20; ++round) {
        std::vector<int32_t> pos(37);
        for (int32_t& p : pos) p = position(rng);
        good += check(pos) ? 1 : 0;
      }
      ok[static_cast<size_t>(k)] = good;
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(ok == std::vector<int>(4, 20));
  // And rope_table is the formula: a spot check against long double.
  std::vector<float> c, s;
  want({1000}, c, s);
  for (int i = 0; i < half; i += 17) {
    const long double angle = 1000.0L * std::pow(1e6L, -2.0L * i / rope_dim) * 0.5L / factors[static_cast<size_t>(i)];
    CHECK(std::fabs(static_cast<double>(c[static_cast<size_t>(i)] - static_cast<float>(std::cos(angle)))) <= 1e-7);
    CHECK(std::fabs(static_cast<double>(s[static_cast<size_t>(i)] - static_cast<float>(std::sin(angle)))) <= 1e-7);
  }
}
