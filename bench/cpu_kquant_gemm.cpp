// The CPU prefill's K-quant GEMM alone (pack_q8k_tiles + matmul_q8k_tiles):
// one weight matrix against TOKENS activations (default 128), CPU time per
// call (best and median of ROUNDS × 20 calls) and its multiply-add rate.
// Shapes of a Qwen3-0.6B-shaped model's prompt: Q4_K 1024×1024 (K/V/O-like),
// Q4_K 3072×1024 (gate/up), Q4_K 1024×3072 (down's width), Q6_K 1024×1024.
// ISA=1 forces AVX2, ISA=0 the portable loops (set_cpu_isa).
//
//   W=$PWD; g++ -std=c++20 -O2 -I$W/runtime/src -I$W/runtime/include -I$W -o /tmp/kgemm \
//     bench/cpu_kquant_gemm.cpp -L$W/build/runtime -lflashscope -Wl,-rpath,$W/build/runtime
//   OMP_NUM_THREADS=1 /tmp/kgemm [rounds=7] [tokens=128]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/quant_matmul.hpp"
#include "backends/cpu/quant_matmul_kquant.hpp"
#include "cpu_seconds.hpp"
#include "model/synthetic_model.hpp"

using namespace flashscope;

namespace {

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 7;
  const int tokens = argc > 2 ? atoi(argv[2]) / cpu::kKTileTokens * cpu::kKTileTokens : 128;
  if (getenv("ISA")) cpu::set_cpu_isa(static_cast<cpu::CpuIsa>(atoi(getenv("ISA"))));
  std::printf("isa %s, %d tokens\n", cpu::cpu_isa_name(cpu::active_cpu_isa()), tokens);
  struct Shape {
    GgmlType type;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{GgmlType::kQ4_K, 1024, 1024},
                          {GgmlType::kQ4_K, 3072, 1024},
                          {GgmlType::kQ4_K, 1024, 3072},
                          {GgmlType::kQ6_K, 1024, 1024}};
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    const auto bytes = model::synthetic_random_blocks(s.type, s.rows * s.cols, 0.05f, rng);
    const cpu::QuantMatrix w{s.type, s.rows, s.cols, bytes.size() / static_cast<uint64_t>(s.rows), bytes.data()};
    std::vector<float> x(static_cast<size_t>(tokens * s.cols)), y(static_cast<size_t>(tokens * s.rows));
    for (float& v : x) v = normal(rng);
    std::vector<cpu::TileQ8K> tiles(static_cast<size_t>(tokens / cpu::kKTileTokens * s.cols / 256));
    std::vector<double> per_call;
    for (int round = 0; round < rounds; ++round) {
      const double t0 = cpu_seconds();
      constexpr int kCalls = 20;
      for (int c = 0; c < kCalls; ++c) {
        cpu::pack_q8k_tiles(x.data(), s.cols, tokens, s.cols, tiles.data());
        if (!cpu::matmul_q8k_tiles(w, tiles.data(), tokens / cpu::kKTileTokens, y.data(), s.rows).ok()) return 1;
      }
      per_call.push_back((cpu_seconds() - t0) / kCalls);
    }
    std::sort(per_call.begin(), per_call.end());
    const double macs = static_cast<double>(s.rows) * static_cast<double>(s.cols) * tokens;
    std::printf("%s %5lldx%-5lld  best %7.0f us  median %7.0f us  %5.1f GMAC/s (best)  y[0]=%g\n",
                ggml_type_name(s.type), static_cast<long long>(s.rows), static_cast<long long>(s.cols),
                per_call.front() * 1e6, per_call[per_call.size() / 2] * 1e6, macs / per_call.front() / 1e9,
                static_cast<double>(y[0]));
  }
  return 0;
}
