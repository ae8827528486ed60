// Small arithmetic the kernels and their launchers need, host and device
// alike: one home for the tile-count division, rounding up to an alignment,
// and the log-base constants
// that turn exp/log into the hardware's exp2/lg2. Plain C++ outside nvcc, so
// the runtime and the CPU references can include it instead of spelling
// their own.
#pragma once

#if defined(__CUDACC__)
#define FLASHSCOPE_MATH_HD __host__ __device__ __forceinline__
#else
#define FLASHSCOPE_MATH_HD inline
#endif

namespace flashscope::kernels {

// ln 2: a log2-domain value (a running max plus lg2 of a sum) back to natural log.
constexpr float kLn2 = 0.69314718055994530942f;
// log2 e: a natural-log scale into the exp2 domain (scale_log2 = scale · log2 e).
constexpr float kLog2e = 1.44269504088896340736f;

// ceil(a / b) for a >= 0, b > 0: tiles of b that cover a.
template <typename I>
constexpr FLASHSCOPE_MATH_HD I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}

// a rounded up to a multiple of b, for a >= 0, b > 0: an aligned offset or size.
template <typename I>
constexpr FLASHSCOPE_MATH_HD I align_up(I a, I b) {
  return ceil_div(a, b) * b;
}

}  // namespace flashscope::kernels

#undef FLASHSCOPE_MATH_HD
