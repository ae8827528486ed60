// Quantized matrix products for the CPU engine (see quant_matmul.hpp for
// the arithmetic). Kernels come in two builds of the same math:
//   portable  plain integer loops, any CPU; the reference for the others
//   avx2      AVX2 + FMA + F16C, compiled with target attributes and picked
//             at run time, so one binary runs on any x86-64 and is fast on
//             the CPUs that have them (every x86 server and desktop since
//             2013-2015).
//   vnni      AVX-512 VL + VNNI (Ice Lake, Sapphire Rapids, Zen 4 on): the
//             Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K kernels with one vpdpbusd per 32
//             products where AVX2 takes maddubs + madd (one body each, in the
//             quant_matmul_*.inc files, the dot as a trait); the rest as avx2.
//   neon_dot  arm64 with SDOT (Armv8.2's dot products, picked at run time):
//             Q8_0, Q4_0 and Q4_1, two sdot a block per token, and their
//             4-token tiles; the other types, and arm64 CPUs without it, run
//             the portable kernels.
// Two shapes of kernel:
//   per token  one weight row · one token's blocks (decode, and prefill tails)
//   tile       one weight row · a 4-token TileQ8 run: the weight block is
//              unpacked once, the four int32 block sums are reduced to one
//              vector by two rounds of hadd, and the four tokens' scales load
//              as one vector, so a block costs fewer instructions per token
//              than four per-token passes (bench/TUNING.md#figures-moved-out-of-product-comments).
//              Same sums, same rounding per block; only the float
//              accumulation order differs.
#include "backends/cpu/openmp.hpp"
#include "backends/cpu/quant_matmul.hpp"
#include "backends/cpu/quant_matmul_rows.hpp"
#include "backends/cpu/quant_matmul_t16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_X86_KERNELS 1
#include <immintrin.h>
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_NEON_DOT_KERNELS 1
#include <arm_neon.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_features.hpp"
#include "flashscope/half.hpp"

namespace flashscope::cpu {
namespace {

// Bytes per 32-element weight block.
constexpr int kQ4_0Bytes = 18;  // d, qs[16]
constexpr int kQ4_1Bytes = 20;  // d, m, qs[16]
constexpr int kQ5_0Bytes = 22;  // d, qh[4], qs[16]
constexpr int kQ5_1Bytes = 24;  // d, m, qh[4], qs[16]
constexpr int kQ8_0Bytes = 34;  // d, int8 qs[32]

// out[t] = Σ_blocks (weight row) · x[t·x_stride + block], t < nt.
//   w   one weight row, nb blocks of its type
//   x   quantized activations, token t's blocks start at x + t·x_stride
using DotKernel = void (*)(const uint8_t* w, const BlockQ8* x, int64_t x_stride, int nt, int64_t nb, float* out);
// out[0..4) = one weight row · the 4 tokens of a tile, tiles [nb] (see TileQ8).
using TileKernel = void (*)(const uint8_t* w, const TileQ8* tiles, int64_t nb, float* out);

// --- portable kernels ---------------------------------------------------------

namespace portable {
#define FS_TARGET
struct Sum {
  static int32_t q8_0(const int8_t* w, const int8_t* x) {
    int32_t isum = 0;
    for (int j = 0; j < kQ8Block; ++j) isum += w[j] * x[j];
    return isum;
  }
  static int32_t q4(const uint8_t* qs, const int8_t* x) {
    int32_t isum = 0;
    for (int j = 0; j < kQ8Block / 2; ++j) isum += (qs[j] & 0x0F) * x[j] + (qs[j] >> 4) * x[j + 16];
    return isum;
  }
};
#include "backends/cpu/quant_matmul_token.inc"
#undef FS_TARGET
}  // namespace portable

// Q5_0 / Q5_1: as Q4 plus a fifth bit per element, bit j of the u32 qh.
template <bool kHasMin>
void dot_q5_portable(const uint8_t* w, const BlockQ8* x, int64_t xs, int nt, int64_t nb, float* out) {
  constexpr int kBytes = kHasMin ? kQ5_1Bytes : kQ5_0Bytes;
  for (int t = 0; t < nt; ++t) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * kBytes;
      uint32_t qh;
      std::memcpy(&qh, blk + (kHasMin ? 4 : 2), sizeof qh);
      const uint8_t* qs = blk + (kHasMin ? 8 : 6);
      const BlockQ8& xb = x[t * xs + b];
      int32_t isum = 0;
      for (int j = 0; j < kQ8Block / 2; ++j) {
        const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        isum += lo * xb.qs[j] + hi * xb.qs[j + 16];
      }
      const float dd = load_fp16(blk) * xb.d;
      if (kHasMin) {
        acc += dd * static_cast<float>(isum) + load_fp16(blk + 2) * xb.d * static_cast<float>(xb.sum);
      } else {
        acc += dd * static_cast<float>(isum - 16 * xb.sum);
      }
    }
    out[t] = acc;
  }
}

// --- K-quants against 32-element activation blocks ------------------------------
//
// A K-quant super-block holds 256 weights as 8 sub-blocks of 32 (Q4_K, Q5_K:
// a 6-bit scale and min each) or 16 groups of 16 (Q6_K: an int8 scale each).
// The activations stay in BlockQ8 (32 per block, the same input the other
// types read), so sub-block s of super-block sb meets activation block
// 8·sb + s and each sub-block's integer sum is scaled once by
// d_w·sc_s·d_x (Q6_K: the two 16-groups' sums are weighted by their int8
// scales first, still in integers). The min term of Q4_K / Q5_K is
// dmin·m_s·d_x·Σx_q, from the block's precomputed sum.
constexpr int kQK_K = 256;          // elements per super-block
static_assert(kSubBlocks == kQK_K / kQ8Block, "a K-quant sub-block is one Q8 block");

// The 8 (scale, min) pairs of a Q4_K / Q5_K super-block, 6 bits each, from
// its 12 packed bytes (the layout is spelled out in gguf/dequantize.cpp).
inline void unpack_k4_scales(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K / Q5_K: 64-element chunk c uses 32 bytes of qs, the low nibbles for
// sub-block 2c and the high nibbles for 2c+1; Q5_K adds bit s of qh[l] as
// the fifth bit of element l of sub-block s.
template <bool kFifthBit>
void dot_q45_k_portable(const uint8_t* w, const BlockQ8* x, int64_t xs, int nt, int64_t nb, float* out) {
  constexpr int kBytes = kFifthBit ? kQ5_KBytes : kQ4_KBytes;
  const int64_t nsb = nb / kSubBlocks;
  for (int t = 0; t < nt; ++t) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kBytes;
      const float d = load_fp16(blk);
      const float dmin = load_fp16(blk + 2);
      uint8_t sc[8], m[8];
      unpack_k4_scales(blk + 4, sc, m);
      const uint8_t* qh = blk + 16;
      const uint8_t* qs = blk + (kFifthBit ? 48 : 16);
      for (int s = 0; s < kSubBlocks; ++s) {
        const uint8_t* q = qs + 32 * (s / 2);
        const int shift = (s & 1) * 4;
        const BlockQ8& xb = x[t * xs + sb * kSubBlocks + s];
        int32_t isum = 0;
        for (int l = 0; l < kQ8Block; ++l) {
          int v = (q[l] >> shift) & 0xF;
          if (kFifthBit) v |= ((qh[l] >> s) & 1) << 4;
          isum += v * xb.qs[l];
        }
        acc += d * static_cast<float>(sc[s]) * xb.d * static_cast<float>(isum) -
               dmin * static_cast<float>(m[s]) * xb.d * static_cast<float>(xb.sum);
      }
    }
    out[t] = acc;
  }
}

// Q6_K: element l + 32k of half h (k = 0..3) is (low 4 bits from
// ql[64h + l + 32(k&1)], nibble k/2) | (2 bits of qh[32h + l] at 2k) − 32,
// scaled by sc[8h + 2k + l/16]; the 32 elements of one k are one
// activation block.
void dot_q6_k_portable(const uint8_t* w, const BlockQ8* x, int64_t xs, int nt, int64_t nb, float* out) {
  const int64_t nsb = nb / kSubBlocks;
  for (int t = 0; t < nt; ++t) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kQ6_KBytes;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const float d = load_fp16(blk + 208);
      for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) {
          const uint8_t* ql = blk + 64 * h + 32 * (k & 1);
          const uint8_t* qh = blk + 128 + 32 * h;
          const BlockQ8& xb = x[t * xs + sb * kSubBlocks + 4 * h + k];
          int32_t group[2] = {0, 0};
          for (int l = 0; l < kQ8Block; ++l) {
            const int v = (((ql[l] >> (4 * (k / 2))) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            group[l / 16] += v * xb.qs[l];
          }
          const int32_t isum = sc[8 * h + 2 * k] * group[0] + sc[8 * h + 2 * k + 1] * group[1];
          acc += d * xb.d * static_cast<float>(isum);
        }
      }
    }
    out[t] = acc;
  }
}

// --- AVX2 kernels -------------------------------------------------------------

#ifdef FLASHSCOPE_X86_KERNELS
#define FS_AVX2 __attribute__((target("avx2,fma,f16c")))

FS_AVX2 inline float fp16_avx(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

FS_AVX2 inline float hsum_avx(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 bytes of nibbles → 32 unsigned bytes in element order: the low 128
// bits hold the low nibbles (elements 0..15), the high 128 bits the high
// nibbles (elements 16..31), matching the activation block's order.
FS_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Σ u8 × i8 over 32 bytes as 8 int32 lanes (maddubs cannot saturate here:
// |u| ≤ 128 and |s| ≤ 127 give pairs of at most 32512).
FS_AVX2 inline __m256i dot_u8i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

FS_AVX2 inline __m256i load_qs(const int8_t* qs) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)); }

// Σ w·x over 32 signed bytes as 8 int32 lanes through maddubs: |w| is the
// unsigned side and x takes w's sign (w_abs = |w|, precomputed by callers
// that reuse it).
FS_AVX2 inline __m256i dot_i8i8(__m256i w_abs, __m256i w, __m256i x) {
  return dot_u8i8(w_abs, _mm256_sign_epi8(x, w));
}

// The single-token kernels keep two accumulators (even and odd blocks):
// with one, every block waits for the previous block's FMA (4 cycles of
// latency), which is longer than the block's own work in decode.

// One token: Σ over blocks of d_w·d_x·(w_q · x_q).
FS_AVX2 inline __m256 q8_0_block(const uint8_t* blk, const BlockQ8& x, __m256 acc) {
  const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  const __m256i p = dot_i8i8(_mm256_sign_epi8(wq, wq), wq, load_qs(x.qs));
  return _mm256_fmadd_ps(_mm256_set1_ps(fp16_avx(blk) * x.d), _mm256_cvtepi32_ps(p), acc);
}

FS_AVX2 void dot_q8_0_avx2(const uint8_t* w, const BlockQ8* x, int64_t nb, float* out) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    acc0 = q8_0_block(w + b * kQ8_0Bytes, x[b], acc0);
    acc1 = q8_0_block(w + (b + 1) * kQ8_0Bytes, x[b + 1], acc1);
  }
  if (b < nb) acc0 = q8_0_block(w + b * kQ8_0Bytes, x[b], acc0);
  *out = hsum_avx(_mm256_add_ps(acc0, acc1));
}

// nt tokens, one after the other.
template <void (*kOne)(const uint8_t*, const BlockQ8*, int64_t, float*)>
void dot_each(const uint8_t* w, const BlockQ8* x, int64_t xs, int nt, int64_t nb, float* out) {
  for (int t = 0; t < nt; ++t) kOne(w, x + t * xs, nb, out + t);
}

// Four tokens' int32 sums of one block, p[t] = 8 lanes each, reduced to
// [t0 t1 t2 t3 | t0 t1 t2 t3] (lanes 0-3 and 4-7 of each p summed apiece):
// one float conversion and one FMA then serve all four tokens.
FS_AVX2 inline __m256 reduce_tile(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h01 = _mm256_hadd_epi32(p0, p1);  // [p0 p0 p1 p1 | p0 p0 p1 p1] pair sums
  const __m256i h23 = _mm256_hadd_epi32(p2, p3);
  return _mm256_cvtepi32_ps(_mm256_hadd_epi32(h01, h23));
}

FS_AVX2 inline __m256 tile_scale(float dw, const TileQ8& t) {
  return _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_broadcast_ps(reinterpret_cast<const __m128*>(t.d)));
}

FS_AVX2 void tile_q8_0_avx2(const uint8_t* w, const TileQ8* tiles, int64_t nb, float* out) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kQ8_0Bytes;
    const TileQ8& t = tiles[b];
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i w_abs = _mm256_sign_epi8(wq, wq);
    const __m256 sums = reduce_tile(dot_i8i8(w_abs, wq, load_qs(t.qs[0])), dot_i8i8(w_abs, wq, load_qs(t.qs[1])),
                                    dot_i8i8(w_abs, wq, load_qs(t.qs[2])), dot_i8i8(w_abs, wq, load_qs(t.qs[3])));
    acc = _mm256_fmadd_ps(tile_scale(fp16_avx(blk), t), sums, acc);
  }
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
}

// Q5_0 / Q5_1: the nibbles plus 0x10 where bit j of qh is set. Byte j of
// the broadcast qh is shuffled to the bytes of its eight elements, each byte
// ORed with all bits but its own, and compared with 0xFF.
FS_AVX2 inline __m256i unpack_q5(const uint8_t* qh_p, const uint8_t* qs) {
  uint32_t qh;
  std::memcpy(&qh, qh_p, sizeof qh);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bits = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  bits = _mm256_or_si256(bits, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  const __m256i set = _mm256_cmpeq_epi8(bits, _mm256_set1_epi64x(-1));
  return _mm256_or_si256(unpack_nibbles(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// Q4_K / Q5_K chunk c of a super-block as two 32-byte vectors of unsigned
// values, sub-blocks 2c (low nibbles) and 2c+1 (high nibbles). hbits is qh
// shifted right by 2c (Q5_K only): its bits 0 and 1 are the fifth bits.
template <bool kFifthBit>
FS_AVX2 inline void unpack_k45_chunk(const uint8_t* qs, __m256i hbits, __m256i* lo, __m256i* hi) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  *lo = _mm256_and_si256(bytes, low4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
  if (kFifthBit) {
    const __m256i one = _mm256_set1_epi8(1);
    *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
    *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
  }
}

// The per-sub-block factors of a Q4_K / Q5_K super-block against one
// token's eight activation blocks xb[0..8), lane s for sub-block s:
//   f    = d·sc_s·d_x          (scales sub-block s's integer sum)
//   mins = dmin·m_s·d_x·Σx_q   (its min term)
// as two vectors, where the scalar form spent a dozen scalar operations per
// sub-block (most of a decode step's Q4_K time once the dots are vpdpbusd).
FS_AVX2 inline void k45_factors(const BlockQ8* xb, float d, float dmin, const uint8_t* sc_m, __m256* f,
                                __m256* mins) {
  // Element inserts, not gathers (a ymm gather was slower than the scalar form here).
  const __m256 dx = _mm256_setr_ps(xb[0].d, xb[1].d, xb[2].d, xb[3].d, xb[4].d, xb[5].d, xb[6].d, xb[7].d);
  const __m256 sx = _mm256_cvtepi32_ps(
      _mm256_setr_epi32(xb[0].sum, xb[1].sum, xb[2].sum, xb[3].sum, xb[4].sum, xb[5].sum, xb[6].sum, xb[7].sum));
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc_m))));
  const __m256 mf =
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc_m + 8))));
  *f = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), scf), dx);
  *mins = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), mf), dx), sx);
}

// The Q4, Q5 and K-quant kernels with maddubs + madd (quant_matmul_q4.inc,
// quant_matmul_q5.inc, quant_matmul_k45.inc).
namespace avx2 {
#define FS_TARGET FS_AVX2
struct Dot {
  FS_TARGET static __m256i u8i8(__m256i u, __m256i s) { return dot_u8i8(u, s); }
  FS_TARGET static __m256i q5(const uint8_t* qh, const uint8_t* qs) { return unpack_q5(qh, qs); }
};
#include "backends/cpu/quant_matmul_q4.inc"
#include "backends/cpu/quant_matmul_q5.inc"
#include "backends/cpu/quant_matmul_k45.inc"
#undef FS_TARGET
}  // namespace avx2

// Q6_K half h of a super-block as four vectors of signed values (−32..31),
// k = 0..3, each one activation block (see dot_q6_k_portable).
FS_AVX2 inline void unpack_q6_half(const uint8_t* blk, int h, __m256i* q) {
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
  const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2));
  for (int k = 0; k < 4; ++k) q[k] = _mm256_sub_epi8(q[k], bias);
}

// Σ w·x of one 32-element Q6_K group pair as 8 int32 lanes, the first 16
// elements weighted by sc0 and the last 16 by sc1 (maddubs pairs stay within
// ±8128, so the int16 products by an int8 scale cannot overflow madd).
FS_AVX2 inline __m256i q6_dot(__m256i w_abs, __m256i w, __m256i x, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w)), scales);
}

// Block j's two scales as int16, [sc[2j] ×8 | sc[2j+1] ×8], from the
// super-block's sixteen int8 scales loaded once (all): one byte shuffle and
// one widening (two scalar loads and broadcasts each block had cost more).
FS_AVX2 inline __m256i q6_scales(__m128i all, int j) {
  const long long pick = 0x0101010101010101LL;
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(all, _mm_set_epi64x(pick * (2 * j + 1), pick * (2 * j))));
}

FS_AVX2 void dot_q6_k_avx2(const uint8_t* w, const BlockQ8* x, int64_t nb, float* out) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nb / kSubBlocks; ++sb) {
    const uint8_t* blk = w + sb * kQ6_KBytes;
    const BlockQ8* xb = x + sb * kSubBlocks;
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const float d = fp16_avx(blk + 208);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      unpack_q6_half(blk, h, q);
      for (int k = 0; k < 4; k += 2) {
        const BlockQ8& x0 = xb[4 * h + k];
        const BlockQ8& x1 = xb[4 * h + k + 1];
        const __m256i p0 = q6_dot(_mm256_sign_epi8(q[k], q[k]), q[k], load_qs(x0.qs), q6_scales(sc, 4 * h + k));
        const __m256i p1 =
            q6_dot(_mm256_sign_epi8(q[k + 1], q[k + 1]), q[k + 1], load_qs(x1.qs), q6_scales(sc, 4 * h + k + 1));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * x0.d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * x1.d), _mm256_cvtepi32_ps(p1), acc1);
      }
    }
  }
  *out = hsum_avx(_mm256_add_ps(acc0, acc1));
}

FS_AVX2 void tile_q6_k_avx2(const uint8_t* w, const TileQ8* tiles, int64_t nb, float* out) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nb / kSubBlocks; ++sb) {
    const uint8_t* blk = w + sb * kQ6_KBytes;
    const TileQ8* tb = tiles + sb * kSubBlocks;
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const float d = fp16_avx(blk + 208);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      unpack_q6_half(blk, h, q);
      for (int k = 0; k < 4; ++k) {
        const TileQ8& t = tb[4 * h + k];
        const __m256i w_abs = _mm256_sign_epi8(q[k], q[k]);
        const __m256i scales = q6_scales(sc, 4 * h + k);
        const __m256 sums =
            reduce_tile(q6_dot(w_abs, q[k], load_qs(t.qs[0]), scales), q6_dot(w_abs, q[k], load_qs(t.qs[1]), scales),
                        q6_dot(w_abs, q[k], load_qs(t.qs[2]), scales), q6_dot(w_abs, q[k], load_qs(t.qs[3]), scales));
        acc = _mm256_fmadd_ps(tile_scale(d, t), sums, acc);
      }
    }
  }
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
}

// quantize_row_q8 in AVX2, the same value bit for bit: max is exact in any
// order, d and 1/d are the same scalar divisions, and x·(1/d) rounds half to
// even as nearbyint does in the default rounding mode. One block is four
// vectors: |x| max, scale, round, clamp, narrow 32 → 8 bits, and the sum.
FS_AVX2 void quantize_row_q8_avx2(const float* x, BlockQ8* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), amax);  // NaN |x| keeps amax, as std::max does
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const __m256 inv_d = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], inv_d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    // packs work within 128-bit lanes: [0 1 | 2 3] int32 → [q0l q1l q2l q3l | q0h q1h q2h q3h] bytes,
    // put back in element order by a dword permutation.
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes =
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), bytes);
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    y[b].d = d;
    y[b].sum = _mm_cvtsi128_si32(s);
  }
}

// --- AVX-512 VNNI ------------------------------------------------------------
//
// The Q4, Q5 and K-quant kernels (the .inc files) with dot_u8i8 as one vpdpbusd (256-bit,
// AVX-512 VL): lane k = Σ products 4k..4k+3, exactly what maddubs + madd give (no
// saturation either way, see dot_u8i8), so the results are the AVX2 kernels'
// bits; in prefill, where the tile kernel is most of the time, it saves 4 of
// a block's ~25 instructions.
#define FS_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// Q5_0 / Q5_1 with VNNI: qh is bit j of element j, in the order
// unpack_nibbles leaves the elements, so it is the byte mask that adds the
// fifth bit (one masked add for unpack_q5's shuffle, or and compare).
FS_VNNI inline __m256i unpack_q5_vnni(const uint8_t* qh_p, const uint8_t* qs) {
  uint32_t qh;
  std::memcpy(&qh, qh_p, sizeof qh);
  const __m256i nib = unpack_nibbles(qs);
  return _mm256_mask_add_epi8(nib, static_cast<__mmask32>(qh), nib, _mm256_set1_epi8(0x10));
}

namespace vnni {
#define FS_TARGET FS_VNNI
struct Dot {
  FS_TARGET static __m256i u8i8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
  FS_TARGET static __m256i q5(const uint8_t* qh, const uint8_t* qs) { return unpack_q5_vnni(qh, qs); }
};
#include "backends/cpu/quant_matmul_q4.inc"
#include "backends/cpu/quant_matmul_q5.inc"
#include "backends/cpu/quant_matmul_k45.inc"
#undef FS_TARGET
}  // namespace vnni

#endif  // FLASHSCOPE_X86_KERNELS

#ifdef FLASHSCOPE_NEON_DOT_KERNELS
// Per token (quant_matmul_token.inc) and in 4-token tiles.
namespace neon_dot {
#define FS_TARGET FLASHSCOPE_TARGET_DOTPROD
struct Sum {
  FS_TARGET static int32_t q8_0(const int8_t* w, const int8_t* x) { return dot32(vld1q_s8(w), vld1q_s8(w + 16), x); }
  FS_TARGET static int32_t q4(const uint8_t* qs, const int8_t* x) {
    const uint8x16_t q = vld1q_u8(qs);
    return dot32(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), x);
  }
  // 32 int8 products in two sdot (four lanes of four products each), the lanes summed once.
  FS_TARGET static int32_t dot32(int8x16_t w_lo, int8x16_t w_hi, const int8_t* x) {
    const int32x4_t s = vdotq_s32(vdupq_n_s32(0), w_lo, vld1q_s8(x));
    return vaddvq_s32(vdotq_s32(s, w_hi, vld1q_s8(x + 16)));
  }
};
#include "backends/cpu/quant_matmul_token.inc"

// The four tokens' int32 sums of one block ([t0 t1 t2 t3]): the weight bytes
// are loaded and unpacked once for all four.
FS_TARGET inline int32x4_t tile_sums(int8x16_t w_lo, int8x16_t w_hi, const TileQ8& t) {
  int32x4_t s[kTileTokens];
  for (int k = 0; k < kTileTokens; ++k)
    s[k] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w_lo, vld1q_s8(t.qs[k])), w_hi, vld1q_s8(t.qs[k] + 16));
  return vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
}

FS_TARGET void tile_q8_0(const uint8_t* w, const TileQ8* tiles, int64_t nb, float* out) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kQ8_0Bytes;
    const auto* wq = reinterpret_cast<const int8_t*>(blk + 2);
    const int32x4_t sums = tile_sums(vld1q_s8(wq), vld1q_s8(wq + 16), tiles[b]);
    acc = vfmaq_f32(acc, vmulq_n_f32(vld1q_f32(tiles[b].d), load_fp16(blk)), vcvtq_f32_s32(sums));
  }
  vst1q_f32(out, acc);
}

// Σ d_w·d_x·(nib · x_q) + m_w·s_x per token, m_w = −8·d_w for Q4_0 (TileQ8::s = d_x·Σx_q).
template <bool kHasMin>
FS_TARGET void tile_q4(const uint8_t* w, const TileQ8* tiles, int64_t nb, float* out) {
  constexpr int kBytes = kHasMin ? kQ4_1Bytes : kQ4_0Bytes;
  const uint8x16_t low = vdupq_n_u8(0x0F);
  float32x4_t acc = vdupq_n_f32(0.0f), offset = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kBytes;
    const TileQ8& t = tiles[b];
    const float dw = load_fp16(blk);
    const float mw = kHasMin ? load_fp16(blk + 2) : -8.0f * dw;
    const uint8x16_t qs = vld1q_u8(blk + (kHasMin ? 4 : 2));
    const int32x4_t sums =
        tile_sums(vreinterpretq_s8_u8(vandq_u8(qs, low)), vreinterpretq_s8_u8(vshrq_n_u8(qs, 4)), t);
    acc = vfmaq_f32(acc, vmulq_n_f32(vld1q_f32(t.d), dw), vcvtq_f32_s32(sums));
    offset = vfmaq_n_f32(offset, vld1q_f32(t.s), mw);
  }
  vst1q_f32(out, vaddq_f32(acc, offset));
}
#undef FS_TARGET
}  // namespace neon_dot
#endif  // FLASHSCOPE_NEON_DOT_KERNELS

CpuIsa& isa_setting() {
  static CpuIsa isa = detected_cpu_isa();
  return isa;
}

DotKernel pick_kernel(GgmlType type, CpuIsa isa) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (isa == CpuIsa::kAvx512Vnni) {
    if (type == GgmlType::kQ4_0) return dot_each<vnni::dot_q4<false>>;
    if (type == GgmlType::kQ4_1) return dot_each<vnni::dot_q4<true>>;
    if (type == GgmlType::kQ5_0) return dot_each<vnni::dot_q5<false>>;
    if (type == GgmlType::kQ5_1) return dot_each<vnni::dot_q5<true>>;
    if (type == GgmlType::kQ4_K) return dot_each<vnni::dot_q45_k<false>>;
    if (type == GgmlType::kQ5_K) return dot_each<vnni::dot_q45_k<true>>;
  }
  if (isa >= CpuIsa::kAvx2) {
    switch (type) {
      case GgmlType::kQ8_0: return dot_each<dot_q8_0_avx2>;
      case GgmlType::kQ4_0: return dot_each<avx2::dot_q4<false>>;
      case GgmlType::kQ4_1: return dot_each<avx2::dot_q4<true>>;
      case GgmlType::kQ5_0: return dot_each<avx2::dot_q5<false>>;
      case GgmlType::kQ5_1: return dot_each<avx2::dot_q5<true>>;
      case GgmlType::kQ4_K: return dot_each<avx2::dot_q45_k<false>>;
      case GgmlType::kQ5_K: return dot_each<avx2::dot_q45_k<true>>;
      case GgmlType::kQ6_K: return dot_each<dot_q6_k_avx2>;
      default: break;  // the portable kernel below
    }
  }
#elif defined(FLASHSCOPE_NEON_DOT_KERNELS)
  if (isa == CpuIsa::kNeonDot) {
    if (type == GgmlType::kQ8_0) return neon_dot::dot_q8_0;
    if (type == GgmlType::kQ4_0) return neon_dot::dot_q4<false>;
    if (type == GgmlType::kQ4_1) return neon_dot::dot_q4<true>;
  }
#else
  (void)isa;
#endif
  switch (type) {
    case GgmlType::kQ8_0: return portable::dot_q8_0;
    case GgmlType::kQ4_0: return portable::dot_q4<false>;
    case GgmlType::kQ4_1: return portable::dot_q4<true>;
    case GgmlType::kQ5_0: return dot_q5_portable<false>;
    case GgmlType::kQ5_1: return dot_q5_portable<true>;
    case GgmlType::kQ4_K: return dot_q45_k_portable<false>;
    case GgmlType::kQ5_K: return dot_q45_k_portable<true>;
    case GgmlType::kQ6_K: return dot_q6_k_portable;
    default: return nullptr;
  }
}

// The 4-token tile kernel for `type`, or null where there is none (the
// per-token kernel then runs every token).
TileKernel pick_tile_kernel(GgmlType type, CpuIsa isa) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (isa == CpuIsa::kAvx512Vnni) {
    if (type == GgmlType::kQ4_0) return vnni::tile_q4<false>;
    if (type == GgmlType::kQ4_1) return vnni::tile_q4<true>;
    if (type == GgmlType::kQ5_0) return vnni::tile_q5<false>;
    if (type == GgmlType::kQ5_1) return vnni::tile_q5<true>;
    if (type == GgmlType::kQ4_K) return vnni::tile_q45_k<false>;
    if (type == GgmlType::kQ5_K) return vnni::tile_q45_k<true>;
  }
  if (isa >= CpuIsa::kAvx2) {
    switch (type) {
      case GgmlType::kQ8_0: return tile_q8_0_avx2;
      case GgmlType::kQ4_0: return avx2::tile_q4<false>;
      case GgmlType::kQ4_1: return avx2::tile_q4<true>;
      case GgmlType::kQ5_0: return avx2::tile_q5<false>;
      case GgmlType::kQ5_1: return avx2::tile_q5<true>;
      case GgmlType::kQ4_K: return avx2::tile_q45_k<false>;
      case GgmlType::kQ5_K: return avx2::tile_q45_k<true>;
      case GgmlType::kQ6_K: return tile_q6_k_avx2;
      default: break;
    }
  }
#elif defined(FLASHSCOPE_NEON_DOT_KERNELS)
  if (isa == CpuIsa::kNeonDot) {
    if (type == GgmlType::kQ8_0) return neon_dot::tile_q8_0;
    if (type == GgmlType::kQ4_0) return neon_dot::tile_q4<false>;
    if (type == GgmlType::kQ4_1) return neon_dot::tile_q4<true>;
  }
#else
  (void)type;
  (void)isa;
#endif
  return nullptr;
}

// Σ a[i]·b[i] with 8 independent partial sums, which the compiler keeps in
// one vector register (no -ffast-math needed to vectorise it).
float dot_f32(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 8;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

}  // namespace

void quantize_row_q8(const float* x, BlockQ8* y, int64_t n) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (active_cpu_isa() >= CpuIsa::kAvx2) return quantize_row_q8_avx2(x, y, n);
#endif
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    bool nan = false;
    for (int j = 0; j < kQ8Block; ++j) {
      amax = std::max(amax, std::fabs(xb[j]));
      nan = nan || std::isnan(xb[j]);
    }
    // A NaN activation: zeros under a NaN scale, so the products come out NaN (no int8 holds one).
    const float d = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
    const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQ8Block; ++j) {
      const int q = nan ? 0 : static_cast<int>(std::nearbyint(std::clamp(xb[j] * inv_d, -127.0f, 127.0f)));
      y[b].qs[j] = static_cast<int8_t>(std::clamp(q, -127, 127));
      sum += y[b].qs[j];
    }
    y[b].d = d;
    y[b].sum = sum;
  }
}

bool matmul_uses_q8(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

bool matmul_supports(GgmlType type) { return matmul_uses_q8(type) || ggml_type_can_dequantize(type); }

CpuIsa detected_cpu_isa() {
#ifdef FLASHSCOPE_NEON_DOT_KERNELS
  if (cpu_has_neon_dotprod()) return CpuIsa::kNeonDot;
#endif
  if (!cpu_has_avx2()) return CpuIsa::kPortable;
  return cpu_has_avx512_vnni() ? CpuIsa::kAvx512Vnni : CpuIsa::kAvx2;
}
CpuIsa active_cpu_isa() { return isa_setting(); }
void set_cpu_isa(CpuIsa isa) {
  auto runs = [](CpuIsa i) {
    switch (i) {
      case CpuIsa::kAvx2: return cpu_has_avx2();
      case CpuIsa::kAvx512Vnni: return cpu_has_avx512_vnni();
      case CpuIsa::kNeonDot: return detected_cpu_isa() == CpuIsa::kNeonDot;
      default: return true;
    }
  };
  // x86's builds nest (VNNI over AVX2): one wider than the CPU has gives the widest it has; elsewhere portable.
  while (!runs(isa)) isa = isa == CpuIsa::kAvx512Vnni ? CpuIsa::kAvx2 : CpuIsa::kPortable;
  isa_setting() = isa;
}
const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kNeonDot: return "neon-dotprod";
    case CpuIsa::kAvx512Vnni: return "avx512vnni";
    case CpuIsa::kAvx2: return "avx2";
    default: return "portable";
  }
}

void pack_q8_tiles(const BlockQ8* x, int64_t n, int64_t nb, TileQ8* tiles) {
  for (int64_t i = 0; i < n / kTileTokens; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      TileQ8& tile = tiles[i * nb + b];
      for (int t = 0; t < kTileTokens; ++t) {
        const BlockQ8& src = x[(i * kTileTokens + t) * nb + b];
        tile.d[t] = src.d;
        tile.s[t] = src.d * static_cast<float>(src.sum);
        std::memcpy(tile.qs[t], src.qs, sizeof src.qs);
      }
    }
  }
}

Status matmul(const QuantMatrix& w, const float* x, int64_t ldx, const BlockQ8* xq, const TileQ8* tiles, int64_t n,
              float* y, int64_t ldy) {
  if (!matmul_supports(w.type)) {
    const char* name = ggml_type_name(w.type);
    return unsupported(std::string("matmul with ") + (name ? name : "an unknown ggml type") +
                       " weights is not supported");
  }
  if (n <= 0 || w.rows <= 0) return Status::ok_status();
  const bool q8 = matmul_uses_q8(w.type);
  if (w.data == nullptr || y == nullptr || (q8 ? xq == nullptr : x == nullptr)) {
    return invalid_argument("matmul: null weight, input or output");
  }
  const int64_t rows = w.rows;
  if (q8 && tiles != nullptr && matmul_t16_applies(w.type)) {  // whole 16-token tiles (quant_matmul_t16.hpp)
    int64_t done = 0;
    FLASHSCOPE_RETURN_IF_ERROR(matmul_t16(w, xq, n, y, ldy, &done));
    if (done == n) return Status::ok_status();
    const int64_t nb = w.cols / kQ8Block;  // the rest from token `done`, a whole 4-token tile
    xq += done * nb;
    tiles += done / kTileTokens * nb;
    y += done * ldy;
    n -= done;
  }
  const bool parallel = rows * w.cols * n >= kParallelMinMacs;

  if (q8) {
    const DotKernel kernel = pick_kernel(w.type, active_cpu_isa());
    const TileKernel tile_kernel = tiles != nullptr ? pick_tile_kernel(w.type, active_cpu_isa()) : nullptr;
    const int64_t nb = w.cols / kQ8Block;
    const int64_t full_tiles = tile_kernel != nullptr ? n / kTileTokens : 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (parallel)
#endif
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* w_row = w.data + static_cast<uint64_t>(r) * w.row_bytes;
      float out[kTileTokens];
      for (int64_t i = 0; i < full_tiles; ++i) {
        tile_kernel(w_row, tiles + i * nb, nb, out);
        for (int t = 0; t < kTileTokens; ++t) y[(i * kTileTokens + t) * ldy + r] = out[t];
      }
      for (int64_t t0 = full_tiles * kTileTokens; t0 < n; t0 += kTileTokens) {
        const int nt = static_cast<int>(std::min<int64_t>(kTileTokens, n - t0));
        kernel(w_row, xq + t0 * nb, nb, nt, nb, out);
        for (int t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = out[t];
      }
    }
    return Status::ok_status();
  }

  // Float fallback: each thread expands one weight row at a time.
  std::vector<float> scratch;
  try {
    scratch.resize(static_cast<size_t>(max_threads()) * static_cast<size_t>(w.cols));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "matmul: cannot allocate dequantization scratch"};
  }
  // dequantize_row only fails on arguments checked above; remember a failure
  // rather than returning from inside the parallel loop.
  bool failed = false;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(|| : failed) if (parallel)
#endif
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scratch.data() + static_cast<size_t>(thread_id()) * static_cast<size_t>(w.cols);
    if (!dequantize_row(w.type, w.data + static_cast<uint64_t>(r) * w.row_bytes, row, w.cols).ok()) {
      failed = true;
      continue;
    }
    for (int64_t t = 0; t < n; ++t) y[t * ldy + r] = dot_f32(row, x + t * ldx, w.cols);
  }
  if (failed) return {StatusCode::kCorruptData, "matmul: a weight row could not be dequantized"};
  return Status::ok_status();
}

}  // namespace flashscope::cpu
