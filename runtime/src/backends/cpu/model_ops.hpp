// The element-wise pieces of a forward pass on the CPU, each a plain
// loop over token-major rows. These are the reference the CUDA model ops are
// checked against, so they favour the obvious formula over speed (they are a
// few percent of a token's time; the matrix products are the rest). SwiGLU
// and GeGLU are the exception: a serial scalar exp or tanh was a visible
// share of a prompt's time (bench/TUNING.md#figures-moved-out-of-product-comments).
#pragma once

#include <cstdint>
#include <vector>

namespace flashscope::cpu {

// y[t][i] = x[t][i] / sqrt(mean_i(x[t]²) + eps) · weight[i]
//   x, y [n, dim] (may alias), weight [dim]. Sum of squares in double.
void rms_norm(const float* x, const float* weight, float* y, int64_t n, int64_t dim, float eps);

// cos/sin of every (token, pair) angle pos · base^(−2i/rope_dim), computed
// in double: table [n, rope_dim / 2] each.
void rope_table(const int32_t* positions, int64_t n, int rope_dim, float base, float* cos_out, float* sin_out);

// The same with rope scaling: angle = pos · scale · base^(−2i/rope_dim) /
// factors[i] (factors: [rope_dim / 2] or null for none; Llama 3's
// rope_freqs), as llama.cpp's rope with freq_scale and freq_factors.
void rope_table(const int32_t* positions, int64_t n, int rope_dim, float base, float scale, const float* factors,
                float* cos_out, float* sin_out);

// rope_table's two halves: inv_freq [rope_dim / 2] = scale · base^(−2i/rope_dim)
// / factors[i], and one position's row cos/sin [half] of position · inv_freq[i].
std::vector<double> rope_inv_freq(int rope_dim, float base, float scale, const float* factors);
void rope_row(int32_t position, const double* inv_freq, int half, float* cos_out, float* sin_out);

// Rotates consecutive pairs (x[2i], x[2i+1]) of the first rope_dim elements
// of every head ("normal" RoPE, the layout of llama GGUFs, whose converter
// permutes Q and K rows so that HF's half-split pairs become adjacent).
//   x [n, heads, head_dim] in place; cos/sin [n, rope_dim / 2]
void rope_pairs(float* x, int64_t n, int heads, int head_dim, int rope_dim, const float* cos_t,
                const float* sin_t);

// Rotates the halves (x[i], x[i + rope_dim/2]) of the first rope_dim
// elements of every head (NeoX RoPE: qwen2, qwen3, gemma3, whose Q and K are
// stored unpermuted). Same shapes as rope_pairs.
void rope_halves(float* x, int64_t n, int heads, int head_dim, int rope_dim, const float* cos_t,
                 const float* sin_t);

// gate[i] = gelu_tanh(gate[i]) · up[i], with gelu_tanh(x) =
// x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))) (Gemma's GeGLU), computed as
// x / (1 + e^(−2u)), u the tanh's argument (no cancellation for negative x).
// AVX2 and the team as swiglu.
void geglu_tanh(float* gate, const float* up, int64_t n);

// gate[i] = silu(gate[i]) · up[i] = gate / (1 + exp(−gate)) · up, n elements.
// AVX2 where active_cpu_isa() says so (its exp within 2 ulp of std::exp),
// over the OpenMP team from 64K elements (a prefill chunk).
void swiglu(float* gate, const float* up, int64_t n);

}  // namespace flashscope::cpu
