// CPU element-wise model ops (see model_ops.hpp).
#include "backends/cpu/model_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_X86_KERNELS 1
#include <immintrin.h>
#endif

#include "backends/cpu/quant_matmul.hpp"  // active_cpu_isa
#include "util/math.hpp"

namespace flashscope::cpu {
namespace {

// Elements below this run on the calling thread (a decode step's 1536):
// a fork/join costs more than the loop.
constexpr int64_t kParallelMinElements = 64 * 1024;

void swiglu_portable(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;

// x/2 · (1 + tanh(u)) = x / (1 + e^(−2u)), u = √(2/π)·(x + 0.044715 x³):
// the same value without 1 + tanh(u)'s cancellation (for x = −4 the tanh
// form is off by ~1%). Where e^(−2u) overflows (x below about −10) the
// quotient is −0, and for large x it is x, as gelu_tanh's limits.
void geglu_tanh_portable(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    gate[i] = x / (1.0f + std::exp(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x))) * up[i];
  }
}

#ifdef FLASHSCOPE_X86_KERNELS
#define FS_AVX2 __attribute__((target("avx2,fma")))

// e^x for 8 floats: x = k·ln2 + r with |r| ≤ ln2/2 (ln2 split in two parts
// so k·ln2 is exact), e^r by its degree-6 Taylor polynomial (truncation
// < 1.2e-7 relative on that range), times 2^k through the exponent bits: a
// few ulp from std::exp on [-87.3, 88.7]; below it the clamp gives ~1e-38
// (exp: as small or 0), above it +inf (as exp), so silu of a very negative
// gate is -0 either way.
FS_AVX2 inline __m256 exp_avx2(__m256 x_in) {
  const __m256 x = _mm256_min_ps(_mm256_max_ps(x_in, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^k for k in [-126, 128]: split in two factors so neither leaves the normal range.
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i half = _mm256_srai_epi32(ki, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ki, half), _mm256_set1_epi32(127)), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_blendv_ps(e, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                          _mm256_cmp_ps(x_in, _mm256_set1_ps(88.7f), _CMP_GT_OQ));
}

FS_AVX2 void swiglu_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  swiglu_portable(gate + i, up + i, n - i);
}

// geglu_tanh_portable's formula with swiglu's exp.
FS_AVX2 void geglu_tanh_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 c1 = _mm256_set1_ps(-2.0f * kSqrt2OverPi);
  const __m256 c3 = _mm256_set1_ps(-2.0f * kSqrt2OverPi * 0.044715f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 g2 = _mm256_mul_ps(g, g);
    const __m256 e = exp_avx2(_mm256_mul_ps(g, _mm256_fmadd_ps(c3, g2, c1)));  // e^(−2u)
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  geglu_tanh_portable(gate + i, up + i, n - i);
}
#endif

using GateKernel = void (*)(float* gate, const float* up, int64_t n);

// A prefill chunk's gate is [128, ffn]: split it over the team in pieces
// of whole vectors; a decode step's stays on this thread.
void run_gate(GateKernel run, float* gate, const float* up, int64_t n) {
  const int64_t pieces = n >= kParallelMinElements ? 16 : 1;
  const int64_t step = (n / pieces + 7) / 8 * 8;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (pieces > 1)
#endif
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t begin = std::min(n, p * step), end = p + 1 == pieces ? n : std::min(n, (p + 1) * step);
    run(gate + begin, up + begin, end - begin);
  }
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* y, int64_t n, int64_t dim, float eps) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * dim;
    float* yr = y + t * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void rope_table(const int32_t* positions, int64_t n, int rope_dim, float base, float* cos_out, float* sin_out) {
  rope_table(positions, n, rope_dim, base, 1.0f, nullptr, cos_out, sin_out);
}

std::vector<double> rope_inv_freq(int rope_dim, float base, float scale, const float* factors) {
  std::vector<double> inv_freq(static_cast<size_t>(std::max(rope_dim / 2, 0)));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / rope_dim) *
                  static_cast<double>(scale);
    if (factors != nullptr) inv_freq[i] /= static_cast<double>(factors[i]);
  }
  return inv_freq;
}

void rope_row(int32_t position, const double* inv_freq, int half, float* cos_out, float* sin_out) {
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void rope_table(const int32_t* positions, int64_t n, int rope_dim, float base, float scale, const float* factors,
                float* cos_out, float* sin_out) {
  const int half = rope_dim / 2;
  const std::vector<double> inv_freq = rope_inv_freq(rope_dim, base, scale, factors);
  for (int64_t t = 0; t < n; ++t) rope_row(positions[t], inv_freq.data(), half, cos_out + t * half, sin_out + t * half);
}

void rope_pairs(float* x, int64_t n, int heads, int head_dim, int rope_dim, const float* cos_t,
                const float* sin_t) {
  const int half = rope_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i];
        const float b = v[2 * i + 1];
        v[2 * i] = a * c[i] - b * s[i];
        v[2 * i + 1] = a * s[i] + b * c[i];
      }
    }
  }
}

void rope_halves(float* x, int64_t n, int heads, int head_dim, int rope_dim, const float* cos_t,
                 const float* sin_t) {
  const int half = rope_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = a * s[i] + b * c[i];
      }
    }
  }
}

void geglu_tanh(float* gate, const float* up, int64_t n) {
  GateKernel run = geglu_tanh_portable;
#ifdef FLASHSCOPE_X86_KERNELS
  if (active_cpu_isa() >= CpuIsa::kAvx2) run = geglu_tanh_avx2;
#endif
  run_gate(run, gate, up, n);
}

void swiglu(float* gate, const float* up, int64_t n) {
  GateKernel run = swiglu_portable;
#ifdef FLASHSCOPE_X86_KERNELS
  if (active_cpu_isa() >= CpuIsa::kAvx2) run = swiglu_avx2;
#endif
  run_gate(run, gate, up, n);
}

}  // namespace flashscope::cpu
