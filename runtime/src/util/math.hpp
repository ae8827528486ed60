// Small arithmetic the runtime's host code shares: tile counts and the
// constants of the exp2 form of softmax. Private to the runtime; kernels/
// keeps its own, since the kernels never include the runtime's headers and
// the CPU-only build has no kernels/ to include.
//
// The softmax runs in log2 units so every exponential is an exp2:
//   s₂ = s · scale · log2(e),  p = exp2(s₂ − m₂),  and back to natural units
//   lse = m₂ · ln(2) + ln(l).
#pragma once

namespace flashscope {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): scale · kLog2e folds exp into exp2
constexpr float kLn2 = 0.6931471805599453f;    // ln(2): a log2-unit maximum back to natural log

// Tiles of `block` that cover `n` (the last one partial); 0 for an empty or
// invalid block, so a bad shape gives no tiles rather than a division fault.
template <typename T>
constexpr T ceil_div(T n, T block) {
  return block > 0 ? (n + block - 1) / block : T{0};
}

}  // namespace flashscope
