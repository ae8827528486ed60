// The prefill GEMM against 32-element weight blocks (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0) with AVX-512 VNNI, sixteen tokens at a time, one int32 lane
// per token:
//
//   y [n, rows] = x [n, cols] · Wᵀ,  x as matmul's BlockQ8 (per-32 scales), n ≥ 16
//
// matmul's 4-token tile kernels (quant_matmul.cpp) dot one weight block with
// each token in turn and fold the four int32 vectors into one by horizontal
// adds (several instructions per block and token). Here the tokens' blocks
// are interleaved by 4 columns (TileQ8T), so 4 weights, broadcast to every
// lane, meet the same 4 columns of eight tokens in one vpdpbusd; one
// broadcast serves both groups of eight. A block then costs 16 vpdpbusd, 8
// shuffles and one float multiply-add per eight tokens for 512 products.
// The activations are matmul's own blocks, regrouped: the integer sums are
// the ones matmul takes, only the float accumulation order differs.
//
// Offsets ride as in matmul: Q4_0 −8·d_w, Q5_0 −16·d_w, Q8_0 −128·d_w (its
// signed weights go in as w + 128, the unsigned operand), Q4_1 / Q5_1 +m_w,
// each times d_x·Σx_q of the token's block.
#pragma once

#include <cstdint>

#include "backends/cpu/quant_matmul.hpp"

namespace flashscope::cpu {

constexpr int kT16Tokens = 16;

// True where matmul_t16 has a kernel for `type` on the active instruction set.
bool matmul_t16_applies(GgmlType type);

// y [m, w.rows] (row stride ldy) for the first m = n − n % 16 tokens of
// xq [n, w.cols / 32] (rows contiguous). *done = m. kUnsupported where
// matmul_t16_applies is false, kInvalidArgument for null pointers,
// kOutOfMemory when the regrouped tiles cannot be had (nothing written then).
Status matmul_t16(const QuantMatrix& w, const BlockQ8* xq, int64_t n, float* y, int64_t ldy, int64_t* done);

}  // namespace flashscope::cpu
