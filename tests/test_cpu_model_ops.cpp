// The CPU engine's element-wise ops that have vector builds (issue #25):
// each build against the portable one and against a double-precision
// formula, on this CPU's builds (the AVX2 one is skipped where it is absent).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/model_ops.hpp"
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
