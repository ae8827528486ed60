// The decode attention kernel for x86-64: AVX2 + FMA + F16C (8 floats),
// AVX-512 F (16 floats), AVX-512 F + BF16 (bf16 q·k by vdpbf16ps) and, for
// the q8_0 cache, AVX2 and AVX-512 VNNI, each compiled with its target attribute and picked
// at run time (cpu_features.hpp), so the library itself stays built for the
// baseline x86-64.
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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && __has_include(<immintrin.h>)
#define FLASHSCOPE_DECODE_X86 1
// GCC 12 flags the _mm512_undefined_* pass-through operands inside its own
// AVX-512 intrinsics as maybe-uninitialized (a false positive; GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace flashscope::cpu::decode {

#ifdef FLASHSCOPE_DECODE_X86

namespace avx2 {
#define FS_TARGET __attribute__((target("avx2,fma,f16c")))
struct Simd {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int kQkRows = 3;  // 3 rows × 4 keys of accumulators + 4 K vectors + q: 17 ymm, one spilled
  static constexpr int kPvRows = 4;
  static constexpr int kPvAccumulators = 8;  // of the 16 ymm
  static constexpr bool kDotBf16 = false;  // q·k widened to float
  FS_TARGET static V zero() { return _mm256_setzero_ps(); }
  FS_TARGET static V set1(float f) { return _mm256_set1_ps(f); }
  FS_TARGET static V load(const float* p) { return _mm256_loadu_ps(p); }
  FS_TARGET static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  FS_TARGET static V add(V a, V b) { return _mm256_add_ps(a, b); }
  FS_TARGET static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  FS_TARGET static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  FS_TARGET static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  template <bool kFp16>
  FS_TARGET static V load_half(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (kFp16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
  // hadd pairs within each input, so every out[i] is a_i summed by the same tree.
  FS_TARGET static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  }
  // 2^x (x <= 0) as in exp2_poly (decode_attention_portable.cpp), 8 at a time.
  FS_TARGET static V exp2(V x) {
    const __m256 floor_v = _mm256_set1_ps(-126.0f);
    const __m256 keep = _mm256_cmp_ps(x, floor_v, _CMP_GE_OQ);
    x = _mm256_max_ps(x, floor_v);
    const __m256 xi = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, xi);
    __m256 p = _mm256_set1_ps(1.525273380405984e-05f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-04f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265069591007e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471805599453e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
  }
  // q8_0 (decode_attention_q8.inc). 8 keys per ymm: K's bytes back to signed
  // (xor 0x80, so qbias is not needed), then maddubs(|q|, k · sign(q)):
  // |q|, |k| <= 127 keep its int16 pair sums from saturating.
  // Q·K in int16: a K line (16 keys × 4 dims, u8) widens to four ymm of
  // int16, lane pairs (2i, 2i + 1) holding key i's dims (0, 1) and (2, 3);
  // pmaddwd against the dims' four q words (a 64-bit broadcast) leaves each
  // key's dot in two int32 lanes, added at the block's end (hadd). u8 K
  // (k + 128, so qbias undoes the bias) and 15-bit q fit int16 exactly. Half
  // a group (8 keys, two ymm) a pass keeps kNr rows' sums in registers.
  template <int kNr>
  FS_TARGET static void qk16_rows(const uint8_t* k, int64_t gstride, const int16_t* const* qw, const float* const* qd,
                                  const int32_t* const* qbias, const uint16_t* ks, int64_t sstride, int nb,
                                  float* out, int64_t ostride) {
    for (int half = 0; half < 2; ++half) {
      __m256 s[kNr];
      for (int r = 0; r < kNr; ++r) s[r] = _mm256_setzero_ps();
      for (int c = 0; c < nb; ++c) {
        __m256i a0[kNr], a1[kNr];
        for (int r = 0; r < kNr; ++r) a0[r] = a1[r] = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
          const uint8_t* line = k + (int64_t{c} * 8 + g) * gstride + half * 32;
          const __m256i k0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(line)));
          const __m256i k1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(line + 16)));
          for (int r = 0; r < kNr; ++r) {
            int64_t w;
            std::memcpy(&w, qw[r] + c * 32 + g * 4, sizeof w);
            const __m256i q4 = _mm256_set1_epi64x(w);
            a0[r] = _mm256_add_epi32(a0[r], _mm256_madd_epi16(k0, q4));
            a1[r] = _mm256_add_epi32(a1[r], _mm256_madd_epi16(k1, q4));
          }
        }
        const __m256 sc =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ks + c * sstride + half * 8)));
        for (int r = 0; r < kNr; ++r) {
          // hadd: keys 0, 1, 4, 5 | 2, 3, 6, 7 by 64-bit pairs; the permute puts them in order.
          const __m256i dot = _mm256_add_epi32(
              _mm256_permute4x64_epi64(_mm256_hadd_epi32(a0[r], a1[r]), _MM_SHUFFLE(3, 1, 2, 0)),
              _mm256_set1_epi32(qbias[r][c]));
          s[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sc, _mm256_set1_ps(qd[r][c])), s[r]);
        }
      }
      for (int r = 0; r < kNr; ++r) _mm256_storeu_ps(out + r * ostride + half * 8, s[r]);
    }
  }
  FS_TARGET static void qk16_q8(const uint8_t* k, int64_t gstride, int nr, const int8_t* const* /*qhi*/,
                                const int8_t* const* /*qlo*/, const int16_t* const* qw, const float* const* qd,
                                const int32_t* const* qbias, const uint16_t* ks, int64_t sstride, int nb, float* out,
                                int64_t ostride) {
    static_assert(kQkRowsQ8 == 4, "one case per row count");
    switch (nr) {
      case 1: return qk16_rows<1>(k, gstride, qw, qd, qbias, ks, sstride, nb, out, ostride);
      case 2: return qk16_rows<2>(k, gstride, qw, qd, qbias, ks, sstride, nb, out, ostride);
      case 3: return qk16_rows<3>(k, gstride, qw, qd, qbias, ks, sstride, nb, out, ostride);
      default: return qk16_rows<4>(k, gstride, qw, qd, qbias, ks, sstride, nb, out, ostride);
    }
  }
  // q4_0 in place (decode_attention_q8.inc): 8 keys' 32 bytes of a K line
  // (dims 8n..8n+3 in the low nibbles, 8n+4..8n+7 in the high, kv_q4.hpp)
  // meet 8-bit q by pmaddubsw, codes <= 15 keeping the int16 sums far from
  // saturating; pmaddwd by ones gives each key's int32. qbias = −8·Σq.
  static constexpr bool kQ4Native = true;
  template <int kNr>
  FS_TARGET static void qk16_q4_rows(const uint8_t* k, const int8_t* const* q8, const float* const* qd,
                                     const int32_t* const* qbias, const uint16_t* ks, int64_t sstride, int nb,
                                     float* out, int64_t ostride) {
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int half = 0; half < 2; ++half) {
      __m256 s[kNr];
      for (int r = 0; r < kNr; ++r) s[r] = _mm256_setzero_ps();
      for (int c = 0; c < nb; ++c) {
        __m256i a[kNr];
        for (int r = 0; r < kNr; ++r) a[r] = _mm256_set1_epi32(qbias[r][c]);
        for (int n = 0; n < 4; ++n) {
          const __m256i line =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + (int64_t{c} * 4 + n) * 64 + half * 32));
          const __m256i lo = _mm256_and_si256(line, low);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(line, 4), low);
          for (int r = 0; r < kNr; ++r) {
            int32_t wl, wh;
            std::memcpy(&wl, q8[r] + c * 32 + n * 8, sizeof wl);
            std::memcpy(&wh, q8[r] + c * 32 + n * 8 + 4, sizeof wh);
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(wl)),
                                               _mm256_maddubs_epi16(hi, _mm256_set1_epi32(wh)));
            a[r] = _mm256_add_epi32(a[r], _mm256_madd_epi16(p, ones));
          }
        }
        const __m256 sc =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ks + c * sstride + half * 8)));
        for (int r = 0; r < kNr; ++r)
          s[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a[r]), _mm256_mul_ps(sc, _mm256_set1_ps(qd[r][c])), s[r]);
      }
      for (int r = 0; r < kNr; ++r) _mm256_storeu_ps(out + r * ostride + half * 8, s[r]);
    }
  }
  FS_TARGET static V max(V a, V b) { return _mm256_max_ps(a, b); }
  FS_TARGET static float hmax(V a) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
  }
  // P·V (decode_attention_q8.inc): a V quad line of 8 dims widens to two
  // ymm of int16, lane pairs holding one dim's keys (0, 1) and (2, 3);
  // pmaddwd against the four P words (a 64-bit broadcast) leaves each dim's
  // sum in two int32 lanes, added when the tile is read (to_float).
  struct I {
    __m256i lo, hi;  // dims 0-3 and 4-7, two lanes each
  };
  struct X {
    __m256i lo, hi;
  };
  using PWord = int16_t;
  using PB = __m256i;
  FS_TARGET static I izero() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  FS_TARGET static X load_quads(const int8_t* v) {
    return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v))),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 16)))};
  }
  // Dims [first, first + 8) of a q4_0 V line (kv_q4.hpp: byte 4·e + key holds dims e and 16 + e), codes − 8.
  FS_TARGET static __m256i dims4_q4(const uint8_t* at, bool high) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
    const __m128i codes = _mm_and_si128(high ? _mm_srli_epi16(b, 4) : b, _mm_set1_epi8(0x0F));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(codes, _mm_set1_epi8(8)));
  }
  FS_TARGET static X load_quads_q4(const uint8_t* v, int first) {
    const uint8_t* at = v + (first % 16) * 4;
    return {dims4_q4(at, first >= 16), dims4_q4(at + 16, first >= 16)};
  }
  FS_TARGET static PB bcast_p(const PWord* p) {
    int64_t w;
    std::memcpy(&w, p, sizeof w);
    return _mm256_set1_epi64x(w);
  }
  FS_TARGET static I dot_quads(I a, const X& x, PB p) {
    return {_mm256_add_epi32(a.lo, _mm256_madd_epi16(x.lo, p)), _mm256_add_epi32(a.hi, _mm256_madd_epi16(x.hi, p))};
  }
  // hadd: dims 0, 1, 4, 5 | 2, 3, 6, 7 by 64-bit pairs; the permute puts them in order.
  FS_TARGET static V to_float(const I& a) {
    return _mm256_cvtepi32_ps(_mm256_permute4x64_epi64(_mm256_hadd_epi32(a.lo, a.hi), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  // W lanes rounded to the nearest integer in [0, 255] at q.
  FS_TARGET static void store_p(PWord* q, V x) {
    const __m256i i = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(x), _mm256_setzero_si256()),
                                       _mm256_set1_epi32(255));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q),
                     _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  FS_TARGET static void widen_fp16x16(const uint16_t* src, float* dst) {
    _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
    _mm256_storeu_ps(dst + 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8))));
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#include "attention/cpu/decode_attention_q8.inc"
#undef FS_TARGET
}  // namespace avx2

// GCC 12's AVX-512 headers build some intrinsics from an "undefined"
// vector that is its own initializer (__Y = __Y); where fold() is inlined
// into some instantiations -Wuninitialized reports it. Nothing here reads
// an uninitialized value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
namespace avx512 {
#define FS_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
struct Simd {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int kQkRows = 4;  // 16 accumulators + 4 K vectors of the 32 zmm
  static constexpr int kPvRows = 8;
  static constexpr int kPvAccumulators = 16;  // of the 32 zmm
  static constexpr bool kDotBf16 = false;  // q·k widened to float
  FS_TARGET static V zero() { return _mm512_setzero_ps(); }
  FS_TARGET static V set1(float f) { return _mm512_set1_ps(f); }
  FS_TARGET static V load(const float* p) { return _mm512_loadu_ps(p); }
  FS_TARGET static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  FS_TARGET static V add(V a, V b) { return _mm512_add_ps(a, b); }
  FS_TARGET static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  FS_TARGET static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  FS_TARGET static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  template <bool kFp16>
  FS_TARGET static V load_half(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (kFp16) {
      return _mm512_cvtph_ps(h);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
  FS_TARGET static __m256 fold(V a) {
    return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
  }
  FS_TARGET static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(fold(a0), fold(a1)), _mm256_hadd_ps(fold(a2), fold(a3)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  }
  FS_TARGET static V exp2(V x) {
    const __m512 floor_v = _mm512_set1_ps(-126.0f);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, floor_v, _CMP_GE_OQ);
    x = _mm512_max_ps(x, floor_v);
    const __m512 xi = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, xi);
    __m512 p = _mm512_set1_ps(1.525273380405984e-05f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-04f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402265069591007e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471805599453e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(xi), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#undef FS_TARGET
}  // namespace avx512

// AVX-512 with BF16: bf16 q·k by vdpbf16ps on the rows as stored (no
// widening, no float copy of q); the rest as AVX-512 F. One dot_bf16 gives
// 16 lanes of partial sums per key; sum16 folds 16 keys' lanes into one
// vector of 16 scores (unpack, shuffle, 128-bit lane shuffles: a fixed tree
// per key, so a key's score does not depend on its neighbours).
namespace avx512bf16 {
#define FS_TARGET __attribute__((target("avx512f,avx512bf16,avx2,fma,f16c")))
struct Simd : avx512::Simd {
  static constexpr bool kDotBf16 = true;
  static constexpr int kDotWidth = 32;
  using B = __m512bh;
  FS_TARGET static B load_bf16(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  FS_TARGET static V dot_bf16(V acc, B a, B b) { return _mm512_dpbf16_ps(acc, a, b); }
  FS_TARGET static V sum16(const V* a) {
    V t[8], u[4];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0 x0+x2, a1 x0+x2, a0 x1+x3, a1 x1+x3]
      t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; ++i)  // per 128-bit lane: the lane's sums of a[4i .. 4i + 3]
      u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const V v0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const V v1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)));
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#undef FS_TARGET
}  // namespace avx512bf16

// AVX-512 VNNI for the q8_0 cache: vpdpbusd of 16 keys' u8 bytes (one 64-byte
// line per 4 dims, kv_q8.hpp) against 4 broadcast q bytes; the rest as
// AVX-512 F. (Its bf16 item is never selected: the AVX-512 F one serves.)
namespace avx512vnni {
#define FS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
struct Simd : avx512::Simd {
  // acc[r] += k (u8) · q[r] (s8, four bytes broadcast from memory): in asm for
  // the embedded broadcast (GCC 12 loads each q word with a separate
  // vpbroadcastd) and an accumulator that stays in its register.
  FS_TARGET static __m512i dpbusd_bcast(__m512i acc, __m512i k, const int8_t* q) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(k), "m"(*reinterpret_cast<const int32_t*>(q)));
    return acc;
  }
  template <int kNr>
  FS_TARGET static void qk16_rows(const uint8_t* k, int64_t gstride, const int8_t* const* qhi, const int8_t* const* qlo,
                                  const float* const* qd, const int32_t* const* qbias, const uint16_t* ks,
                                  int64_t sstride, int nb, float* out, int64_t ostride) {
    V s[kNr];
    for (int r = 0; r < kNr; ++r) s[r] = _mm512_setzero_ps();
    for (int c = 0; c < nb; ++c) {
      __m512i hi[kNr], lo[kNr];
      for (int r = 0; r < kNr; ++r) {
        hi[r] = _mm512_setzero_si512();
        lo[r] = _mm512_set1_epi32(qbias[r][c]);
      }
      const uint8_t* kc = k + int64_t{c} * 8 * gstride;
      for (int g = 0; g < 8; ++g) {
        const __m512i kg = _mm512_loadu_si512(kc + g * gstride);
        for (int r = 0; r < kNr; ++r) {
          hi[r] = dpbusd_bcast(hi[r], kg, qhi[r] + c * 32 + g * 4);
          lo[r] = dpbusd_bcast(lo[r], kg, qlo[r] + c * 32 + g * 4);
        }
      }
      const V sc = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ks + c * sstride)));
      for (int r = 0; r < kNr; ++r)
        s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi[r], 7), lo[r])),
                               _mm512_mul_ps(sc, _mm512_set1_ps(qd[r][c])), s[r]);
    }
    for (int r = 0; r < kNr; ++r) _mm512_storeu_ps(out + r * ostride, s[r]);
  }
  FS_TARGET static void qk16_q8(const uint8_t* k, int64_t gstride, int nr, const int8_t* const* qhi,
                                const int8_t* const* qlo, const int16_t* const* /*qw*/, const float* const* qd,
                                const int32_t* const* qbias, const uint16_t* ks, int64_t sstride, int nb, float* out,
                                int64_t ostride) {
    static_assert(kQkRowsQ8 == 4, "one case per row count");
    switch (nr) {
      case 1: return qk16_rows<1>(k, gstride, qhi, qlo, qd, qbias, ks, sstride, nb, out, ostride);
      case 2: return qk16_rows<2>(k, gstride, qhi, qlo, qd, qbias, ks, sstride, nb, out, ostride);
      case 3: return qk16_rows<3>(k, gstride, qhi, qlo, qd, qbias, ks, sstride, nb, out, ostride);
      default: return qk16_rows<4>(k, gstride, qhi, qlo, qd, qbias, ks, sstride, nb, out, ostride);
    }
  }
  // q4_0 in place (decode_attention_q8.inc): a 64-byte line of a group's K
  // is dims 8n..8n+3 in its low nibbles and 8n+4..8n+7 in its high ones
  // (kv_q4.hpp), each a u8 operand as it is; 8-bit q, qbias = −8·Σq.
  static constexpr bool kQ4Native = true;
  template <int kNr>
  FS_TARGET static void qk16_q4_rows(const uint8_t* k, const int8_t* const* q8, const float* const* qd,
                                     const int32_t* const* qbias, const uint16_t* ks, int64_t sstride, int nb,
                                     float* out, int64_t ostride) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    V s[kNr];
    for (int r = 0; r < kNr; ++r) s[r] = _mm512_setzero_ps();
    for (int c = 0; c < nb; ++c) {
      __m512i a[kNr];
      for (int r = 0; r < kNr; ++r) a[r] = _mm512_set1_epi32(qbias[r][c]);
      const uint8_t* kc = k + int64_t{c} * 4 * 64;
      for (int n = 0; n < 4; ++n) {
        const __m512i line = _mm512_loadu_si512(kc + n * 64);
        const __m512i lo = _mm512_and_si512(line, low);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(line, 4), low);
        for (int r = 0; r < kNr; ++r) {
          a[r] = dpbusd_bcast(a[r], lo, q8[r] + c * 32 + n * 8);
          a[r] = dpbusd_bcast(a[r], hi, q8[r] + c * 32 + n * 8 + 4);
        }
      }
      const V sc = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ks + c * sstride)));
      for (int r = 0; r < kNr; ++r)
        s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[r]), _mm512_mul_ps(sc, _mm512_set1_ps(qd[r][c])), s[r]);
    }
    for (int r = 0; r < kNr; ++r) _mm512_storeu_ps(out + r * ostride, s[r]);
  }
  FS_TARGET static V max(V a, V b) { return _mm512_max_ps(a, b); }
  FS_TARGET static float hmax(V a) { return _mm512_reduce_max_ps(a); }
  using I = __m512i;
  using X = __m512i;
  using PWord = uint8_t;
  using PB = __m512i;
  FS_TARGET static I izero() { return _mm512_setzero_si512(); }
  // 16 dims × 4 keys: one line, V's int8 as they are (vpdpbusd's signed operand).
  FS_TARGET static X load_quads(const int8_t* v) { return _mm512_loadu_si512(v); }
  // A q4_0 V line: dims 0..15 of four keys in the low nibbles, 16..31 in the high (kv_q4.hpp), codes − 8.
  FS_TARGET static X load_quads_q4(const uint8_t* v, int first) {
    const __m512i line = _mm512_loadu_si512(v), low = _mm512_set1_epi8(0x0F);
    const __m512i codes = _mm512_and_si512(first == 0 ? line : _mm512_srli_epi16(line, 4), low);
    return _mm512_sub_epi8(codes, _mm512_set1_epi8(8));
  }
  FS_TARGET static PB bcast_p(const PWord* p) {
    int32_t w;
    std::memcpy(&w, p, sizeof w);
    return _mm512_set1_epi32(w);
  }
  // In asm so the accumulator stays in its register (GCC 12 copied each one
  // out and back around every product of the intrinsic: two moves a product).
  FS_TARGET static I dot_quads(I a, X x, PB p) {
    asm("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(p), "v"(x));
    return a;
  }
  FS_TARGET static V to_float(I a) { return _mm512_cvtepi32_ps(a); }
  // W lanes rounded to the nearest integer in [0, 255] at q (vpmovusdb saturates).
  FS_TARGET static void store_p(PWord* q, V x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q),
                     _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(x), _mm512_setzero_si512())));
  }
  FS_TARGET static void widen_fp16x16(const uint16_t* src, float* dst) {
    _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
  }
};
#include "attention/cpu/decode_attention_kernel.inc"
#include "attention/cpu/decode_attention_q8.inc"
#undef FS_TARGET
}  // namespace avx512vnni
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

const ItemFn kItemAvx2 = avx2::run_item;
const ItemFn kItemAvx512 = avx512::run_item;
const ItemFn kItemAvx512Bf16 = avx512bf16::run_item;
const ItemFn kItemQ8Avx2 = avx2::run_item_q8;
const ItemFn kItemQ8Avx512Vnni = avx512vnni::run_item_q8;

#else
const ItemFn kItemAvx2 = nullptr;
const ItemFn kItemAvx512 = nullptr;
const ItemFn kItemAvx512Bf16 = nullptr;
const ItemFn kItemQ8Avx2 = nullptr;
const ItemFn kItemQ8Avx512Vnni = nullptr;
#endif  // FLASHSCOPE_DECODE_X86

}  // namespace flashscope::cpu::decode
