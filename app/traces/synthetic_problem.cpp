#include "traces/synthetic_problem.hpp"

#include <cmath>
#include <cstdio>
#include <random>

#include "flashscope/half.hpp"

namespace flashscope::app {

namespace {

// Sizes of the three parts relative to unit-variance noise, chosen so that
// with scale 1/√D the neighbours of the diagonal score a few units above
// far keys (a visible band) without turning every row one-hot.
constexpr float kLocality = 0.9f;
constexpr float kSinkQuery = 0.6f;
constexpr float kSinkKey = 1.1f;
constexpr double kRopeBase = 10000.0;

// A random direction scaled to norm √dim, like a unit-variance vector.
std::vector<float> direction(std::mt19937_64& rng, int dim) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> d(static_cast<size_t>(dim));
  double norm = 0;
  for (float& x : d) {
    x = n(rng);
    norm += double{x} * x;
  }
  const float f = static_cast<float>(std::sqrt(dim / std::max(norm, 1e-12)));
  for (float& x : d) x *= f;
  return d;
}

// out += a · R(pos)·u, rotating consecutive pairs (2j, 2j+1) by pos · base^(−2j/dim).
void add_rotated(float* out, const std::vector<float>& u, int pos, float a) {
  const int dim = static_cast<int>(u.size());
  for (int j = 0; j < dim / 2; ++j) {
    const double angle = pos * std::pow(kRopeBase, -2.0 * j / dim);
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    const float x = u[2 * j], y = u[2 * j + 1];
    out[2 * j] += a * (c * x - s * y);
    out[2 * j + 1] += a * (s * x + c * y);
  }
}

}  // namespace

std::string shape_label(const SyntheticShape& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d\xC3\x97%d%s\xC3\x97%d\xC3\x97%d D%d%s", s.batch, s.q_heads,
                s.kv_heads != s.q_heads ? ("/" + std::to_string(s.kv_heads)).c_str() : "", s.q_len, s.kv_len,
                s.head_dim, s.causal ? " causal" : "");
  return buf;
}

PrefillParams SyntheticProblem::params() {
  const SyntheticShape& s = shape;
  PrefillParams p;
  p.q = bshd(q.data(), s.q_len, s.q_heads, s.head_dim);
  p.k = bshd(k.data(), s.kv_len, s.kv_heads, s.head_dim);
  p.v = bshd(v.data(), s.kv_len, s.kv_heads, s.head_dim);
  p.o = bshd(o.data(), s.q_len, s.q_heads, s.head_dim);
  p.lse = lse.data();
  p.device = Device::kCpu;
  p.dtype = DType::kBF16;
  p.batch = s.batch;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.q_len = s.q_len;
  p.kv_len = s.kv_len;
  p.head_dim = s.head_dim;
  p.causal = s.causal;
  return p;
}

SyntheticProblem make_synthetic_problem(const SyntheticShape& shape, uint64_t seed) {
  SyntheticProblem pr;
  pr.shape = shape;
  const int d = shape.head_dim;
  const size_t q_n = static_cast<size_t>(shape.batch) * shape.q_len * shape.q_heads * d;
  const size_t kv_n = static_cast<size_t>(shape.batch) * shape.kv_len * shape.kv_heads * d;
  pr.q.resize(q_n);
  pr.k.resize(kv_n);
  pr.v.resize(kv_n);
  pr.o.assign(q_n, 0);
  pr.lse.assign(static_cast<size_t>(shape.batch) * shape.q_heads * shape.q_len, 0.0f);

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  // One locality direction per kv-head (its q-heads share it, as GQA heads
  // share their keys) and one sink direction for all.
  std::vector<std::vector<float>> u;
  for (int h = 0; h < shape.kv_heads; ++h) u.push_back(direction(rng, d));
  const std::vector<float> sink = direction(rng, d);
  const int group = shape.q_heads / std::max(shape.kv_heads, 1);
  // Queries sit at the end of the keys (bottom-right causal alignment).
  const int shift = shape.kv_len - shape.q_len;

  std::vector<float> row(static_cast<size_t>(d));
  for (int b = 0; b < shape.batch; ++b) {
    for (int i = 0; i < shape.q_len; ++i) {
      for (int h = 0; h < shape.q_heads; ++h) {
        for (float& x : row) x = noise(rng);
        add_rotated(row.data(), u[static_cast<size_t>(h / std::max(group, 1))], i + shift, kLocality);
        for (int x = 0; x < d; ++x) row[static_cast<size_t>(x)] += kSinkQuery * sink[static_cast<size_t>(x)];
        uint16_t* dst = pr.q.data() + ((static_cast<size_t>(b) * shape.q_len + i) * shape.q_heads + h) * d;
        for (int x = 0; x < d; ++x) dst[x] = float_to_bf16(row[static_cast<size_t>(x)]);
      }
    }
    for (int j = 0; j < shape.kv_len; ++j) {
      for (int h = 0; h < shape.kv_heads; ++h) {
        for (float& x : row) x = noise(rng);
        add_rotated(row.data(), u[static_cast<size_t>(h)], j, kLocality);
        if (j == 0) {
          for (int x = 0; x < d; ++x) row[static_cast<size_t>(x)] += kSinkKey * sink[static_cast<size_t>(x)];
        }
        const size_t at = ((static_cast<size_t>(b) * shape.kv_len + j) * shape.kv_heads + h) * d;
        for (int x = 0; x < d; ++x) pr.k[at + x] = float_to_bf16(row[static_cast<size_t>(x)]);
        for (int x = 0; x < d; ++x) pr.v[at + x] = float_to_bf16(noise(rng));
      }
    }
  }
  return pr;
}

}  // namespace flashscope::app
