// The decode attention kernels for arm64: NEON (4 floats; part of every
// AArch64 CPU, so no run-time check), and over a q8_0 cache NEON with the
// dot-product instructions (picked at run time: cpu_has_neon_dotprod).
// Elsewhere this file defines no kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/cpu/decode_attention_impl.hpp"
#include "attention/cpu/kv_q4.hpp"
#include "attention/cpu/kv_q8.hpp"
#include "cpu_features.hpp"
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

// q8_0 (decode_attention_q8.inc) on SDOT/UDOT: four int8 products summed into
// an int32 lane, as vpdpbusd does, but both operands of one signedness. So
// Q·K takes K's bytes to int8 (xor 0x80 undoes the cache's +128, so q's
// halves need no bias) and P·V takes V's to uint8 (xor 0x80 adds 128: each
// product then carries 128·p, taken off once per quad). The int32 sums are
// those of the x86 kernels, bit for bit.
namespace neon_dot {
#define FS_TARGET FLASHSCOPE_TARGET_DOTPROD
struct Simd : neon::Simd {
  // Dim group g's four dims of four keys (16 bytes) against row r's q bytes
  // for the same dims: lane g % 4 of the block's q vector g / 4.
  template <int kG, int kNr>
  FS_TARGET static void qk_group(const uint8_t* kg, const int8x16_t (&qh)[kNr][2], const int8x16_t (&ql)[kNr][2],
                                 int32x4_t (&hi)[kNr][4], int32x4_t (&lo)[kNr][4]) {
    int8x16_t k[4];
    for (int j = 0; j < 4; ++j) k[j] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(kg + 16 * j), vdupq_n_u8(0x80)));
    for (int r = 0; r < kNr; ++r)
      for (int j = 0; j < 4; ++j) {
        hi[r][j] = vdotq_laneq_s32(hi[r][j], k[j], qh[r][kG / 4], kG % 4);
        lo[r][j] = vdotq_laneq_s32(lo[r][j], k[j], ql[r][kG / 4], kG % 4);
      }
  }
  // kNr rows (two at most: their 16 int32 sums, q and K stay in the 32 registers).
  template <int kNr>
  FS_TARGET static void qk16_rows(const uint8_t* k, int64_t gstride, const int8_t* const* qhi, const int8_t* const* qlo,
                                  const float* const* qd, const uint16_t* ks, int64_t sstride, int nb, float* out,
                                  int64_t ostride) {
    for (int r = 0; r < kNr; ++r)
      for (int j = 0; j < 4; ++j) vst1q_f32(out + r * ostride + 4 * j, vdupq_n_f32(0.0f));
    for (int c = 0; c < nb; ++c) {
      int32x4_t hi[kNr][4], lo[kNr][4];
      int8x16_t qh[kNr][2], ql[kNr][2];
      for (int r = 0; r < kNr; ++r) {
        for (int j = 0; j < 4; ++j) hi[r][j] = lo[r][j] = vdupq_n_s32(0);
        for (int h = 0; h < 2; ++h) {
          qh[r][h] = vld1q_s8(qhi[r] + c * 32 + 16 * h);
          ql[r][h] = vld1q_s8(qlo[r] + c * 32 + 16 * h);
        }
      }
      const uint8_t* kc = k + int64_t{c} * 8 * gstride;
      qk_group<0, kNr>(kc, qh, ql, hi, lo);
      qk_group<1, kNr>(kc + gstride, qh, ql, hi, lo);
      qk_group<2, kNr>(kc + 2 * gstride, qh, ql, hi, lo);
      qk_group<3, kNr>(kc + 3 * gstride, qh, ql, hi, lo);
      qk_group<4, kNr>(kc + 4 * gstride, qh, ql, hi, lo);
      qk_group<5, kNr>(kc + 5 * gstride, qh, ql, hi, lo);
      qk_group<6, kNr>(kc + 6 * gstride, qh, ql, hi, lo);
      qk_group<7, kNr>(kc + 7 * gstride, qh, ql, hi, lo);
      for (int j = 0; j < 4; ++j) {
        const float32x4_t sc = load_half<true>(ks + c * sstride + 4 * j);
        for (int r = 0; r < kNr; ++r) {
          float* o = out + r * ostride + 4 * j;
          const int32x4_t sum = vaddq_s32(vshlq_n_s32(hi[r][j], 7), lo[r][j]);
          vst1q_f32(o, vfmaq_f32(vld1q_f32(o), vcvtq_f32_s32(sum), vmulq_n_f32(sc, qd[r][c])));
        }
      }
    }
  }
  FS_TARGET static void qk16_q8(const uint8_t* k, int64_t gstride, int nr, const int8_t* const* qhi,
                                const int8_t* const* qlo, const int16_t* const* /*qw*/, const float* const* qd,
                                const int32_t* const* /*qbias: K taken back to int8 instead*/, const uint16_t* ks,
                                int64_t sstride, int nb, float* out, int64_t ostride) {
    for (int r = 0; r < nr; r += 2) {
      if (nr - r >= 2)
        qk16_rows<2>(k, gstride, qhi + r, qlo + r, qd + r, ks, sstride, nb, out + r * ostride, ostride);
      else
        qk16_rows<1>(k, gstride, qhi + r, qlo + r, qd + r, ks, sstride, nb, out + r * ostride, ostride);
    }
  }
  FS_TARGET static V max(V a, V b) { return vmaxq_f32(a, b); }
  FS_TARGET static float hmax(V a) { return vmaxvq_f32(a); }
  using I = int32x4_t;
  using X = uint8x16_t;
  using PWord = uint8_t;
  struct PB {
    uint8x16_t p;     // the four keys' P, once a lane
    int32x4_t bias;   // 128 · their sum: what V's +128 added
  };
  FS_TARGET static I izero() { return vdupq_n_s32(0); }
  // 4 dims × 4 keys, V's int8 + 128 as uint8.
  FS_TARGET static X load_quads(const int8_t* v) {
    return veorq_u8(vld1q_u8(reinterpret_cast<const uint8_t*>(v)), vdupq_n_u8(0x80));
  }
  FS_TARGET static PB bcast_p(const PWord* p) {
    uint32_t w;
    std::memcpy(&w, p, sizeof w);
    return PB{vreinterpretq_u8_u32(vdupq_n_u32(w)), vdupq_n_s32(128 * (int32_t{p[0]} + p[1] + p[2] + p[3]))};
  }
  FS_TARGET static I dot_quads(I a, X x, const PB& p) {
    return vsubq_s32(vreinterpretq_s32_u32(vdotq_u32(vreinterpretq_u32_s32(a), x, p.p)), p.bias);
  }
  FS_TARGET static V to_float(I a) { return vcvtq_f32_s32(a); }
  // W lanes rounded to the nearest integer (ties to even, as the x86 kernels) in [0, 255] at q.
  FS_TARGET static void store_p(PWord* q, V x) {
    const int32x4_t i = vmaxq_s32(vcvtnq_s32_f32(x), vdupq_n_s32(0));
    const uint8x8_t b = vqmovn_u16(vcombine_u16(vqmovun_s32(i), vdup_n_u16(0)));
    vst1_lane_u32(reinterpret_cast<uint32_t*>(q), vreinterpret_u32_u8(b), 0);
  }
  FS_TARGET static void widen_fp16x16(const uint16_t* src, float* dst) {
    for (int j = 0; j < 4; ++j) vst1q_f32(dst + 4 * j, load_half<true>(src + 4 * j));
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#include "attention/cpu/decode_attention_q8.inc"
#undef FS_TARGET
}  // namespace neon_dot

const ItemFn kItemNeon = neon::run_item;
const ItemFn kItemQ8NeonDot = neon_dot::run_item_q8;

#else
const ItemFn kItemNeon = nullptr;
const ItemFn kItemQ8NeonDot = nullptr;
#endif

}  // namespace flashscope::cpu::decode
