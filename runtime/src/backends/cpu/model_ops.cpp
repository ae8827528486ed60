// CPU element-wise model ops (see model_ops.hpp).
#include "backends/cpu/model_ops.hpp"

#include <cmath>

namespace flashscope::cpu {

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

void rope_table(const int32_t* positions, int64_t n, int rope_dim, float base, float scale, const float* factors,
                float* cos_out, float* sin_out) {
  const int half = rope_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    for (int i = 0; i < half; ++i) {
      double inv_freq = std::pow(static_cast<double>(base), -2.0 * i / rope_dim) * static_cast<double>(scale);
      if (factors != nullptr) inv_freq /= static_cast<double>(factors[i]);
      const double angle = static_cast<double>(positions[t]) * inv_freq;
      cos_out[t * half + i] = static_cast<float>(std::cos(angle));
      sin_out[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
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
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    gate[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * up[i];
  }
}

void swiglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace flashscope::cpu
