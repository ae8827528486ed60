// Small arithmetic the runtime's host code shares: the checked tile count
// (flashscope/numeric.hpp, public so viz and the front-ends share it too) and
// the constants of the exp2 form of softmax, from the kernels' one home
// (kernels/common/math.h: plain C++, on the runtime's include path in every
// build, CUDA or not).
//
// The softmax runs in log2 units so every exponential is an exp2:
//   s₂ = s · scale · log2(e),  p = exp2(s₂ − m₂),  and back to natural units
//   lse = m₂ · ln(2) + ln(l).
#pragma once

#include "flashscope/numeric.hpp"
#include "kernels/common/math.h"

namespace flashscope {

using kernels::kLn2;    // ln(2): a log2-unit maximum back to natural log
using kernels::kLog2e;  // log2(e): scale · kLog2e folds exp into exp2

}  // namespace flashscope
