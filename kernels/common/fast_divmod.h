// Division by a divisor fixed for a whole launch, as a multiply-high, an add
// and a shift: a plain 32-bit division compiles to about twenty instructions
// (a float reciprocal on the special-function unit, corrections, sign
// fixes), and persistent attention CTAs divide a few times per work tile to
// find its q-tile, head and sequence. Built on the host (one 64-bit division
// each), used on either side.
//
// For a divisor d, s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1;
// then n / d = (umulhi(n, m) + n) >> s for every n < 2^31 (the sum stays
// within 32 bits there). d = 1 gives m = 1, s = 0.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FLASHSCOPE_FASTDIV_HD __host__ __device__
#else
#define FLASHSCOPE_FASTDIV_HD
#endif

namespace flashscope::kernels {

struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;

  FastDivmod() = default;
  // d >= 1.
  FLASHSCOPE_FASTDIV_HD explicit FastDivmod(uint32_t d) : divisor(d < 1 ? 1 : d) {
    while ((uint64_t(1) << shift) < divisor) ++shift;
    multiplier = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor)) / divisor + 1);
  }

  // n / divisor, for 0 <= n < 2^31.
  FLASHSCOPE_FASTDIV_HD uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const uint32_t high = uint32_t((uint64_t(n) * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
  // n / divisor into q and n % divisor into r, for 0 <= n < 2^31.
  FLASHSCOPE_FASTDIV_HD void divmod(int n, int& q, int& r) const {
    q = int(quotient(uint32_t(n)));
    r = n - q * int(divisor);
  }
};

// The same interface by plain division: where the divisor is known only on
// the device and a lookup happens once (a CTA finding its own tile), so
// FastDivmod's 64-bit division to set up would cost more than it saves.
struct PlainDivmod {
  int divisor = 1;

  PlainDivmod() = default;
  FLASHSCOPE_FASTDIV_HD explicit PlainDivmod(uint32_t d) : divisor(d < 1 ? 1 : int(d)) {}
  FLASHSCOPE_FASTDIV_HD uint32_t quotient(uint32_t n) const { return n / uint32_t(divisor); }
  FLASHSCOPE_FASTDIV_HD void divmod(int n, int& q, int& r) const {
    q = n / divisor;
    r = n - q * divisor;
  }
};

}  // namespace flashscope::kernels
