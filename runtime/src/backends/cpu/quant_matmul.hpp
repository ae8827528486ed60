// Matrix products against weights kept in their GGUF blocks: the CPU
// engine's GEMV (decode, one token) and GEMM (prefill, many tokens).
//
//   y [n, rows] (row stride ldy) = x [n, cols] · Wᵀ,  W [rows, cols] in ggml blocks
//
// How, by weight type (the scheme of llama.cpp's ggml_vec_dot_*_q8_*):
//   Q4_0 Q4_1 Q5_0 Q5_1 Q8_0  the activations are quantized per 32-element
//       block to BlockQ8 (float scale d, int8 q, and Σq), and each block's dot
//       product is an integer sum, scaled once:
//         Q8_0: d_w·d_x·Σ w_q·x_q                  Q4_0: d_w·d_x·(Σ nib·x_q − 8·Σx_q)
//         Q4_1: d_w·d_x·Σ nib·x_q + m_w·d_x·Σx_q   Q5_*: the same with 5-bit values (−16)
//   Q4_K Q5_K Q6_K  the same 32-element activation blocks: sub-block s of a
//       256-element super-block meets activation block 8·sb + s, its integer
//       sum scaled by d·sc_s·d_x (Q6_K: two 16-groups weighted by their int8
//       scales in integers first), minus dmin·m_s·d_x·Σx_q for Q4_K / Q5_K.
//       Per-32 activation scales are finer than llama.cpp's per-256 q8_K,
//       at one float FMA per 32 weights. The engine sends whole 16-token
//       tiles (quant_matmul_kquant.hpp) and untiled tokens, decode steps
//       (quant_matmul_kdot.hpp), to per-256 kernels instead; these run the
//       rest of a prompt.
//       AVX2 kernels (chosen at run time; the build stays generic x86-64)
//       for all of these; portable integer loops as the reference.
//   F32 F16 BF16 Q2_K Q3_K  fallback: each weight row is dequantized to float
//       (per thread scratch) and dotted with the float activations.
// Rows are split over OpenMP threads. In prefill, tokens are grouped by four
// (TileQ8) so that each weight block is unpacked once per four tokens.
//
// Quantizing activations costs accuracy: each x is rounded to 1/254 of its
// block's max magnitude. That is llama.cpp's trade as well; the model tests
// measure what it does to logits against a float reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashscope/gguf.hpp"
#include "flashscope/status.hpp"

namespace flashscope::cpu {

constexpr int kQ8Block = 32;

// One quantized block of 32 activations: x ≈ d · qs[i]; sum = Σ qs[i].
struct BlockQ8 {
  float d;
  int32_t sum;
  int8_t qs[kQ8Block];
};
static_assert(sizeof(BlockQ8) == 40, "BlockQ8 is packed as 4 + 4 + 32 bytes");

// x [n] floats → y [n / 32] blocks (n a multiple of 32). Round to nearest
// (half to even). The AVX2 build (active_cpu_isa) gives the same bits.
void quantize_row_q8(const float* x, BlockQ8* y, int64_t n);

// The blocks of kTileTokens consecutive tokens at one block index, side by
// side, for the prefill kernels: one weight block is unpacked once and dotted
// with four tokens, whose scales then load as one vector.
constexpr int kTileTokens = 4;
struct TileQ8 {
  float d[kTileTokens];  // each token's scale
  float s[kTileTokens];  // d · Σq, for the Q4_1 min and Q4_0 offset terms
  int8_t qs[kTileTokens][kQ8Block];
};

// x [n, nb] blocks (token-major) → tiles [n / 4, nb]: full tiles only, the
// n % 4 tokens left over run from x.
void pack_q8_tiles(const BlockQ8* x, int64_t n, int64_t nb, TileQ8* tiles);

// A weight matrix as the file stores it: `rows` rows of `cols` elements,
// each row `row_bytes` long. data stays owned by the GgufFile.
struct QuantMatrix {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;
  const uint8_t* data = nullptr;
};

// True for the types multiplied with quantized activations (x_q must be
// passed); false for the float fallback (x must be passed).
bool matmul_uses_q8(GgmlType type);
// True for every type matmul accepts.
bool matmul_supports(GgmlType type);
// The K-quants (super-blocks of 256): what the kernels over per-256
// activations multiply (quant_matmul_kdot.hpp one token at a time,
// quant_matmul_kquant.hpp in 16-token tiles).
inline bool is_k_quant(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

// y [n, w.rows] (row stride ldy) = x · Wᵀ.
//   x     [n, w.cols] float, row stride ldx; read for the float fallback only
//   xq    [n, w.cols / 32] blocks, rows contiguous; read for the Q8 types only
//   tiles pack_q8_tiles(xq) or null; where given, full 4-token tiles run the
//         tile kernels (AVX2: every Q8 type), the same sums regrouped; with
//         AVX-512 VNNI, whole 16-token runs of the 32-element block types go
//         to matmul_t16 first (quant_matmul_t16.hpp), the same sums again
// kUnsupported for a type matmul_supports rejects, kInvalidArgument for a
// null pointer (nothing is written then); kOutOfMemory when the fallback's
// scratch cannot be had. Products under ~256K multiply-adds run on the
// calling thread, larger ones over the OpenMP team.
Status matmul(const QuantMatrix& w, const float* x, int64_t ldx, const BlockQ8* xq, const TileQ8* tiles, int64_t n,
              float* y, int64_t ldy);

// Which instruction set the integer kernels use; on x86 each a superset of
// the one before. Detected once; tests force the lower ones to check each build
// against the portable one.
//   kAvx2        AVX2 + FMA + F16C
//   kAvx512Vnni  also AVX-512 F/VL/BW + VNNI: the Q4_0/Q4_1/Q5_0/Q5_1/
//                Q4_K/Q5_K kernels take the u8·s8 sums with one vpdpbusd (the same
//                int32 sums as AVX2's maddubs + madd pair, so the same bits,
//                except the one-token Q4_K/Q5_K kernel, which adds its min
//                terms in another order); Q5's fifth bits go in through a byte
//                mask
//   kNeonDot     arm64 with SDOT: the Q8_0, Q4_0 and Q4_1 products per token (the
//                portable kernels' bits); not ordered against the x86 ones
enum class CpuIsa { kPortable, kAvx2, kAvx512Vnni, kNeonDot };
CpuIsa detected_cpu_isa();
CpuIsa active_cpu_isa();
// Uses `isa` from now on (clamped to what the CPU supports). Not thread-safe
// against concurrent matmuls: tests only.
void set_cpu_isa(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);

}  // namespace flashscope::cpu
