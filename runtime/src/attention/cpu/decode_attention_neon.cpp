// The decode attention kernel for arm64: NEON (4 floats; part of every
// AArch64 CPU, so no run-time check). Elsewhere this file defines no kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attention/cpu/decode_attention_impl.hpp"
#include "flashscope/half.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace flashscope::cpu::decode {

#if defined(__aarch64__)

namespace neon {
#define FS_TARGET
struct Simd {
  using V = float32x4_t;
  static constexpr int W = 4;
  static constexpr int kQkRows = 4;
  static constexpr int kPvRows = 8;
  static constexpr int kPvAccumulators = 16;  // of the 32 q registers
  static constexpr bool kDotBf16 = false;  // q·k widened to float
  static V zero() { return vdupq_n_f32(0.0f); }
  static V set1(float f) { return vdupq_n_f32(f); }
  static V load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V sub(V a, V b) { return vsubq_f32(a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  template <bool kFp16>
  static V load_half(const uint16_t* p) {
    const uint16x4_t h = vld1_u16(p);
    if constexpr (kFp16) {
      return vcvt_f32_f16(vreinterpret_f16_u16(h));
    } else {
      return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    }
  }
  // Pairwise adds within each input: every out[i] is a_i summed by the same tree.
  static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3)));
  }
  static V exp2(V x) {
    const V floor_v = vdupq_n_f32(-126.0f);
    const uint32x4_t keep = vcgeq_f32(x, floor_v);
    x = vmaxq_f32(x, floor_v);
    const V xi = vrndnq_f32(x);
    const V f = vsubq_f32(x, xi);
    V p = vdupq_n_f32(1.525273380405984e-05f);
    p = vfmaq_f32(vdupq_n_f32(1.5403530393381606e-04f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.3333558146428443e-03f), p, f);
    p = vfmaq_f32(vdupq_n_f32(9.618129107628477e-03f), p, f);
    p = vfmaq_f32(vdupq_n_f32(5.550410866482158e-02f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2.402265069591007e-01f), p, f);
    p = vfmaq_f32(vdupq_n_f32(6.931471805599453e-01f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(xi), vdupq_n_s32(127)), 23);
    const V r = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(r), keep));
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#undef FS_TARGET
}  // namespace neon

const ItemFn kItemNeon = neon::run_item;

#else
const ItemFn kItemNeon = nullptr;
#endif

}  // namespace flashscope::cpu::decode
