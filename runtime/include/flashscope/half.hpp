// Host-side conversions between float and the 16-bit types the kernels use,
// stored as raw uint16_t so host code needs no CUDA headers. Round to nearest
// even, NaN preserved: the same results as __float2bfloat16_rn / __float2half_rn.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashscope {

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: renormalize
    exp = 113;
    while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;             // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;            // overflows to inf after rounding
  if (abs < 0x33000001u) return sign;                       // rounds to zero
  const int exp = static_cast<int>(abs >> 23) - 127;
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  if (exp < -14) {  // subnormal half: shift so the value is mant * 2^-24
    const int shift = -exp - 14 + 13;
    const uint32_t rounded = (mant >> shift) + (((mant >> (shift - 1)) & 1u) &
                              (((mant & ((1u << (shift - 1)) - 1u)) != 0) | ((mant >> shift) & 1u)));
    return sign | static_cast<uint16_t>(rounded);
  }
  uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | ((mant >> 13) & 0x3ffu);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into the exponent correctly
  return sign | static_cast<uint16_t>(h);
}

}  // namespace flashscope
