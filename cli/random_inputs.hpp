// Inputs for the CLI's timed and traced runs: seeded N(0, 1) values in the
// run's dtype. Never zeros: a kernel would then hide unwritten data and run
// unusually fast.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flashscope/half.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope::cli {

inline std::vector<uint16_t> random_halves(size_t n, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = dtype == DType::kBF16 ? float_to_bf16(dist(rng)) : float_to_fp16(dist(rng));
  return out;
}

}  // namespace flashscope::cli
