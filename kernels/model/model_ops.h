// Host entry to the element-wise kernels of a Llama forward pass and the
// token sampler: plain parameter structs and launchers that return the
// launch's cudaError_t. The runtime (runtime/src/backends/cuda/model_ops_cuda.cpp)
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
//
// sm_count (the skinny GEMM's params, the sampler's calls): the launchers
// that size their grid by the device take its SM count from the caller, who
// reads it once per device (the runtime: cuda::device_facts(); a tool
// without the runtime: the driver, as bench/hopper_variants.cu does), so a
// decode step's launches query no device attribute. 0 or less means
// unknown: the launch still runs, sized without it (the quantized GEMMs up
// to a fixed number of CTAs, the sampler one CTA a row).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashscope::kernels {

// x [n, hidden] fp32 = bf16 table [vocab, hidden] rows ids[0..n) · scale
// (Gemma scales its embeddings by √hidden; 1 elsewhere, which is exact).
// An id outside [0, vocab) writes a zero row (the runtime rejects them first).
struct EmbeddingKernelParams {
  const int32_t* ids;     // [n] device
  const uint16_t* table;  // [vocab, hidden] bf16
  float* x;               // [n, hidden]
  int n, hidden, vocab;
  float scale;
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
// programmatic (here and for add_rms_norm, rope_append, swiglu): launch with
// programmatic stream serialization (sm_90 PDL), as launch_skinny_gemm says;
// only where skinny_gemm_waits_on_producer() said yes (the same code targets).
cudaError_t launch_rms_norm(const RmsNormKernelParams& p, cudaStream_t stream, bool programmatic = false);

// Gemma's post-norm and residual add, with the next block's pre-norm fused
// behind it, one CTA per row:
//   x[r] += rms_norm(y[r]) · post_weight                 (fp32, in place)
//   xn[r] = bf16(rms_norm(x[r]) · next_weight)           when next_weight is set
//   y  [rows, dim] fp32 (y_stride): the attention or FFN block's output
//   x  [rows, dim] fp32 (x_stride): the residual stream
//   xn [rows, dim] bf16 (xn_stride)
// Each norm is rms_norm_kernel's formula (x · (1/sqrt(Σx²/dim + eps)) · w).
// x_in: the residual read (x_in_stride), or null: x itself (in place). A
// separate x_in must not alias x.
struct AddRmsNormKernelParams {
  const float* y;
  int64_t y_stride;
  const float* post_weight;  // [dim]
  float* x;
  int64_t x_stride;
  const float* x_in;
  int64_t x_in_stride;
  const float* next_weight;  // [dim] or null
  uint16_t* xn;
  int64_t xn_stride;
  int rows, dim;
  float eps;
};
cudaError_t launch_add_rms_norm(const AddRmsNormKernelParams& p, cudaStream_t stream, bool programmatic = false);

// One layer's RoPE fused with the K/V append into the paged cache:
//   qkv [n, qkv_stride] fp32: q heads [H, D] at 0, k heads [KV, D] at H·D,
//       v heads [KV, D] at (H + KV)·D (the fused QKV GEMM's output)
//   q_out [n, H, D] bf16 (row stride q_stride) = rope(q)
//   K pages [slot] = bf16(rope(k)), V pages [slot] = bf16(v), pages
//       [num_pages, KV, page_size, D]
// Before the rotation, in this order (each off when its pointer is null):
//   bias   [(H + 2·KV)·D] added to the row (Qwen2's Q/K/V biases; v too)
//   q_norm [D], k_norm [D]: every q (k) head RMS-normalized over its D
//       elements, x · (1/sqrt(Σx²/D + norm_eps)) · w (Qwen3, Gemma 3)
// The rotation, by the angle whose cos/sin are cos/sin[t][i] for pair i <
// rope_dim / 2 (the tables carry the base, per-layer or not, and any
// per-frequency factors: computed on the host):
//   neox 0: pair i is elements (2i, 2i+1) (llama GGUFs: the converter
//           permuted Q/K rows so that HF's halves became adjacent pairs)
//   neox 1: pair i is elements (i, i + rope_dim/2) (rotate halves: qwen2,
//           qwen3, gemma3 GGUFs keep HF's order)
// Elements past rope_dim are copied (partial rotary).
// A slot < 0, or >= num_slots when num_slots > 0, skips that token's K/V.
inline constexpr int kRopeAppendMaxHeadDim = 256;
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
  const float* bias;    // [(H + 2·KV)·D] or null
  const float* q_norm;  // [D] or null
  const float* k_norm;  // [D] or null
  float norm_eps;
  int neox;
};
cudaError_t launch_rope_append(const RopeAppendKernelParams& p, cudaStream_t stream, bool programmatic = false);

// act [rows, ffn] bf16 = f(gate) · up, with gate and up side by side in
// one row of the fused gate/up GEMM's output: gu [rows, 2·ffn] fp32.
// f: silu (SwiGLU, llama/qwen) or GELU with the tanh approximation (GeGLU,
// Gemma: 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))).
enum class GateActivation : int { kSilu = 0, kGeluTanh = 1 };
struct SwigluKernelParams {
  const float* gu;
  int64_t gu_stride;
  uint16_t* out;
  int64_t out_stride;
  int rows, ffn;
  GateActivation activation;
};
cudaError_t launch_swiglu(const SwigluKernelParams& p, cudaStream_t stream, bool programmatic = false);

// Few-token GEMM with its neighbouring element-wise op fused in front or
// behind (kernels/model/skinny_gemm.cu): the decode step's matrix products.
//   w [n_w, k] bf16 row-major; rows <= kSkinnyMaxRows; k a multiple of 8.
//   input  kBf16: x [rows, k] bf16 (ldx) | kRmsNorm: rms_norm(xf [rows, k] fp32 (ldxf)) · norm_weight
//          kAddRmsNorm: kRmsNorm of xf plus a pending post-normed block output (below)
//   output kStore: y [rows, n_out] fp32 (ldy) = in · wᵀ | kAccumulate: y += in · wᵀ
//          kRopeAppend: rope_append of in · wᵀ through `rope` (its qkv, qkv_stride, n unused; n_out
//                       = (H + 2·KV)·D, even)
//          kSwiglu: act [rows, n_out] bf16 (ld_act) = silu(in · w[0, n_out)ᵀ) · (in · w[n_out, 2·n_out)ᵀ)
//          kGegluTanh: the same with gelu_tanh in place of silu (see GateActivation)
//   kRopeAppend takes adjacent pairs only, without bias or norms (neox 0,
//   bias, q_norm and k_norm null): the runtime stores the QKV product and
//   runs rope_append for the other families.
// Dynamic shared memory skinny_gemm_smem_bytes(rows, k) (the runtime keeps it <= 48 KiB).
inline constexpr int kSkinnyMaxRows = 8;
enum class SkinnyInput : int { kBf16 = 0, kRmsNorm = 1, kSplitKv = 2, kAddRmsNorm = 3 };
// kAddRmsNorm: Gemma's post-norm and residual add (add_rms_norm) in front of
// kRmsNorm's pre-norm, for a block output res_y still pending:
//   r [rows, k] fp32 = xf + rms_norm(res_y [rows, k] fp32 (ld_res_y)) · res_weight
//   input = rms_norm(r) · norm_weight
// and r is stored into res_out [rows, k] (ld_res_out) by CTA 0 when res_out is
// set: the residual stream's next buffer, which must not alias xf or res_y
// (every CTA reads those while CTA 0 writes).
struct SkinnyResidualInput {
  const float* res_y;
  int64_t ld_res_y;
  const float* res_weight;
  float* res_out;
  int64_t ld_res_out;
};
// kSplitKv: the input rows are paged attention's output still in split-KV
// partials (the combine kernel not run): row t, element h·D + d is
//   Σ_s exp(lse_s − M) · o_s[d] / Σ_s exp(lse_s − M)      (M = max_s lse_s)
// over o_partial [splits, partial_rows, D] and lse_partial [splits,
// partial_rows] at partial row ((t / q_len) · q_heads + h) · q_len + t % q_len,
// rounded to bf16 as the combine would store it; k = q_heads · D.
struct SkinnySplitKvInput {
  const float* o_partial;
  const float* lse_partial;
  int num_splits, q_heads, head_dim, q_len;
  int64_t partial_rows;
};
enum class SkinnyOutput : int {
  kStore = 0,
  kAccumulate = 1,
  kRopeAppend = 2,
  kSwiglu = 3,
  kGegluTanh = 4,
  kRopeHeads = 5
};
// kRopeHeads: kStore of the QKV product into y = rope.qkv (ldy = rope.qkv_stride),
// then rope_append(rope) on it inside the same grid, every rope_append option
// (bias, q/k norms, NeoX pairs) included: once all CTAs of a head have stored
// its rows, the last of them (an atomic count in rope_counters [H + 2·KV],
// zero before the launch and left zero) runs the head for every token. bf16
// weights only, and skinny_gemm_rope_heads_supported(n_out, head_dim).
// Weights kept in their GGUF blocks (kernels/quant/quant_blocks.h) instead
// of the bf16 `w`: type 0 means bf16 (w is read, the rest unused).
//   data     rows [row_begin, row_end) of the output space, row_bytes each (kSwiglu, kGegluTanh: the gate
//            rows [0, n_out))
//   up_data  kSwiglu, kGegluTanh: the up rows [0, n_out), same type and row_bytes
//   row_begin, row_end: kStore / kAccumulate / kRopeAppend compute outputs [row_begin, row_end)
//            of the n_out (y's columns, RoPE's rows), so Q, K and V of different types are three
//            launches into one output; row_begin even. kSwiglu, kGegluTanh: 0 and n_out.
// k is a multiple of the type's block (32 or 256 elements).
struct SkinnyQuantWeights {
  int type;
  const uint8_t* data;
  const uint8_t* up_data;
  int64_t row_bytes;
  int row_begin, row_end;
};
struct SkinnyGemmKernelParams {
  SkinnyInput input;
  SkinnyOutput output;
  int rows, n_out, k;
  const uint16_t* w;
  const uint16_t* x;
  int64_t ldx;
  const float* xf;
  int64_t ldxf;
  const float* norm_weight;
  float eps;
  float* y;
  int64_t ldy;
  uint16_t* act;
  int64_t ld_act;
  RopeAppendKernelParams rope;
  SkinnySplitKvInput split_kv;
  SkinnyResidualInput residual;  // kAddRmsNorm
  int* rope_counters;             // kRopeHeads
  int units_per_warp;  // set by the launcher
  int sm_count;        // the device's (see the top of this file); read by the quantized kernels' launches
  SkinnyQuantWeights wq;
};
// Whether kRopeHeads runs a QKV product of n_out rows of heads of head_dim:
// each CTA's rows lie in one head (head_dim a multiple of 8) and each warp
// has one unit (n_out up to 8184).
bool skinny_gemm_rope_heads_supported(int n_out, int head_dim);
// Tokens the kernel is instantiated for at `rows` (1, 2, 4 or 8): the shared
// memory holds that many input rows.
int skinny_gemm_tokens(int rows);
size_t skinny_gemm_smem_bytes(int rows, int k);
// programmatic: launch with programmatic stream serialization (sm_90 PDL):
// the kernel requests its weights while the kernel before it on the stream
// finishes, and waits for that kernel on the GPU before reading its input.
// Only where skinny_gemm_waits_on_producer() said yes.
// Quantized weights (p.wq.type != 0) take the same path with the rows
// decoded in registers (skinny_gemm_quant_kernel); their input rows may use
// up to skinny_gemm_quant_smem_limit() bytes of shared memory (the launcher
// opts in beyond 48 KiB).
cudaError_t launch_skinny_gemm(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic);
// Steps of up to quant_gemv_max_rows() rows over quantized weights take the
// GEMV (kernels/model/quant_gemv.cuh) instead of the tensor-core tiles: the
// environment's FLASHSCOPE_QUANT_GEMV=N (rows: 0 never, the default; 1 or
// 2), read once, or the last set_quant_gemv_max_rows (clamped to 0..2;
// tests and benchmarks run both kernels in one process).
int quant_gemv_max_rows();
void set_quant_gemv_max_rows(int rows);
// Steps of up to quant_gemv_q8_max_rows() rows over quantized weights take
// the int8 GEMV (kernels/model/quant_gemv_q8.cuh: inputs quantized to int8
// blocks of 32, dp4a) before either kernel above: FLASHSCOPE_QUANT_GEMV=q8
// (rows 1..8) or q8:N (rows up to N), read once; a number there (the GEMV
// above): 0; unset: the default (1, one-row steps). set_quant_gemv_q8_max_rows clamps
// to 0..kSkinnyMaxRows. Where its shared memory does not fit (2.25·k bytes
// a row) the step takes the others.
int quant_gemv_q8_max_rows();
void set_quant_gemv_q8_max_rows(int rows);
// Warps a CTA of the int8 GEMV: 16 (one CTA an SM: each CTA stages and
// quantizes the whole input, so wider CTAs give each thread less of it) or
// 4: FLASHSCOPE_QUANT_GEMV_Q8_WARPS=4|16 read once, or the last
// set_quant_gemv_q8_warps (anything but 4 is 16).
int quant_gemv_q8_warps();
void set_quant_gemv_q8_warps(int warps);
// The most the quantized kernel's input rows take: 8 rows of k = 10240
// (Llama-3.2-1B's ffn_down, k = 8192, at 8 rows: 128 KiB), where the device
// allows it.
inline constexpr size_t kSkinnyQuantSmemLimit = 160 * 1024;
// kSkinnyQuantSmemLimit, or less on the current device: what it lets a CTA
// opt into less the kernel's static shared memory (0 without a device).
size_t skinny_gemm_quant_smem_limit();
// Whether the kernel's code on the current device waits for its producer
// (compiled for sm_90 or later; code JIT-compiled from sm_80 PTX does not).
cudaError_t skinny_gemm_waits_on_producer(bool* waits);

// Matrices kept in their GGUF blocks (kernels/quant/quant_ops.cu):
//   w      rows × k of ggml block type `type` (quant_blocks.h), row_bytes per row, starting at data
// dequantize_bf16: out [rows, k] bf16 (row stride ld_out) = w, each value as the CPU
//   dequantizer computes it, rounded to nearest (the prompt path's scratch for cuBLAS)
// embedding_quant: x [n, k] fp32 = w rows ids[0..n) · scale (a row id outside [0, rows): zeros)
struct QuantMatrixParams {
  int type;
  const uint8_t* data;
  int64_t row_bytes;
  int rows, k;
};
cudaError_t launch_dequantize_bf16(const QuantMatrixParams& w, uint16_t* out, int64_t ld_out, cudaStream_t stream);
cudaError_t launch_embedding_quant(const QuantMatrixParams& w, const int32_t* ids, int n, float* x, float scale,
                                   cudaStream_t stream);

// The most candidates the sampler keeps after top-k: they are sorted in
// shared memory by one CTA.
inline constexpr int kMaxSampleCandidates = 1024;

// Picks a token from one logits row with the rules of flashscope::sample()
// (engine.hpp): non-finite logits → -inf; repetition penalty on the
// first num_repeat penalty_ids, then penalty_sub off each; temperature <= 0 → argmax (lowest id on ties); else logits /
// temperature, the `keep` best (by logit, then lowest id), softmax in
// double, top_p, min_p, and an inverse-CDF draw at `uniform`. A row is
// split over CTAs (about one per SM) when a workspace is given; the last
// to finish merges (sampling.cu). logits is scratch: it is overwritten
// with the penalized, scaled values.
struct SampleKernelParams {
  float* logits;  // [vocab]
  int vocab;
  const int32_t* penalty_ids;  // [num_penalty] distinct ids in [0, vocab); may be null when num_penalty == 0
  const float* penalty_sub;    // [num_penalty] subtracted after the repetition penalty; null: nothing
  int num_penalty;
  int num_repeat;              // the first num_repeat ids get the repetition penalty
  float repetition_penalty;
  float temperature;
  int keep;  // candidates after top-k: 1..kMaxSampleCandidates (ignored when greedy)
  float top_p, min_p;
  double uniform;      // [0, 1)
  int32_t* token_out;  // [1] device
};
// The workspace a launch over `rows` rows of `vocab` entries uses to split
// each row over several CTAs (0: it runs one CTA a row and needs none).
// max_keep: the largest `keep` of the rows that are not greedy (0: all
// greedy). It must be zeroed once when allocated: every launch leaves it
// zeroed (its counters), so launches on it may be captured in a CUDA graph.
// One launch at a time on a workspace (stream order).
// sm_count: the device's (see the top of this file); the launches on the
// workspace must be given the same.
size_t sample_workspace_bytes(int vocab, int rows, int max_keep, int sm_count);
// workspace: sample_workspace_bytes(p.vocab, 1, keep or 0, sm_count) bytes,
// or fewer (null): one CTA.
cudaError_t launch_sample(const SampleKernelParams& p, int sm_count, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);
// Many rows in one launch: rows [n] in device memory, each with its own
// logits row of `vocab` entries, parameters, draw and token_out
// (n <= 2^31 - 1); workspace as above for (vocab, n, max_keep, sm_count).
cudaError_t launch_sample_rows(const SampleKernelParams* rows, int n, int vocab, int max_keep, int sm_count,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace flashscope::kernels
