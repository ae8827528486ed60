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
