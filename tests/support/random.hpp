// The tests' seeded random inputs, one home for every suite:
//   mix64 / seeded_normal   portable values from a seed and an element's identity
//                           (the attention and paged problems' q, k, v; page orders)
//   random_ids              token ids for model forwards
//   random_bf16 / _f32      normal draws from a caller's generator (GEMM operands)
// A failing case prints its seed; the same seed gives the same values on
// every machine for mix64 / seeded_normal, and with the same standard
// library for the std::mt19937_64-based draws.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flashscope/half.hpp"

namespace flashscope::testing {

// splitmix64: a seeded, portable stream of well-mixed 64-bit values,
// reproducible on every platform, unlike std::normal_distribution.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Mean 0, variance 1, from an element's identity (never its address, so every
// layout and every page order sees the same values): operand (0 q, 1 k, 2 v),
// owner (the sequence, or any id a caller reserves, like shared pages), the
// token position, head and dim. The sum of four 16-bit uniforms (Irwin–Hall)
// is bell-shaped within ±2√3, and cheap enough that building a problem never
// dominates a test's run time, unlike log/cos per element.
inline double seeded_normal(uint64_t seed, int operand, uint64_t owner, int pos, int head, int d) {
  uint64_t key = mix64(seed ^ (static_cast<uint64_t>(operand) + 1) * 0x100000001b3ull);
  key = mix64(key ^ owner);
  key = mix64(key ^ static_cast<uint64_t>(pos));
  key = mix64(key ^ (static_cast<uint64_t>(head) << 32 | static_cast<uint32_t>(d)));
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += static_cast<double>((key >> (16 * i)) & 0xffffu) + 0.5;
  return (sum / 65536.0 - 2.0) * 1.7320508075688772;  // (Σu − 4·½) · √(12 / 4)
}

// n token ids uniform in [0, vocab).
inline std::vector<int32_t> random_ids(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = d(rng);
  return ids;
}

// n draws of N(0, sigma²), rounded to bf16 / kept in float; successive calls
// on one generator continue its stream.
inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = float_to_bf16(normal(rng));
  return v;
}
inline std::vector<float> random_f32(size_t n, std::mt19937_64& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace flashscope::testing
