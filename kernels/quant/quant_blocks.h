// GGUF weight blocks read where they lie (the device's copy of the file's
// bytes), one 32-element group at a time: what the quantized GEMV, the
// dequantization into bf16 and the quantized embedding lookup share. Host
// and device alike: the CPU's dequantize_row (runtime/src/gguf/dequantize.cpp)
// decodes these types with it too, and the CPU tests hold every group
// against llama.cpp's loops written out (tests/support/dequant_reference.hpp)
// without a GPU.
//
// A group is 32 consecutive elements of a row: a whole block of the
// 32-element types, a sub-block of a K-quant super-block (8 per 256). Its
// elements are
//   value[i] = a · q[i] + b      a = a0 for i < 16, a1 for i >= 16
// with q small integers (held exactly as floats). a0 = a1 except in Q6_K,
// whose scales cover 16 elements. decode_group computes a and b with the
// float operations of llama.cpp's dequantizer, so a · q + b (group_value) is
// bit for bit llama.cpp's value: the CPU test asserts that.
//
// Block layouts (bytes; d, m, dmin fp16; REFERENCE.md, ggml-common.h):
//   Q4_0 18: d, qs[16]              q = nibble − 8,            a = d
//   Q4_1 20: d, m, qs[16]           q = nibble,                a = d, b = m
//   Q5_0 22: d, qh[4], qs[16]       q = nibble | hibit<<4 − 16, a = d
//   Q5_1 24: d, m, qh[4], qs[16]    q = nibble | hibit<<4,     a = d, b = m
//   Q8_0 34: d, int8 qs[32]         q = qs,                    a = d
//     (byte j's low nibble is element j, its high nibble element j + 16;
//      qh bit j is element j's fifth bit)
//   Q4_K 144: d, dmin, scales[12], qs[128]            sub-block j: a = d·sc_j, b = −dmin·m_j,
//             q = nibble of qs[32·(j/2) + l] (low for even j, high for odd)
//   Q5_K 176: d, dmin, scales[12], qh[32], qs[128]    as Q4_K, plus bit j of qh[l] as q's fifth bit
//   Q6_K 210: ql[128], qh[64], int8 scales[16], d     group j = 4h + r (half h, quarter r):
//             low 4 bits from ql[64h + 32(r&1) + l] (low nibble for r < 2), top 2 from
//             qh[32h + l] >> 2r; q − 32; a = d·scale[8h + 2r + l/16]
//
// Alignment: a device row starts where the file's row starts relative to an
// allocation aligned to 256, so Q4_1, Q5_1, Q4_K and Q5_K fields are 4-byte
// aligned; Q4_0, Q5_0, Q8_0 and Q6_K blocks only 2-byte aligned. Those are
// read on the device as aligned 32-bit words shifted together
// (load_words_a2), which may read 2 bytes past the group's last field:
// allocations of such rows keep kQuantTailPad bytes after their last row.
// The host reads bytes where they lie (the CPU's dequantize_row is this
// reader too, gguf/dequantize.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define FS_QUANT_HD __host__ __device__ __forceinline__
#else
#define FS_QUANT_HD inline
#endif
// Unrolled in device code; the host compiler knows no such pragma.
#if defined(__CUDA_ARCH__)
#define FS_QUANT_UNROLL _Pragma("unroll")
#else
#define FS_QUANT_UNROLL
#endif

namespace flashscope::kernels::quant {

// ggml type ids of the block types the GPU reads in place.
enum QuantType : int {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
};

inline constexpr int kGroup = 32;        // elements per group
inline constexpr int kQuantTailPad = 16;  // bytes an allocation keeps after its last row (see above)

// Bytes per block and elements per block of a type; 0 for a type not listed.
FS_QUANT_HD constexpr int block_bytes(int type) {
  switch (type) {
    case kQ4_0: return 18;
    case kQ4_1: return 20;
    case kQ5_0: return 22;
    case kQ5_1: return 24;
    case kQ8_0: return 34;
    case kQ4_K: return 144;
    case kQ5_K: return 176;
    case kQ6_K: return 210;
    default: return 0;
  }
}
FS_QUANT_HD int block_elems(int type) {
  return type == kQ4_K || type == kQ5_K || type == kQ6_K ? 256 : block_bytes(type) ? 32 : 0;
}
FS_QUANT_HD bool is_quant_type(int type) { return block_bytes(type) != 0; }

FS_QUANT_HD float fp16_bits_to_float(uint32_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFFu)));
#else
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// An aligned 32-bit word (p 4-byte aligned).
FS_QUANT_HD uint32_t ld_u32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned int*>(p));
#else
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// An aligned 16-bit word (p 2-byte aligned).
FS_QUANT_HD uint32_t ld_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// 4·N bytes from p (2-byte aligned) as N little-endian words. On the
// device: N aligned loads when p is 4-byte aligned, else N + 1 (the first
// starts 2 bytes before the range, the last reaches 2 bytes past it) shifted
// together. On the host: the bytes themselves (no alignment needed, nothing
// read outside the range).
template <int N>
FS_QUANT_HD void load_words_a2(const uint8_t* p, uint32_t (&w)[N]) {
#if defined(__CUDA_ARCH__)
  const uintptr_t odd = reinterpret_cast<uintptr_t>(p) & 2u;
  const uint8_t* base = p - odd;
  if (odd == 0) {
FS_QUANT_UNROLL
    for (int i = 0; i < N; ++i) w[i] = ld_u32(base + 4 * i);
  } else {
    uint32_t prev = ld_u32(base);
FS_QUANT_UNROLL
    for (int i = 0; i < N; ++i) {
      const uint32_t next = ld_u32(base + 4 * (i + 1));
      w[i] = (prev >> 16) | (next << 16);
      prev = next;
    }
  }
#else
  std::memcpy(w, p, sizeof w);
#endif
}

// 4·N bytes from p (4-byte aligned); on the device, 16-byte loads where p is
// 16-byte aligned (Q4_K and Q5_K super-blocks of a row that starts so).
template <int N>
FS_QUANT_HD void load_words_a4(const uint8_t* p, uint32_t (&w)[N]) {
#if defined(__CUDA_ARCH__)
  if constexpr (N % 4 == 0) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
FS_QUANT_UNROLL
      for (int i = 0; i < N / 4; ++i) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
        w[4 * i] = v.x;
        w[4 * i + 1] = v.y;
        w[4 * i + 2] = v.z;
        w[4 * i + 3] = v.w;
      }
      return;
    }
  }
#endif
FS_QUANT_UNROLL
  for (int i = 0; i < N; ++i) w[i] = ld_u32(p + 4 * i);
}

// An integer 0 <= u < 2^22 minus `offset` as a float, exactly, without an
// int-to-float conversion instruction (a quarter-rate one on the GPU):
// 2^23 + u is a float whose mantissa is u.
FS_QUANT_HD float small_int(uint32_t u, float offset) {
  const uint32_t bits = 0x4B000000u | u;
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(bits);
#else
  std::memcpy(&f, &bits, sizeof f);
#endif
  return f - (8388608.0f + offset);
}

// b defaults to −0, the additive identity of IEEE floats: a·q + (−0) is
// a·q bit for bit, a negative zero included (+0 would turn the CPU's −0 into
// +0, and bf16 keeps the sign).
struct GroupScales {
  float a0 = 0.0f, a1 = 0.0f, b = -0.0f;
};

// Element i of a decoded group, a·q + b rounded after each operation: the
// CPU dequantizer's float, bit for bit. On the device one fused multiply-add
// computes the same float, because a·q is exact wherever b is not −0: a is
// an fp16 d (11 significant bits) or d·scale with a 6-bit scale (17 bits),
// q has at most 5 bits, so a·q fits fp32's 24; and a·q + (−0) rounds a·q
// once either way (Q4_0, Q5_0, Q8_0, Q6_K).
FS_QUANT_HD float group_value(const GroupScales& s, int i, float q) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(i < 16 ? s.a0 : s.a1, q, s.b);
#else
  return (i < 16 ? s.a0 : s.a1) * q + s.b;  // contracted into an fma or not, the same float
#endif
}

// The 6-bit (scale, min) pairs of sub-blocks 2·part and 2·part + 1 of a
// K-quant's 12 scale bytes (three words), in bytes 0 and 1 of *sc and *m:
// for part < 2, bytes 2·part and 2·part + 1 (scales) and those + 4 (mins);
// for part >= 2, the low (scales) or high (mins) nibbles of bytes 2·part + 4
// and + 5 with the top two bits of bytes 2·part − 4 and 2·part − 3 (scales)
// or 2·part and 2·part + 1 (mins) above them. The two sub-blocks sit side
// by side, so both are computed two bytes at a time; both forms are computed
// and one selected, since part is a lane's own (run time) in the GEMV and a
// branch on it would run both sides one after the other.
FS_QUANT_HD void scale_min_k4_pair(int part, const uint32_t (&s)[3], uint32_t* sc, uint32_t* m) {
  const int shift = 16 * (part % 2);
  const uint32_t a = s[0] >> shift, b = s[1] >> shift, c = s[2] >> shift;  // bytes 2·(part%2) + {0, 1}, + 4, + 8
  const bool low = part < 2;
  *sc = low ? a & 0x3F3Fu : (c & 0x0F0Fu) | ((a >> 2) & 0x3030u);
  *m = low ? b & 0x3F3Fu : ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
}

// Parts. The few-row GEMM gives each lane one part of a row per step: the
// bytes it loads together and decodes group by group. A step is four parts
// side by side: four blocks of a 32-element type (128 elements, a part is
// one group), or one K-quant super-block (256 elements, a part is the two
// groups that share their quant bytes: Q4_K/Q5_K sub-blocks 2p and 2p + 1,
// the low and high nibbles of the same 32 bytes; Q6_K groups 4·(p/2) + p%2
// and that + 2, the low and high nibbles of the same ql bytes). load_part
// fetches a part's bytes in as few and as wide loads as the layout allows
// (16-byte loads for Q4_K and Q5_K when the super-block is 16-byte aligned);
// decode_part turns one of its groups into q and scales. Split so that a
// kernel has the next step's bytes in flight while it decodes this one;
// decode_group (below) is the two together, so the host test of every group
// holds the device's decoder too.
FS_QUANT_HD constexpr int part_groups(int type) { return type == kQ4_K || type == kQ5_K || type == kQ6_K ? 2 : 1; }
FS_QUANT_HD constexpr int step_groups(int type) { return 4 * part_groups(type); }

// Group (of the row) `sub` of part `part` of step `step`, and back.
FS_QUANT_HD int part_group(int type, int step, int part, int sub) {
  if (type == kQ4_K || type == kQ5_K) return 8 * step + 2 * part + sub;
  if (type == kQ6_K) return 8 * step + 4 * (part / 2) + part % 2 + 2 * sub;
  return 4 * step + part;
}
struct PartOfGroup {
  int step, part, sub;
};
FS_QUANT_HD PartOfGroup part_of_group(int type, int g) {
  const int j = g % 8;
  if (type == kQ4_K || type == kQ5_K) return {g / 8, j / 2, j % 2};
  if (type == kQ6_K) return {g / 8, 2 * (j / 4) + j % 2, (j % 4) / 2};
  return {g / 4, g % 4, 0};
}

// A part's bytes as little-endian words; which fields a type fills:
//   head  32-element types: d (Q4_1/Q5_1: d | m << 16) in head[0], Q5_0/Q5_1 qh in head[1];
//         Q4_K/Q5_K: the super-block's first 16 bytes (d, dmin, scales[12]);
//         Q6_K: d in head[0], the part's two groups' scale byte pairs in head[1]
//   qh    Q5_K: the super-block's qh[32]; Q6_K: the part's 32 qh bytes
//   qs    the part's quant bytes (16 for Q4/Q5 blocks, 32 otherwise)
struct PartBytes {
  uint32_t head[4];
  uint32_t qh[8];
  uint32_t qs[8];
};

template <int N>
FS_QUANT_HD void copy_words(const uint32_t (&src)[N], uint32_t* dst) {
FS_QUANT_UNROLL
  for (int i = 0; i < N; ++i) dst[i] = src[i];
}

template <int T>
FS_QUANT_HD void load_part(const uint8_t* row, int step, int part, PartBytes& b) {
  if constexpr (T == kQ4_K || T == kQ5_K) {
    const uint8_t* sb = row + int64_t(step) * block_bytes(T);
    uint32_t head[4], qs[8];
    load_words_a4(sb, head);
    copy_words(head, b.head);
    if constexpr (T == kQ5_K) {
      uint32_t qh[8];
      load_words_a4(sb + 16, qh);
      copy_words(qh, b.qh);
    }
    load_words_a4(sb + (T == kQ5_K ? 48 : 16) + 32 * part, qs);
    copy_words(qs, b.qs);
  } else if constexpr (T == kQ6_K) {
    const uint8_t* sb = row + int64_t(step) * block_bytes(T);
    const int h = part / 2, r0 = part % 2;
    uint32_t ql[8], qh[8];
    load_words_a2(sb + 64 * h + 32 * r0, ql);
    load_words_a2(sb + 128 + 32 * h, qh);
    copy_words(ql, b.qs);
    copy_words(qh, b.qh);
    // group r (r0 or r0 + 2) of half h: scales[8h + 2r], scales[8h + 2r + 1]
    b.head[1] = ld_u16(sb + 192 + 8 * h + 2 * r0) | (ld_u16(sb + 192 + 8 * h + 2 * r0 + 4) << 16);
    b.head[0] = ld_u16(sb + 208);
  } else {
    const uint8_t* blk = row + int64_t(4 * step + part) * block_bytes(T);
    if constexpr (T == kQ4_1 || T == kQ5_1) {
      b.head[0] = ld_u32(blk);
      if constexpr (T == kQ5_1) b.head[1] = ld_u32(blk + 4);
      uint32_t qs[4];
      load_words_a4(blk + (T == kQ5_1 ? 8 : 4), qs);
      copy_words(qs, b.qs);
    } else {
      b.head[0] = ld_u16(blk);
      if constexpr (T == kQ8_0) {
        uint32_t qs[8];
        load_words_a2(blk + 2, qs);
        copy_words(qs, b.qs);
      } else {
        if constexpr (T == kQ5_0) {
          uint32_t qh[1];
          load_words_a2(blk + 2, qh);
          b.head[1] = qh[0];
        }
        uint32_t qs[4];
        load_words_a2(blk + (T == kQ5_0 ? 6 : 2), qs);
        copy_words(qs, b.qs);
      }
    }
  }
}

// Byte i of the word array w (compile-time i after unrolling).
FS_QUANT_HD uint32_t byte_at(const uint32_t* w, int i) { return (w[i / 4] >> (8 * (i % 4))) & 0xFFu; }

// A loaded part's group `sub` as four "quads" of elements 4·quad .. 4·quad + 3
// (quad 0..7): quad_codes gives a quad's four codes u, element 4·quad + i in
// byte i, with q = u − quad_offset (small_int of the byte); part_scales the
// group's a0, a1, b. Word-wide masks and shifts, so a kernel pays about one
// instruction per element to turn a code into q (quad_q); decode_part is
// the two together, so the host tests of every group hold this decoder.
template <int T>
FS_QUANT_HD constexpr float quad_offset() {
  return T == kQ4_0 ? 8.0f : T == kQ5_0 ? 16.0f : T == kQ8_0 ? 128.0f : T == kQ6_K ? 32.0f : 0.0f;
}

// Bits 0..3 of h as bit 4 of bytes 0..3 (the four products h·2^(4+7j) land
// on distinct bits, so nothing carries; bit j of h ends at 8j + 4).
FS_QUANT_HD uint32_t spread_bit4(uint32_t h) { return (h * 0x02040810u) & 0x10101010u; }

template <int T>
FS_QUANT_HD uint32_t quad_codes(const PartBytes& b, int part, int sub, int quad) {
  if constexpr (T == kQ4_0 || T == kQ4_1 || T == kQ5_0 || T == kQ5_1) {
    // byte j's low nibble is element j, its high nibble element j + 16
    uint32_t u = (b.qs[quad % 4] >> (4 * (quad / 4))) & 0x0F0F0F0Fu;
    if constexpr (T == kQ5_0 || T == kQ5_1) u |= spread_bit4((b.head[1] >> (4 * quad)) & 0xFu);
    return u;
  } else if constexpr (T == kQ8_0) {
    return b.qs[quad] ^ 0x80808080u;  // int8 q + 128
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    uint32_t u = (b.qs[quad] >> (4 * sub)) & 0x0F0F0F0Fu;
    if constexpr (T == kQ5_K) u |= ((b.qh[quad] >> (2 * part + sub)) & 0x01010101u) << 4;
    return u;
  } else {
    static_assert(T == kQ6_K, "a block type of quant_blocks.h");
    const int r = part % 2 + 2 * sub;
    return ((b.qs[quad] >> (4 * sub)) & 0x0F0F0F0Fu) | (((b.qh[quad] >> (2 * r)) & 0x03030303u) << 4);
  }
}

// q of byte i of a quad's codes: small_int(byte, quad_offset), one byte
// permute on the device (byte i beside the exponent byte of 2^23).
template <int T>
FS_QUANT_HD float quad_q(uint32_t codes, int i) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(__byte_perm(codes, 0x4B000000u, 0x7440u + uint32_t(i))) - (8388608.0f + quad_offset<T>());
#else
  return small_int((codes >> (8 * i)) & 0xFFu, quad_offset<T>());
#endif
}

template <int T>
FS_QUANT_HD GroupScales part_scales(const PartBytes& b, int part, int sub) {
  GroupScales s;
  if constexpr (T == kQ4_0 || T == kQ5_0 || T == kQ8_0) {
    s.a0 = s.a1 = fp16_bits_to_float(b.head[0] & 0xFFFFu);
  } else if constexpr (T == kQ4_1 || T == kQ5_1) {
    s.a0 = s.a1 = fp16_bits_to_float(b.head[0] & 0xFFFFu);
    s.b = fp16_bits_to_float(b.head[0] >> 16);
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    const uint32_t sw[3] = {b.head[1], b.head[2], b.head[3]};
    uint32_t sc, m;
    scale_min_k4_pair(part, sw, &sc, &m);  // the same for both subs: a kernel decoding both computes it once
    s.a0 = s.a1 = fp16_bits_to_float(b.head[0] & 0xFFFFu) * float((sc >> (8 * sub)) & 0xFFu);
    s.b = -(fp16_bits_to_float(b.head[0] >> 16) * float((m >> (8 * sub)) & 0xFFu));
  } else if constexpr (T == kQ6_K) {
    const uint32_t scales = b.head[1] >> (16 * sub);
    const float d = fp16_bits_to_float(b.head[0] & 0xFFFFu);
    s.a0 = d * float(int8_t(scales & 0xFFu));
    s.a1 = d * float(int8_t((scales >> 8) & 0xFFu));
  }
  return s;
}

// Group `sub` of a loaded part: q[32] and its scales.
template <int T>
FS_QUANT_HD GroupScales decode_part(const PartBytes& b, int part, int sub, float (&q)[kGroup]) {
FS_QUANT_UNROLL
  for (int quad = 0; quad < 8; ++quad) {
    const uint32_t codes = quad_codes<T>(b, part, sub, quad);
FS_QUANT_UNROLL
    for (int i = 0; i < 4; ++i) q[4 * quad + i] = quad_q<T>(codes, i);
  }
  return part_scales<T>(b, part, sub);
}

// Group g of a row of type T starting at `row`: q[32] and its scales (the
// part that holds it, loaded and decoded).
template <int T>
FS_QUANT_HD GroupScales decode_group(const uint8_t* row, int g, float (&q)[kGroup]) {
  const PartOfGroup at = part_of_group(T, g);
  PartBytes b{};
  load_part<T>(row, at.step, at.part, b);
  return decode_part<T>(b, at.part, at.sub, q);
}

}  // namespace flashscope::kernels::quant

namespace flashscope::kernels::quant {

// decode_group for a type known only at run time (host tests, launchers'
// checks); the kernels instantiate decode_group<T> directly. A type that is
// not a block type decodes to zeros with zero scales.
inline GroupScales decode_group_any(int type, const uint8_t* row, int g, float (&q)[kGroup]) {
  switch (type) {
    case kQ4_0: return decode_group<kQ4_0>(row, g, q);
    case kQ4_1: return decode_group<kQ4_1>(row, g, q);
    case kQ5_0: return decode_group<kQ5_0>(row, g, q);
    case kQ5_1: return decode_group<kQ5_1>(row, g, q);
    case kQ8_0: return decode_group<kQ8_0>(row, g, q);
    case kQ4_K: return decode_group<kQ4_K>(row, g, q);
    case kQ5_K: return decode_group<kQ5_K>(row, g, q);
    case kQ6_K: return decode_group<kQ6_K>(row, g, q);
    default:
      for (float& v : q) v = 0.0f;
      return {};
  }
}

}  // namespace flashscope::kernels::quant
