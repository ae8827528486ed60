// The CPU decode step's K-quant matmuls alone, a Qwen3-0.6B-shaped Q4_K_M
// model's (28 layers: Q 1024→2048, K and V 1024→1024, O 2048→1024, gate
// and up 1024→3072, down 3072→1024; Q6_K V and down in every third layer;
// the tied Q6_K LM head 1024→151936), each layer's weights its own, so a
// "token" streams what a decode step's matmuls stream (~376 MB) from DRAM.
// Runs each path over the same weights and prints the process CPU time and
// wall time per token (best and median) and the weights' GB/s:
//   q8    matmul() against per-32 activations (quantize_row_q8, BlockQ8)
//   q8k   matmul_q8k_rows() against per-256 ones (quantize_row_q8k, BlockQ8K)
// HEAD=0 leaves the LM head out; LAYERS=1 keeps one layer (9.9 MB) in L3;
// SMALL=q4_k or q6_k runs one 1024×1024 matrix of that type 64 times a
// "token" instead (576-840 KB: L2, the arithmetic alone); ISA=1 forces AVX2
// (set_cpu_isa).
//
//   W=$PWD; g++ -std=c++20 -O2 -I$W/runtime/src -I$W/runtime/include -I$W -o /tmp/kgemv \
//     bench/cpu_kquant_gemv.cpp -L$W/build/runtime -lflashscope -Wl,-rpath,$W/build/runtime
//   OMP_NUM_THREADS=1 /tmp/kgemv [tokens=20] [rounds=3]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant_matmul.hpp"
#include "backends/cpu/quant_matmul_kdot.hpp"
#include "cpu_seconds.hpp"
#include "model/synthetic_model.hpp"

using namespace flashscope;

namespace {

struct Mat {
  cpu::QuantMatrix q;
  std::vector<uint8_t> bytes;
};

uint64_t row_bytes(GgmlType type, int64_t cols) {
  return static_cast<uint64_t>(cols / 256) * (type == GgmlType::kQ4_K ? 144 : 210);
}

}  // namespace

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? atoi(argv[1]) : 20;
  const int rounds = argc > 2 ? atoi(argv[2]) : 3;
  const int layers = getenv("LAYERS") ? atoi(getenv("LAYERS")) : 28;
  const bool head = !getenv("HEAD") || atoi(getenv("HEAD")) != 0;
  if (getenv("ISA")) cpu::set_cpu_isa(static_cast<cpu::CpuIsa>(atoi(getenv("ISA"))));
  std::mt19937_64 rng(1);
  // One random copy per (type, shape); each layer's matrix its own bytes.
  struct Shape {
    int64_t rows, cols;
    bool q6_in_third;  // Q6_K in every third layer
  };
  const Shape shapes[] = {{2048, 1024, false}, {1024, 1024, false}, {1024, 1024, true}, {1024, 2048, false},
                          {3072, 1024, false}, {3072, 1024, false}, {1024, 3072, true}};
  std::vector<Mat> mats;
  uint64_t total = 0;
  const char* small = getenv("SMALL");
  for (int l = 0; l < layers && small == nullptr; ++l) {
    for (const Shape& s : shapes) {
      const GgmlType type = s.q6_in_third && l % 3 == 0 ? GgmlType::kQ6_K : GgmlType::kQ4_K;
      Mat m;
      m.bytes = model::synthetic_random_blocks(type, s.rows * s.cols, 0.05f, rng);
      m.q = {type, s.rows, s.cols, row_bytes(type, s.cols), nullptr};
      total += m.bytes.size();
      mats.push_back(std::move(m));
    }
  }
  if (head && small == nullptr) {
    Mat m;
    m.bytes = model::synthetic_random_blocks(GgmlType::kQ6_K, int64_t{151936} * 1024, 0.05f, rng);
    m.q = {GgmlType::kQ6_K, 151936, 1024, row_bytes(GgmlType::kQ6_K, 1024), nullptr};
    total += m.bytes.size();
    mats.push_back(std::move(m));
  }
  if (small != nullptr) {
    const GgmlType type = std::string(small) == "q6_k" ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    Mat m;
    m.bytes = model::synthetic_random_blocks(type, 1024 * 1024, 0.05f, rng);
    m.q = {type, 1024, 1024, row_bytes(type, 1024), nullptr};
    total += 64 * m.bytes.size();
    mats.push_back(std::move(m));
    for (int i = 1; i < 64; ++i) mats.push_back(Mat{mats[0].q, {}});  // the same bytes
  }
  for (Mat& m : mats) m.q.data = m.bytes.empty() ? mats[0].bytes.data() : m.bytes.data();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(3072), y(151936);
  for (float& v : x) v = normal(rng);
  std::vector<cpu::BlockQ8> xq(3072 / 32);
  std::vector<cpu::BlockQ8K> xk(3072 / 256);
  if (small != nullptr) {
    std::printf("SMALL=%s: one 1024x1024 matrix 64 times, %.1f MB a token, isa %s\n", small, total / 1e6,
                cpu::cpu_isa_name(cpu::active_cpu_isa()));
  } else {
    std::printf("%d layers%s: %.1f MB of weights a token, isa %s\n", layers, head ? " + LM head" : "", total / 1e6,
                cpu::cpu_isa_name(cpu::active_cpu_isa()));
  }
  for (int round = 0; round < rounds; ++round) {
    for (const std::string path : {"q8", "q8k"}) {
      std::vector<double> wall, cpu;
      for (int t = 0; t < tokens; ++t) {
        const double c0 = cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        for (const Mat& m : mats) {
          if (path == "q8") {
            cpu::quantize_row_q8(x.data(), xq.data(), m.q.cols);
            if (!cpu::matmul(m.q, x.data(), m.q.cols, xq.data(), nullptr, 1, y.data(), m.q.rows).ok()) return 1;
          } else {
            cpu::quantize_row_q8k(x.data(), xk.data(), m.q.cols);
            if (!cpu::matmul_q8k_rows(m.q, xk.data(), 1, y.data(), m.q.rows).ok()) return 1;
          }
        }
        wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        cpu.push_back(cpu_seconds() - c0);
      }
      std::sort(wall.begin(), wall.end());
      std::sort(cpu.begin(), cpu.end());
      std::printf("round %d %-4s cpu ms/token best %6.2f median %6.2f | wall best %6.2f median %6.2f | %5.1f GB/s (cpu best)\n",
                  round, path.c_str(), 1e3 * cpu[0], 1e3 * cpu[cpu.size() / 2], 1e3 * wall[0], 1e3 * wall[wall.size() / 2],
                  total / cpu[0] / 1e9);
    }
  }
  return 0;
}
