// llama.cpp's dequantize_row_* (ggml-quants.c) for the block types the
// GPU reads in place, written out loop for loop as the CPU's dequantizer had
// them before it took quant_blocks.h's reader: the independent reference
// that test_quant_blocks holds the shared reader against on random blocks
// (test_dequant holds both to hand-worked values). Test code only.
#pragma once

#include <cstdint>
#include <cstring>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"

namespace flashscope::testing::dequant_reference {

constexpr int kQK32 = 32;   // elements per block of the 32-element types
constexpr int kQK_K = 256;  // elements per K-quant super-block

inline float load_fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_float(h);
}

inline void dequant_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 18;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      dst[j] = x0 * d;
      dst[j + kQK32 / 2] = x1 * d;
    }
  }
}

inline void dequant_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 20;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int x0 = qs[j] & 0x0F;
      const int x1 = qs[j] >> 4;
      dst[j] = x0 * d + m;
      dst[j + kQK32 / 2] = x1 * d + m;
    }
  }
}

inline void dequant_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 22;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const uint32_t qh = uint32_t{src[2]} | uint32_t{src[3]} << 8 | uint32_t{src[4]} << 16 |
                        uint32_t{src[5]} << 24;
    const uint8_t* qs = src + 6;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const uint8_t xh_0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
      const uint8_t xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
      dst[j] = x0 * d;
      dst[j + kQK32 / 2] = x1 * d;
    }
  }
}

inline void dequant_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 24;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint32_t qh = uint32_t{src[4]} | uint32_t{src[5]} << 8 | uint32_t{src[6]} << 16 |
                        uint32_t{src[7]} << 24;
    const uint8_t* qs = src + 8;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const uint8_t xh_0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
      const uint8_t xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (qs[j] & 0x0F) | xh_0;
      const int x1 = (qs[j] >> 4) | xh_1;
      dst[j] = x0 * d + m;
      dst[j + kQK32 / 2] = x1 * d + m;
    }
  }
}

inline void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 34;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQK32; ++j) dst[j] = qs[j] * d;
  }
}

// The 8 (scale, min) pairs of a Q4_K block, 6 bits each, in 12 bytes:
//   j < 4:  sc = q[j] & 63,                        m = q[j+4] & 63
//   j >= 4: sc = (q[j+4] & 0xF) | (q[j-4] >> 6) << 4,  m = (q[j+4] >> 4) | (q[j] >> 6) << 4
// i.e. bytes 0..3 hold sc0..3 plus the top two bits of sc4..7, bytes 4..7
// hold m0..3 plus the top bits of m4..7, bytes 8..11 the low nibbles of
// sc4..7 (low half) and m4..7 (high half).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// Q4_K: 256 elements as 4 chunks of 64; chunk c uses 32 bytes of qs, the low
// nibbles for sub-block 2c (elements 0..31), the high nibbles for 2c+1.
inline void dequant_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 144;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const float d = load_fp16(src);
    const float min = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc;
      uint8_t m;
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// Q6_K: two halves of 128 elements; each half uses 64 bytes of ql, 32 of qh
// and 8 scales. Element l + 32k of a half (k = 0..3, l = 0..31) takes its
// low 4 bits from ql[l + 32(k&1)] (low nibble for k < 2, high for k >= 2)
// and its top 2 bits from qh[l] >> 2k; its scale is sc[l/16 + 2k].
inline void dequant_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 210;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_fp16(src + 208);
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = d * sc[is + 0] * q1;
        dst[l + 32] = d * sc[is + 2] * q2;
        dst[l + 64] = d * sc[is + 4] * q3;
        dst[l + 96] = d * sc[is + 6] * q4;
      }
      dst += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// Q5_K 176: d, dmin, scales[12], qh[32], qs[128]. As Q4_K (same scale and
// min packing, same nibble order), plus a fifth bit: element l of 64-element
// chunk c takes bit 2c of qh[l] (low nibbles) or bit 2c + 1 (high nibbles).
inline void dequant_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 176;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const float d = load_fp16(src);
    const float min = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* ql = src + 48;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc;
      uint8_t m;
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

// n elements of a row of `type` (one of the eight) into dst; false for another type.
inline bool dequantize(GgmlType type, const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t n_blocks = n / ggml_block_size(type);
  switch (type) {
    case GgmlType::kQ4_0: dequant_q4_0(s, dst, n_blocks); return true;
    case GgmlType::kQ4_1: dequant_q4_1(s, dst, n_blocks); return true;
    case GgmlType::kQ5_0: dequant_q5_0(s, dst, n_blocks); return true;
    case GgmlType::kQ5_1: dequant_q5_1(s, dst, n_blocks); return true;
    case GgmlType::kQ8_0: dequant_q8_0(s, dst, n_blocks); return true;
    case GgmlType::kQ4_K: dequant_q4_k(s, dst, n_blocks); return true;
    case GgmlType::kQ5_K: dequant_q5_k(s, dst, n_blocks); return true;
    case GgmlType::kQ6_K: dequant_q6_k(s, dst, n_blocks); return true;
    default: return false;
  }
}

}  // namespace flashscope::testing::dequant_reference
