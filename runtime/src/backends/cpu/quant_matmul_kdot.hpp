// The one-token product against K-quant weights (Q4_K, Q5_K, Q6_K) with
// activations quantized per 256-element super-block: the decode step's
// GEMV, and every row of a batched step, with the prefill GEMM's
// arithmetic (quant_matmul_kquant.hpp) for one token at a time:
//
//   y [n, rows] = x [n, cols] · Wᵀ,  W in 256-element super-blocks, each token on its own
//
// matmul() (quant_matmul.hpp) gives each 32 activations their own scale,
// which costs every 32-weight sub-block an int→float conversion and a float
// multiply-add (and a Q4_K super-block eight scale/min factors gathered from
// eight blocks). One scale d_x per super-block matches the weights' d (and
// dmin), so the sub-block scales apply in integers and a super-block costs
// one float multiply-add:
//
//   Q4_K / Q5_K:  (Σ_s sc_s·Σ(q·x_q))·d·d_x  −  (Σ_s m_s·Σx_q)·dmin·d_x
//   Q6_K:         (Σ_g sc_g·Σ(q·x_q) − 32·Σ_g sc_g·Σx_q)·d·d_x   (q = the unsigned 6 bits)
//
// AVX2 multiplies 32 weights by maddubs (u8 weights · s8 activations, pairs
// to int16) and weights the pairs by their sub-block scale in the madd that
// widens them; AVX-512 VNNI fuses that madd and the add into vpdpwssd. The
// Σx_q per 16 activations (bsums) give the min and offset terms.
//
// The activations are rounded as pack_q8k_tiles rounds them (the same d and
// the same int8 values for the same token), to 1/254 of their super-block's
// max magnitude: llama.cpp's q8_K trade for these types; the model tests
// measure what it does to logits.
#pragma once

#include <cstdint>

#include "backends/cpu/quant_matmul.hpp"

namespace flashscope::cpu {

// One token's 256 activations of a super-block: x ≈ d · qs[i].
struct alignas(32) BlockQ8K {
  int8_t qs[256];
  int16_t bsums[16];  // bsums[g] = Σ qs[16g .. 16g + 16)
  float d;
};


// x [cols] floats → y [cols / 256] super-blocks (cols a multiple of 256).
// Round to nearest (half to even); every build gives the same bits, and the
// values pack_q8k_tiles gives the same token (a super-block holding a NaN
// aside: the portable build writes zeros under a NaN scale).
void quantize_row_q8k(const float* x, BlockQ8K* y, int64_t cols);

// y [n, w.rows] (row stride ldy) = x · Wᵀ, x [n, w.cols / 256] super-blocks
// (token t's at x + t · w.cols/256, from quantize_row_q8k). Each token's row
// is the one-token product whatever n is, so a batched row equals a solo
// step's bit for bit. Rows run over the OpenMP team when large.
// kUnsupported for a type that is not is_k_quant, kInvalidArgument for null
// pointers or cols not a multiple of 256 (nothing written then).
Status matmul_q8k_rows(const QuantMatrix& w, const BlockQ8K* x, int64_t n, float* y, int64_t ldy);

}  // namespace flashscope::cpu
