// Host entry to the element-wise kernels of a Llama forward pass and the
// token sampler: plain parameter structs and launchers that return the
// launch's cudaError_t. The runtime (runtime/src/cuda/model_ops_cuda.cpp)
// validates shapes, pointers and alignment before calling these; the kernels
// assume what it checks.
//
// Element types: activations that feed cuBLAS or attention are bf16, stored
// as uint16_t so this header needs no cuda_bf16.h; the residual stream, GEMM
// outputs, norm weights and logits are fp32. Layouts are token-major, row
// strides in elements.
//
// The residual adds of the layer (x += o·Woᵀ, x += act·Wdownᵀ) have no kernel
// of their own: the O and down GEMMs accumulate into the fp32 residual
// stream with beta = 1, which is the residual add for free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashscope::kernels {

// x [n, hidden] fp32 = bf16 table [vocab, hidden] rows ids[0..n).
// An id outside [0, vocab) writes a zero row (the runtime rejects them first).
struct EmbeddingKernelParams {
  const int32_t* ids;     // [n] device
  const uint16_t* table;  // [vocab, hidden] bf16
  float* x;               // [n, hidden]
  int n, hidden, vocab;
};
cudaError_t launch_embedding(const EmbeddingKernelParams& p, cudaStream_t stream);

// y[r] = bf16(x[r] / sqrt(mean(x[r]²) + eps) · weight), one CTA per row.
struct RmsNormKernelParams {
  const float* x;  // [rows, dim] through x_stride
  int64_t x_stride;
  const float* weight;  // [dim]
  uint16_t* y;          // [rows, dim] bf16 through y_stride
  int64_t y_stride;
  int rows, dim;
  float eps;
};
cudaError_t launch_rms_norm(const RmsNormKernelParams& p, cudaStream_t stream);

// One layer's RoPE on consecutive pairs (llama GGUF layout) fused with the
// K/V append into the paged cache:
//   qkv [n, qkv_stride] fp32: q heads [H, D] at 0, k heads [KV, D] at H·D,
//       v heads [KV, D] at (H + KV)·D (the fused QKV GEMM's output)
//   q_out [n, H, D] bf16 (row stride q_stride) = rope(q)
//   K pages [slot] = bf16(rope(k)), V pages [slot] = bf16(v), pages
//       [num_pages, KV, page_size, D]
// Pair i of a head (elements 2i, 2i+1) is rotated by the angle whose cos/sin
// are cos/sin[t][i] when 2i < rope_dim, copied otherwise (partial rotary).
// A slot < 0, or >= num_slots when num_slots > 0, skips that token's K/V.
struct RopeAppendKernelParams {
  const float* qkv;
  int64_t qkv_stride;
  const float* rope_cos;  // [n, rope_dim / 2]
  const float* rope_sin;  // [n, rope_dim / 2]
  const int64_t* slots;   // [n] page * page_size + offset
  uint16_t* q_out;
  int64_t q_stride;
  uint16_t* k_pages;
  uint16_t* v_pages;
  int n, q_heads, kv_heads, head_dim, rope_dim, page_size;
  int64_t num_slots;
};
cudaError_t launch_rope_append(const RopeAppendKernelParams& p, cudaStream_t stream);

// act [rows, ffn] bf16 = silu(gate) · up, with gate and up side by side in
// one row of the fused gate/up GEMM's output: gu [rows, 2·ffn] fp32.
struct SwigluKernelParams {
  const float* gu;
  int64_t gu_stride;
  uint16_t* out;
  int64_t out_stride;
  int rows, ffn;
};
cudaError_t launch_swiglu(const SwigluKernelParams& p, cudaStream_t stream);

// The most candidates the sampler keeps after top-k: they are sorted in
// shared memory by one CTA.
inline constexpr int kMaxSampleCandidates = 1024;

// Picks a token from one logits row with the rules of flashscope::sample()
// (engine.hpp): non-finite logits → -inf; repetition penalty on
// penalty_ids; temperature <= 0 → argmax (lowest id on ties); else logits /
// temperature, the `keep` best (by logit, then lowest id), softmax in
// double, top_p, min_p, and an inverse-CDF draw at `uniform`. One CTA.
// logits is scratch: it is overwritten with the penalized, scaled values.
struct SampleKernelParams {
  float* logits;  // [vocab]
  int vocab;
  const int32_t* penalty_ids;  // [num_penalty] distinct ids in [0, vocab); may be null when num_penalty == 0
  int num_penalty;
  float repetition_penalty;
  float temperature;
  int keep;  // candidates after top-k: 1..kMaxSampleCandidates (ignored when greedy)
  float top_p, min_p;
  double uniform;      // [0, 1)
  int32_t* token_out;  // [1] device
};
cudaError_t launch_sample(const SampleKernelParams& p, cudaStream_t stream);
// Many rows in one launch, one CTA each: rows [n] in device memory, each
// with its own logits row, parameters, draw and token_out (n <= 2^31 - 1).
cudaError_t launch_sample_rows(const SampleKernelParams* rows, int n, cudaStream_t stream);

}  // namespace flashscope::kernels
