// The prefill GEMM against K-quant weights (Q4_K, Q5_K, Q6_K) with
// activations quantized per 256-element super-block, the scheme of
// llama.cpp's q8_K:
//
//   y [n, rows] = x [n, cols] · Wᵀ,  W in 256-element super-blocks, n a multiple of 16
//
// matmul() (quant_matmul.hpp) gives each 32 activations their own scale, so
// every 32-weight sub-block's integer sum needs its own float conversion and
// scale: that float work is most of a K-quant tile. Here a token carries one
// scale d_x per super-block, which matches the weights' own d (and dmin), so
// the sub-block scales can be applied in integers:
//
//   Q4_K / Q5_K:  Σ_s sc_s·Σ(q·x_q)  ·d·d_x  −  Σ_s m_s·Σx_q  ·dmin·d_x
//   Q6_K:         Σ_g sc_g·Σ(q·x_q) − 32·Σ_g sc_g·Σx_q        ·d·d_x   (q = the unsigned 6 bits)
//
// Tokens run sixteen at a time (TileQ8K), one int32 lane per token: 4
// weights of a sub-block, broadcast to every lane, meet the same 4 columns
// of the tokens (the tile interleaves them so), and the sub-block's sum
// needs no horizontal reduction. AVX-512 VNNI unpacks a row block's weights
// to bytes once, takes the 4 products of all sixteen lanes in one 512-bit
// vpdpbusd, and scales each sub-block's int32 sums once (vpmulld); AVX2
// pairs the products by maddubs (eight tokens a register) and weights the
// pairs by the sub-block scale in the madd that widens them. A super-block
// then costs one float multiply-add per row and register of tokens. The
// Σx_q per 16 activations (bsums) give the min and offset terms. Rows run in
// blocks that stay in L1 while the tiles stream past.
//
// The per-256 scale rounds each activation to 1/254 of its super-block's
// max magnitude, coarser than matmul's per-32 blocks; that is the trade
// llama.cpp makes for these types, and the model tests measure its effect.
#pragma once

#include <cstdint>

#include "backends/cpu/quant_matmul.hpp"

namespace flashscope::cpu {

constexpr int kQ8KBlock = 256;     // activations per scale
constexpr int kKTileTokens = 16;   // tokens per TileQ8K

// One 256-column super-block of kKTileTokens consecutive tokens.
struct TileQ8K {
  float d[kKTileTokens];                    // token t's scale: x ≈ d[t] · qs[t][i]
  int16_t bsums[8][kKTileTokens][2];        // [p][t][j] = Σ qs[t][32p + 16j .. +16)
  // Token-interleaved by 4 columns: qs[i / 4][t][i % 4] is token t's
  // column i, so 32 bytes hold the same 4 columns of eight tokens and a
  // weight's 4 bytes, broadcast, meet them in one u8·s8 dot (lanes = tokens).
  int8_t qs[kQ8KBlock / 4][kKTileTokens][4];
};

// Token t's quantized value at column i (< 256) of the super-block.
inline int8_t q8k_value(const TileQ8K& tile, int t, int i) { return tile.qs[i / 4][t][i % 4]; }


// x [n, cols] floats (row stride ldx) → tiles [n / 16, cols / 256] (tile i's
// super-block b at tiles[i · cols/256 + b]); full tiles only, cols a multiple
// of 256. Round to nearest (half to even); every build gives the same bits.
// Runs over the OpenMP team when large.
void pack_q8k_tiles(const float* x, int64_t ldx, int64_t n, int64_t cols, TileQ8K* tiles);

// y [16 · n_tiles, w.rows] (row stride ldy) = the tiles' activations · Wᵀ.
// kUnsupported for a type that is not is_k_quant, kInvalidArgument for
// null pointers or cols not a multiple of 256 (nothing written then).
Status matmul_q8k_tiles(const QuantMatrix& w, const TileQ8K* tiles, int64_t n_tiles, float* y, int64_t ldy);

}  // namespace flashscope::cpu
