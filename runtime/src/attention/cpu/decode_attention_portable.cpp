// The decode attention kernel without intrinsics: "portable" (8-float
// vectors as plain arrays, which the compiler maps onto whatever the build's
// baseline has, e.g. SSE2) for head_dim a multiple of 8, and "scalar" (one
// float) for any head_dim. Also the exp2 both use.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/cpu/decode_attention_impl.hpp"
#include "attention/cpu/kv_q4.hpp"
#include "attention/cpu/kv_q8.hpp"
#include "flashscope/half.hpp"

namespace flashscope::cpu::decode {
namespace {

// 2^x for x <= 0: 2^round(x) times a degree-7 polynomial of the fraction
// (Taylor of e^(f·ln2), |f| <= 1/2, truncation < 1e-8 relative); 0 below 2^-126.
inline float exp2_poly(float x) {
  if (!(x >= -126.0f)) return 0.0f;
  const float xi = std::nearbyint(x);
  const float f = x - xi;
  float p = 1.525273380405984e-05f;
  p = p * f + 1.5403530393381606e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.618129107628477e-03f;
  p = p * f + 5.550410866482158e-02f;
  p = p * f + 2.402265069591007e-01f;
  p = p * f + 6.931471805599453e-01f;
  p = p * f + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(xi) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

template <bool kFp16>
inline float widen(uint16_t x) {
  return kFp16 ? fp16_to_float(x) : bf16_to_float(x);
}

}  // namespace

namespace portable {
#define FS_TARGET
struct Simd {
  static constexpr int W = 8;
  struct V {
    float x[W];
  };
  static constexpr int kQkRows = 2;
  static constexpr int kPvRows = 4;
  static constexpr int kPvAccumulators = 8;
  static constexpr bool kDotBf16 = false;  // q·k widened to float
  static V zero() { return V{}; }
  static V set1(float f) {
    V v;
    for (float& e : v.x) e = f;
    return v;
  }
  static V load(const float* p) {
    V v;
    std::memcpy(v.x, p, sizeof v.x);
    return v;
  }
  static void store(float* p, const V& v) { std::memcpy(p, v.x, sizeof v.x); }
  static V add(const V& a, const V& b) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = a.x[i] + b.x[i];
    return r;
  }
  static V sub(const V& a, const V& b) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = a.x[i] - b.x[i];
    return r;
  }
  static V mul(const V& a, const V& b) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = a.x[i] * b.x[i];
    return r;
  }
  static V fma(const V& a, const V& b, const V& c) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = a.x[i] * b.x[i] + c.x[i];
    return r;
  }
  template <bool kFp16>
  static V load_half(const uint16_t* p) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = widen<kFp16>(p[i]);
    return r;
  }
  static float hsum(const V& a) {
    float s4[4];
    for (int i = 0; i < 4; ++i) s4[i] = a.x[i] + a.x[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
  }
  static void hsum4(const V& a0, const V& a1, const V& a2, const V& a3, float* out) {
    out[0] = hsum(a0);
    out[1] = hsum(a1);
    out[2] = hsum(a2);
    out[3] = hsum(a3);
  }
  static V exp2(const V& a) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = exp2_poly(a.x[i]);
    return r;
  }
  // q8_0 (decode_attention_q8.inc), in int32 as the vector kernels.
  static void qk16_q8(const uint8_t* k, int64_t gstride, int nr, const int8_t* const* /*qhi*/,
                      const int8_t* const* /*qlo*/, const int16_t* const* qw, const float* const* qd,
                      const int32_t* const* qbias, const uint16_t* ks, int64_t sstride, int nb, float* out,
                      int64_t ostride) {
    for (int r = 0; r < nr; ++r) {
      float s[16] = {};
      for (int c = 0; c < nb; ++c) {
        int32_t acc[16];
        for (int i = 0; i < 16; ++i) acc[i] = qbias[r][c];
        for (int d = c * 32; d < c * 32 + 32; ++d) {  // the 16 keys' bytes of dim d, 4 apart
          const int32_t qv = qw[r][d];
          const uint8_t* kd = k + (d / 4) * gstride + d % 4;
          for (int i = 0; i < 16; ++i) acc[i] += int32_t{kd[i * 4]} * qv;
        }
        for (int i = 0; i < 16; ++i)
          s[i] += static_cast<float>(acc[i]) * (fp16_to_float(ks[c * sstride + i]) * qd[r][c]);
      }
      for (int i = 0; i < 16; ++i) out[r * ostride + i] = s[i];
    }
  }
  static V max(const V& a, const V& b) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = std::max(a.x[i], b.x[i]);
    return r;
  }
  static float hmax(const V& a) {
    float m = a.x[0];
    for (int i = 1; i < W; ++i) m = std::max(m, a.x[i]);
    return m;
  }
  struct I {
    int32_t x[W];
  };
  // A quad line (W dims × 4 keys, as stored) widened to int32: the compiler
  // vectorizes the four-key sums from it better than from int16 (the forms
  // measured: bench/TUNING.md#cpu).
  struct X {
    int32_t v[4 * W];
  };
  using PWord = int16_t;
  struct PB {
    int32_t p[4];
  };
  static I izero() { return I{}; }
  static X load_quads(const int8_t* v) {
    X r;
    for (int j = 0; j < 4 * W; ++j) r.v[j] = v[j];
    return r;
  }
  static PB bcast_p(const PWord* p) { return PB{{p[0], p[1], p[2], p[3]}}; }
  static I dot_quads(I a, const X& x, const PB& p) {
    for (int i = 0; i < W; ++i)
      a.x[i] += x.v[4 * i] * p.p[0] + x.v[4 * i + 1] * p.p[1] + x.v[4 * i + 2] * p.p[2] + x.v[4 * i + 3] * p.p[3];
    return a;
  }
  static V to_float(const I& a) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = static_cast<float>(a.x[i]);
    return r;
  }
  static void store_p(PWord* q, const V& x) {
    for (int i = 0; i < W; ++i) q[i] = static_cast<int16_t>(std::clamp(std::nearbyint(x.x[i]), 0.0f, 255.0f));
  }
  static void widen_fp16x16(const uint16_t* src, float* dst) {
    for (int i = 0; i < 16; ++i) dst[i] = fp16_to_float(src[i]);
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#include "attention/cpu/decode_attention_q8.inc"
#undef FS_TARGET
}  // namespace portable

namespace scalar {
#define FS_TARGET
struct Simd {
  static constexpr int W = 1;
  using V = float;
  static constexpr int kQkRows = 4;
  static constexpr int kPvRows = 4;
  static constexpr int kPvAccumulators = 8;
  static constexpr bool kDotBf16 = false;  // q·k widened to float
  static V zero() { return 0.0f; }
  static V set1(float f) { return f; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  template <bool kFp16>
  static V load_half(const uint16_t* p) {
    return widen<kFp16>(*p);
  }
  static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    out[0] = a0;
    out[1] = a1;
    out[2] = a2;
    out[3] = a3;
  }
  static V exp2(V a) { return exp2_poly(a); }
};
#include "attention/cpu/decode_attention_kernel.inc"
#undef FS_TARGET
}  // namespace scalar

const ItemFn kItemPortable = portable::run_item;
const ItemFn kItemScalar = scalar::run_item;
const ItemFn kItemQ8Portable = portable::run_item_q8;

}  // namespace flashscope::cpu::decode
