// The CUDA model ops the CUDA forward pass is built from: each checks its
// shapes, pointers and alignment (kInvalidArgument naming the op and the
// field), then launches on `stream` and reports the launch's error as
// kDeviceError naming the kernel. Nothing here synchronizes; asynchronous
// faults surface at the caller's next synchronization.
//
// All pointers are device pointers (bf16 as uint16_t). Shapes are those of
// kernels/model/model_ops.h; the GEMM is cuBLAS (cublasGemmEx, bf16 inputs,
// fp32 compute and output) on a handle whose stream and workspace the caller
// has set. In a build without CUDA every call returns kUnsupported.
//
// These are also what tests/test_model_cuda.cpp checks one by one against
// the CPU ops (backends/cpu/model_ops.hpp), so a failure of the whole forward pass can
// be traced to its op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "flashscope/device_buffer.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/sampling.hpp"
#include "flashscope/status.hpp"

namespace flashscope::cuda {

// A weight matrix on the device [rows, cols]: bf16 (type kBF16, row-major,
// row_bytes = 2·cols) or kept in its GGUF blocks, rows of row_bytes each:
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (quant_matrix_type_supported).
// What the engine's weights are (CudaModel) and what matmul() and the
// few-token GEMM read.
struct DeviceMatrix {
  GgmlType type = GgmlType::kBF16;
  const void* data = nullptr;
  int rows = 0, cols = 0;
  int64_t row_bytes = 0;

  bool quantized() const { return type != GgmlType::kBF16; }
  const uint16_t* bf16() const { return static_cast<const uint16_t*>(data); }
  uint64_t bytes() const { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(row_bytes); }
  // Rows [begin, begin + count) as a matrix of their own.
  DeviceMatrix rows_view(int begin, int count) const {
    DeviceMatrix m = *this;
    m.data = static_cast<const char*>(data) + static_cast<int64_t>(begin) * row_bytes;
    m.rows = count;
    return m;
  }
};
// The block types the GPU reads in place.
bool quant_matrix_type_supported(GgmlType type);
// Bytes an allocation keeps after the last row of a quantized matrix: the
// kernels' 32-bit loads of 2-byte-aligned blocks may reach 2 bytes past it.
size_t quant_matrix_tail_bytes();

// out [count, w.cols] bf16 (row stride ld_out) = rows [row_begin, row_begin + count)
// of a quantized w, each value the CPU dequantizer's (dequantize_row) rounded to bf16.
Status dequantize_bf16(const DeviceMatrix& w, int row_begin, int count, uint16_t* out, int64_t ld_out, void* stream);

// x [n, table.cols] fp32 = table rows ids[0..n) of any DeviceMatrix · scale
// (Gemma's √hidden; an id outside [0, rows) gives a zero row; the engine
// rejects them first).
Status embedding_rows(const DeviceMatrix& table, const int32_t* ids, int n, float* x, void* stream,
                      float scale = 1.0f);

struct EmbeddingOp {
  const int32_t* ids = nullptr;     // [n]
  const uint16_t* table = nullptr;  // [vocab, hidden] bf16
  float* x = nullptr;               // [n, hidden] = rows · scale
  int n = 0, hidden = 0, vocab = 0;
  float scale = 1.0f;  // Gemma: √hidden
};
Status embedding(const EmbeddingOp& op, void* stream);

struct RmsNormOp {
  const float* x = nullptr;  // [rows, dim], row stride x_stride
  int64_t x_stride = 0;
  const float* weight = nullptr;  // [dim]
  uint16_t* y = nullptr;          // [rows, dim] bf16, row stride y_stride
  int64_t y_stride = 0;
  int rows = 0, dim = 0;
  float eps = 1e-5f;
};
Status rms_norm(const RmsNormOp& op, void* stream);

// Gemma's post-norm + residual, and the next pre-norm behind it:
//   x += rms_norm(y) · post_weight;  xn = bf16(rms_norm(x) · next_weight) when next_weight is set
// With x_in: x = x_in + rms_norm(y) · post_weight (x_in another buffer).
struct AddRmsNormOp {
  const float* y = nullptr;  // [rows, dim] fp32, row stride y_stride
  int64_t y_stride = 0;
  const float* post_weight = nullptr;  // [dim]
  float* x = nullptr;                  // [rows, dim] fp32, row stride x_stride (in place)
  int64_t x_stride = 0;
  const float* x_in = nullptr;         // [rows, dim] fp32 (x_in_stride), or null: x
  int64_t x_in_stride = 0;
  const float* next_weight = nullptr;  // [dim] or null
  uint16_t* xn = nullptr;              // [rows, dim] bf16, row stride xn_stride (with next_weight)
  int64_t xn_stride = 0;
  int rows = 0, dim = 0;
  float eps = 1e-5f;
};
Status add_rms_norm(const AddRmsNormOp& op, void* stream);

// Before the rotation: bias added to the whole row, then q and k heads
// RMS-normalized over head_dim with q_norm / k_norm (each null: off). neox:
// pairs (i, i + rope_dim/2) instead of (2i, 2i+1). See kernels/model/model_ops.h.
struct RopeAppendOp {
  const float* qkv = nullptr;  // [n, qkv_stride] fp32: q [H·D], k [KV·D], v [KV·D]
  int64_t qkv_stride = 0;
  const float* rope_cos = nullptr;  // [n, rope_dim / 2]
  const float* rope_sin = nullptr;
  const int64_t* slots = nullptr;  // [n]
  uint16_t* q_out = nullptr;       // [n, H, D] bf16, row stride q_stride
  int64_t q_stride = 0;
  void* k_pages = nullptr;  // [num_pages, KV, page_size, D] bf16
  void* v_pages = nullptr;
  int n = 0, q_heads = 0, kv_heads = 0, head_dim = 0, rope_dim = 0, page_size = 0;
  int num_pages = 0;  // > 0: slots past the pool are skipped
  const float* bias = nullptr;    // [(H + 2·KV)·D]
  const float* q_norm = nullptr;  // [D]
  const float* k_norm = nullptr;  // [D]
  float norm_eps = 1e-6f;
  bool neox = false;
};
// head_dim <= kRopeAppendMaxHeadDim (the kernel keeps a head in a warp's registers).
inline constexpr int kRopeAppendMaxHeadDim = 256;
Status rope_append(const RopeAppendOp& op, void* stream);

// out = f(gate) · up: f silu (SwiGLU) or tanh-approximated GELU (Gemma's GeGLU).
enum class GateActivation { kSilu, kGeluTanh };
struct SwigluOp {
  const float* gu = nullptr;  // [rows, 2·ffn] fp32: gate then up
  int64_t gu_stride = 0;
  uint16_t* out = nullptr;  // [rows, ffn] bf16
  int64_t out_stride = 0;
  int rows = 0, ffn = 0;
  GateActivation activation = GateActivation::kSilu;
};
Status swiglu(const SwigluOp& op, void* stream);

// An owned cuBLAS handle (cublasHandle_t as void*, so callers need no
// cuBLAS headers). Move-only.
class CublasHandle {
 public:
  static Result<CublasHandle> create();
  CublasHandle() = default;
  ~CublasHandle();
  CublasHandle(CublasHandle&& o) noexcept;
  CublasHandle& operator=(CublasHandle&& o) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  void* get() const { return handle_; }
  // The stream its calls go to, then the workspace they may use (in this
  // order: cublasSetStream resets the workspace). workspace may be null
  // (bytes 0): cuBLAS's own then.
  Status bind(void* stream, void* workspace, size_t workspace_bytes);

 private:
  void* handle_ = nullptr;
};

// y [rows, n_out] fp32 (row stride ldy) = x [rows, k] bf16 (row stride ldx)
// · wᵀ, w [n_out, k] bf16 row-major (a GGUF matrix); accumulate: y += instead.
struct GemmOp {
  const uint16_t* w = nullptr;
  const uint16_t* x = nullptr;
  float* y = nullptr;
  int rows = 0, n_out = 0, k = 0;
  int64_t ldx = 0, ldy = 0;
  bool accumulate = false;
};
// cublas: a cublasHandle_t whose stream (and workspace) are set.
Status gemm_bf16(void* cublas, const GemmOp& op);

// The decode step's few-token GEMM with its neighbours fused
// (kernels/model/skinny_gemm.cu): w [n_out, k] bf16 (kSwiglu: [2·n_out, k],
// gate rows then up rows), 1..8 rows, k a multiple of 8.
//   input  kBf16: x [rows, k] bf16 (ldx)
//          kRmsNorm: rms_norm(xf [rows, k] fp32 (ldxf)) · norm_weight, as rms_norm() computes it
//   output kStore: y [rows, n_out] fp32 (ldy) = in · wᵀ;  kAccumulate: y += in · wᵀ
//          kRopeAppend: what rope_append(`rope`) does with in · wᵀ as its qkv (rope.qkv,
//                       qkv_stride and n are ignored; n_out = (H + 2·KV)·D)
//          kSwiglu: act [rows, n_out] bf16 (ld_act) = silu(in · w_gateᵀ) · (in · w_upᵀ)
//          kGegluTanh: the same with gelu_tanh (swiglu() with GateActivation::kGeluTanh)
// kRopeAppend fuses adjacent-pair RoPE only: an op with neox, bias or q/k
// norms is kInvalidArgument (store the product, then rope_append).
// The results equal the unfused ops' (rms_norm, gemm_bf16, rope_append,
// swiglu) up to fp32 summation order. kUnsupported when rows > 8 or the input
// rows need more than 48 KiB of shared memory (skinny_gemm_supported).
//          kSplitKv: paged attention's output left as split-KV partials (see
//                    SkinnyGemmOp::split_kv), merged here as the combine kernel would
//          kAddRmsNorm: kRmsNorm of xf + rms_norm(res_y) · res_weight, Gemma's post-norm and
//                    residual add (add_rms_norm) done in the staging; the sum is stored
//                    into res_out (when set), which must alias neither xf nor res_y
enum class SkinnyInput { kBf16, kRmsNorm, kSplitKv, kAddRmsNorm };
// Where the kSplitKv partials are: o_partial [num_splits, partial_rows,
// head_dim] fp32 and lse_partial [num_splits, partial_rows] (the workspace of
// a paged attention call that did not merge), partial row (seq · q_heads +
// head) · q_len + token; the step's input row t is token t % q_len of
// sequence t / q_len, and k = q_heads · head_dim.
struct SkinnySplitKv {
  const float* o_partial = nullptr;
  const float* lse_partial = nullptr;
  int num_splits = 0, q_heads = 0, head_dim = 0, q_len = 1;
  int64_t partial_rows = 0;
};
//          kRopeHeads: y = in · wᵀ as kStore (the QKV product: rope.qkv and qkv_stride are y and
//                      ldy), then rope_append(`rope`) on it in the same launch, every option
//                      of rope_append allowed; bf16 weights only and
//                      skinny_rope_heads_supported(); rope_counters as below
enum class SkinnyOutput { kStore, kAccumulate, kRopeAppend, kSwiglu, kGegluTanh, kRopeHeads };
struct SkinnyGemmOp {
  SkinnyInput input = SkinnyInput::kBf16;
  SkinnyOutput output = SkinnyOutput::kStore;
  const uint16_t* w = nullptr;
  int rows = 0, n_out = 0, k = 0;
  const uint16_t* x = nullptr;
  int64_t ldx = 0;
  const float* xf = nullptr;
  int64_t ldxf = 0;
  const float* norm_weight = nullptr;
  float eps = 1e-5f;
  float* y = nullptr;
  int64_t ldy = 0;
  uint16_t* act = nullptr;
  int64_t ld_act = 0;
  RopeAppendOp rope;
  SkinnySplitKv split_kv;
  // kAddRmsNorm: the pending block output [rows, k] fp32, its post-norm
  // weight [k], and where the new residual goes (null: not stored).
  const float* res_y = nullptr;
  int64_t ld_res_y = 0;
  const float* res_weight = nullptr;
  float* res_out = nullptr;
  int64_t ld_res_out = 0;
  // kRopeHeads: [q_heads + 2·kv_heads] ints on the device, zero before the
  // launch and left zero by it (the last CTA of each head resets its count).
  int* rope_counters = nullptr;
  // Quantized weights instead of w (matrix->quantized()): kStore, kAccumulate
  // and kRopeAppend compute outputs [row_begin, row_begin + matrix->rows) of
  // the n_out (so Q, K and V of different types are three launches into one
  // output; row_begin even); kSwiglu and kGegluTanh read the gate rows from matrix and the
  // up rows from matrix_up (same type, n_out rows each). A bf16 matrix is
  // read as w.
  const DeviceMatrix* matrix = nullptr;
  const DeviceMatrix* matrix_up = nullptr;
  int row_begin = 0;
};
bool skinny_gemm_supported(int rows, int k);
// Whether kRopeHeads takes a QKV product of n_out rows of heads of head_dim.
bool skinny_rope_heads_supported(int n_out, int head_dim);
// With quantized weights (SkinnyGemmOp::matrix) the input rows may take up
// to 96 KiB of shared memory: 4 rows of k = 12288, 8 of 6144.
bool skinny_quant_supported(int rows, int k);
// Steps of up to this many rows (0..2) over quantized weights take the GEMV
// (kernels/model/quant_gemv.cuh) rather than the tensor-core tiles: the
// environment's FLASHSCOPE_QUANT_GEMV (default 0), or the last set (tests
// compare the two kernels in one process). 0 without CUDA.
int quant_gemv_max_rows();
void set_quant_gemv_max_rows(int rows);
// Steps of up to this many rows (0..8) take the int8 GEMV
// (kernels/model/quant_gemv_q8.cuh: inputs quantized to int8 blocks, dp4a)
// before the GEMV above or the tiles: FLASHSCOPE_QUANT_GEMV=q8 (8) or q8:N
// (default 0), or the last set. 0 without CUDA.
int quant_gemv_q8_max_rows();
void set_quant_gemv_q8_max_rows(int rows);
// Its warps a CTA (4 or 16; kernels/model/model_ops.h); tests run both.
int quant_gemv_q8_warps();
void set_quant_gemv_q8_warps(int warps);
Status skinny_gemm(const SkinnyGemmOp& op, void* stream);

// y [rows, w.rows] fp32 (row stride ldy) = x [rows, w.cols] bf16 (row stride
// ldx) · wᵀ (accumulate: y +=), for any DeviceMatrix: the one entry point of
// the engine's many-row products. bf16: gemm_bf16. Quantized: slices of at
// most scratch_bytes / (2·cols) rows dequantized into `scratch` (bf16), each
// followed by gemm_bf16 into its columns of y (the tensor cores' GEMM at the
// price of one write and read of the slice; bench/TUNING.md#engine).
struct MatmulOp {
  const DeviceMatrix* w = nullptr;
  const uint16_t* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  int rows = 0;
  bool accumulate = false;
  uint16_t* scratch = nullptr;  // quantized w: the dequantization slice
  size_t scratch_bytes = 0;
};
Status matmul(void* cublas, const MatmulOp& op, void* stream);

// The sampler's candidate cap (kernels' kMaxSampleCandidates).
int max_sample_candidates();
// How many candidates sample() keeps for these params and vocabulary:
// top_k when 0 < top_k < vocab, else vocab (greedy: 0).
int sample_candidates(const SamplingParams& params, int vocab);

struct SampleOp {
  float* logits = nullptr;  // [vocab]; overwritten (working copy)
  int vocab = 0;
  // plan_penalties()'s plan on the device: the first num_repeat ids get the
  // repetition penalty, then each loses penalty_sub[j] (null: nothing).
  const int32_t* penalty_ids = nullptr;  // [num_penalty] device, distinct
  const float* penalty_sub = nullptr;    // [num_penalty] device, or null
  int num_penalty = 0;
  int num_repeat = 0;
  SamplingParams params;
  double uniform = 0.0;        // from Rng::uniform(); unused when greedy
  int32_t* token_out = nullptr;  // [1] device
  // Lets the sampler split the row over CTAs (about one per SM): at least
  // sample_workspace_bytes(vocab, 1, candidates) bytes, zeroed when
  // allocated (every launch leaves it zeroed, so a graph may replay it).
  // Null or smaller: one CTA reads the whole row.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
// The workspace sample() needs to split `rows` rows of `vocab` logits over
// CTAs on the current device (both take its SM count from device_facts());
// max_keep: the most candidates a sampled row keeps (0: all greedy).
// 0 when the rows run one CTA each anyway.
size_t sample_workspace_bytes(int vocab, int rows, int max_keep);
// kUnsupported when sample_candidates() > max_sample_candidates() (top_k 0
// or above the cap with a large vocabulary): the caller samples on the host.
Status sample(const SampleOp& op, void* stream);

// Device buffers sample_row grows as it needs them.
struct SampleScratch {
  DeviceBuffer penalty_ids;  // the plan's ids, then its subtrahends
  DeviceBuffer token;
  DeviceBuffer workspace;  // SampleOp::workspace
};

// Page-locked host memory (cudaMallocHost): what truly asynchronous copies
// read from and write to. Neither copied nor moved (its address is handed
// to copies in flight).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Frees what it held (no copy may still use it) and allocates `bytes`,
  // zeroed; errors name `what`.
  Status allocate(size_t bytes, const char* what);
  char* data() const { return static_cast<char*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Picks the next token from a device logits row [vocab] as sample() would
// from the same values with the same rng (one uniform drawn when not
// greedy): the penalty plan built and uploaded, the sampler launched, the token
// read back (the stream is synchronized). The row is overwritten. When the
// device sampler cannot keep that many candidates the row is downloaded and
// sample() runs on the host. One corner differs from sample(): a row whose
// logits are all non-finite consumes a draw (sample() returns before it).
Result<int32_t> sample_row(float* logits, int vocab, const SamplingParams& params, Rng& rng,
                           const std::vector<int32_t>& recent_tokens, SampleScratch& scratch, void* stream,
                           size_t generated = std::numeric_limits<size_t>::max());

// One row of a batched sampling call: what sample() takes for it.
struct SampleRowInput {
  SamplingParams params;
  Rng* rng = nullptr;                            // drawn from as sample_row draws
  const std::vector<int32_t>* recent = nullptr;  // the penalty window's source; null: none
  size_t generated = std::numeric_limits<size_t>::max();  // sample()'s `generated`
};

// What sample_rows keeps between its two halves, grown as needed.
struct BatchSampleScratch {
  DeviceBuffer block;      // SampleKernelParams [rows], token ids [rows], penalty ids and subtrahends
  PinnedBuffer staging;    // the same block built on the host; the tokens come back into it
  PinnedBuffer host_rows;  // logits rows the host samples [host rows, vocab]
  DeviceBuffer workspace;  // the sampler's, to split rows over CTAs (SampleOp::workspace)
  std::vector<int> device_rows, host_rows_of;  // which input rows went where
  size_t tokens_offset = 0;
};

// Batched sampling of rows.size() logits rows (row r at logits + r·row_stride,
// on the device), each with its own params, Rng and recent tokens, by
// sample_row's rules and draws: one launch (a row over several CTAs while
// the rows are fewer than the SMs; scratch.workspace), the tokens copied
// back (4 bytes a row). Rows the device sampler cannot keep (top_k 0 or >
// 1024 over a large vocabulary) are downloaded and sampled on the host.
// Two halves, so a caller can put the enqueue behind its forward pass and
// wait once: enqueue (draws the device rows' uniforms, uploads, launches,
// starts the copies back on `stream`), then, after the stream synchronized,
// finish (samples the host rows, writes tokens[rows.size()]). The rows are
// overwritten. kInvalidArgument for malformed params (nothing enqueued).
Status enqueue_sample_rows(float* logits, int64_t row_stride, int vocab, const std::vector<SampleRowInput>& rows,
                           BatchSampleScratch& scratch, void* stream);
Status finish_sample_rows(const std::vector<SampleRowInput>& rows, int vocab, BatchSampleScratch& scratch,
                          int32_t* tokens);

}  // namespace flashscope::cuda
