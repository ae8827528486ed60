// Checked launchers of the CUDA model ops (see model_ops_cuda.hpp): the
// checks, then the kernels' plain parameters, then the launch.
#include "backends/cuda/model_ops_cuda.hpp"

#include "device_facts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#if FLASHSCOPE_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/model/model_ops.h"
#include "kernels/quant/quant_blocks.h"
#endif

namespace flashscope::cuda {

namespace {

constexpr int kMaxSampleCandidates = 1024;

}  // namespace

int max_sample_candidates() { return kMaxSampleCandidates; }

int sample_candidates(const SamplingParams& params, int vocab) {
  if (params.temperature <= 0.0f) return 0;
  return params.top_k > 0 && params.top_k < vocab ? params.top_k : vocab;
}

#if FLASHSCOPE_WITH_CUDA

static_assert(kMaxSampleCandidates == kernels::kMaxSampleCandidates, "the runtime's cap is the kernel's");
static_assert(kRopeAppendMaxHeadDim == kernels::kRopeAppendMaxHeadDim, "the runtime's limit is the kernel's");

namespace {

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

Status bad(const char* op, const std::string& what) { return invalid_argument(std::string(op) + ": " + what); }

Status launched(cudaError_t err, const char* kernel) {
  if (err == cudaSuccess) return {};
  return device_error(std::string(kernel) + " launch failed: " + cudaGetErrorString(err));
}

// Whether the decode step's kernels are launched programmatically (sm_90
// PDL, device_facts.hpp): each waits for the kernel before it on the GPU.
Result<bool> programmatic() {
  auto facts = device_facts();
  if (!facts.ok()) return facts.status();
  return facts->programmatic;
}

// The sampler's grid and workspace size (model_ops.h): 0, unknown, where the
// device cannot be read (one CTA a row; its launch then reports the device).
int device_sm_count() {
  auto facts = device_facts();
  return facts.ok() ? facts->sm_count : 0;
}

}  // namespace

Status embedding(const EmbeddingOp& op, void* stream) {
  const char* name = "embedding";
  if (op.n < 0 || op.hidden < 1 || op.vocab < 1) return bad(name, "n >= 0, hidden >= 1 and vocab >= 1 are required");
  if (op.n == 0) return {};
  if (!op.ids || !op.table || !op.x) return bad(name, "ids, table and x must not be null");
  if (!std::isfinite(op.scale)) return bad(name, "scale must be finite");
  kernels::EmbeddingKernelParams k{op.ids, op.table, op.x, op.n, op.hidden, op.vocab, op.scale};
  return launched(kernels::launch_embedding(k, static_cast<cudaStream_t>(stream)), "embedding");
}

Status rms_norm(const RmsNormOp& op, void* stream) {
  const char* name = "rms_norm";
  if (op.rows < 0 || op.dim < 1) return bad(name, "rows >= 0 and dim >= 1 are required");
  if (op.rows == 0) return {};
  if (!op.x || !op.weight || !op.y) return bad(name, "x, weight and y must not be null");
  if (op.x_stride < op.dim || op.y_stride < op.dim)
    return bad(name, "row strides (x " + std::to_string(op.x_stride) + ", y " + std::to_string(op.y_stride) +
                         ") must be >= dim " + std::to_string(op.dim));
  if (!(op.eps >= 0.0f)) return bad(name, "eps must be >= 0");
  kernels::RmsNormKernelParams k{op.x, op.x_stride, op.weight, op.y, op.y_stride, op.rows, op.dim, op.eps};
  auto pdl = programmatic();
  if (!pdl.ok()) return pdl.status();
  return launched(kernels::launch_rms_norm(k, static_cast<cudaStream_t>(stream), *pdl), "rms_norm");
}

Status add_rms_norm(const AddRmsNormOp& op, void* stream) {
  const char* name = "add_rms_norm";
  if (op.rows < 0 || op.dim < 1) return bad(name, "rows >= 0 and dim >= 1 are required");
  if (op.rows == 0) return {};
  if (!op.y || !op.post_weight || !op.x) return bad(name, "y, post_weight and x must not be null");
  if (op.next_weight && !op.xn) return bad(name, "xn must not be null when next_weight is set");
  if (op.y_stride < op.dim || op.x_stride < op.dim || (op.next_weight && op.xn_stride < op.dim))
    return bad(name, "row strides (y " + std::to_string(op.y_stride) + ", x " + std::to_string(op.x_stride) +
                         ", xn " + std::to_string(op.xn_stride) + ") must be >= dim " + std::to_string(op.dim));
  if (!(op.eps >= 0.0f)) return bad(name, "eps must be >= 0");
  if (op.x_in && (op.x_in_stride < op.dim || op.x_in == op.x))
    return bad(name, "x_in (when set) must not be x and x_in_stride must be >= dim");
  kernels::AddRmsNormKernelParams k{op.y,    op.y_stride,     op.post_weight, op.x,           op.x_stride,
                                    op.x_in, op.x_in_stride,  op.next_weight, op.xn,          op.xn_stride,
                                    op.rows, op.dim,          op.eps};
  auto pdl = programmatic();
  if (!pdl.ok()) return pdl.status();
  return launched(kernels::launch_add_rms_norm(k, static_cast<cudaStream_t>(stream), *pdl), "add_rms_norm");
}

namespace {

// Without opting in to more (cudaFuncSetAttribute), a CTA gets 48 KiB of
// dynamic shared memory; 8 rows of k = 3072 fit.
constexpr size_t kSkinnySmemLimit = 48 * 1024;

// What rope_append and the kRopeAppend skinny GEMM both write to: q_out, the
// pages, the RoPE tables and slots. The qkv input is checked by the caller.
Status check_rope_target(const RopeAppendOp& op, const char* name) {
  if (op.q_heads < 1 || op.kv_heads < 1 || op.head_dim < 2 || op.head_dim % 2 != 0)
    return bad(name, "q_heads, kv_heads >= 1 and an even head_dim are required");
  if (op.head_dim > kRopeAppendMaxHeadDim)
    return bad(name, "head_dim " + std::to_string(op.head_dim) + " is above " + std::to_string(kRopeAppendMaxHeadDim));
  if ((op.q_norm || op.k_norm) && !(op.norm_eps >= 0.0f)) return bad(name, "norm_eps must be >= 0");
  if (op.rope_dim < 0 || op.rope_dim > op.head_dim || op.rope_dim % 2 != 0)
    return bad(name, "rope_dim " + std::to_string(op.rope_dim) + " must be even and in [0, head_dim " +
                         std::to_string(op.head_dim) + "]");
  if (op.page_size < 1) return bad(name, "page_size must be >= 1");
  if (op.num_pages < 0) return bad(name, "num_pages must be >= 0 (0 = unchecked)");
  if (!op.slots || !op.q_out || !op.k_pages || !op.v_pages || (op.rope_dim > 0 && (!op.rope_cos || !op.rope_sin)))
    return bad(name, "slots, q_out, k_pages, v_pages (and cos/sin when rope_dim > 0) must not be null");
  if (op.q_stride < int64_t(op.q_heads) * op.head_dim || op.q_stride % 2 != 0)
    return bad(name, "q_stride must be even and >= q_heads·head_dim");
  // 32-bit stores of bf16 pairs.
  if (!aligned(op.q_out, 4) || !aligned(op.k_pages, 4) || !aligned(op.v_pages, 4) || !aligned(op.slots, 8))
    return bad(name, "slots must be 8-byte aligned, q_out and the pages 4-byte aligned");
  return {};
}

kernels::RopeAppendKernelParams rope_params(const RopeAppendOp& op) {
  kernels::RopeAppendKernelParams k{};
  k.qkv = op.qkv;
  k.qkv_stride = op.qkv_stride;
  k.rope_cos = op.rope_cos;
  k.rope_sin = op.rope_sin;
  k.slots = op.slots;
  k.q_out = op.q_out;
  k.q_stride = op.q_stride;
  k.k_pages = static_cast<uint16_t*>(op.k_pages);
  k.v_pages = static_cast<uint16_t*>(op.v_pages);
  k.n = op.n;
  k.q_heads = op.q_heads;
  k.kv_heads = op.kv_heads;
  k.head_dim = op.head_dim;
  k.rope_dim = op.rope_dim;
  k.page_size = op.page_size;
  k.num_slots = int64_t(op.num_pages) * op.page_size;
  k.bias = op.bias;
  k.q_norm = op.q_norm;
  k.k_norm = op.k_norm;
  k.norm_eps = op.norm_eps;
  k.neox = op.neox ? 1 : 0;
  return k;
}

kernels::SkinnyOutput kernel_output(SkinnyOutput o) {
  switch (o) {
    case SkinnyOutput::kAccumulate: return kernels::SkinnyOutput::kAccumulate;
    case SkinnyOutput::kRopeAppend: return kernels::SkinnyOutput::kRopeAppend;
    case SkinnyOutput::kSwiglu: return kernels::SkinnyOutput::kSwiglu;
    case SkinnyOutput::kGegluTanh: return kernels::SkinnyOutput::kGegluTanh;
    case SkinnyOutput::kRopeHeads: return kernels::SkinnyOutput::kRopeHeads;
    case SkinnyOutput::kStore: break;
  }
  return kernels::SkinnyOutput::kStore;
}

}  // namespace

Status rope_append(const RopeAppendOp& op, void* stream) {
  const char* name = "rope_append";
  if (op.n < 0) return bad(name, "n must be >= 0");
  if (op.n == 0) return {};
  FLASHSCOPE_RETURN_IF_ERROR(check_rope_target(op, name));
  if (!op.qkv) return bad(name, "qkv must not be null");
  const int64_t row = int64_t(op.q_heads + 2 * op.kv_heads) * op.head_dim;
  if (op.qkv_stride < row || op.qkv_stride % 2 != 0)
    return bad(name, "qkv_stride " + std::to_string(op.qkv_stride) + " must be even and >= (q_heads + 2·kv_heads)·head_dim = " +
                         std::to_string(row));
  if (!aligned(op.qkv, 8)) return bad(name, "qkv must be 8-byte aligned (float2 loads)");
  auto pdl = programmatic();
  if (!pdl.ok()) return pdl.status();
  return launched(kernels::launch_rope_append(rope_params(op), static_cast<cudaStream_t>(stream), *pdl),
                  "rope_append");
}

bool skinny_gemm_supported(int rows, int k) {
  return rows >= 1 && rows <= kernels::kSkinnyMaxRows && k >= 8 && k % 8 == 0 &&
         kernels::skinny_gemm_smem_bytes(rows, k) <= kSkinnySmemLimit;
}

bool skinny_rope_heads_supported(int n_out, int head_dim) {
  return kernels::skinny_gemm_rope_heads_supported(n_out, head_dim);
}

bool skinny_quant_supported(int rows, int k) {
  return rows >= 1 && rows <= kernels::kSkinnyMaxRows && k >= 32 && k % 32 == 0 &&
         kernels::skinny_gemm_smem_bytes(rows, k) <= kernels::skinny_gemm_quant_smem_limit();
}

int quant_gemv_max_rows() { return kernels::quant_gemv_max_rows(); }
void set_quant_gemv_max_rows(int rows) { kernels::set_quant_gemv_max_rows(rows); }
int quant_gemv_q8_max_rows() { return kernels::quant_gemv_q8_max_rows(); }
void set_quant_gemv_q8_max_rows(int rows) { kernels::set_quant_gemv_q8_max_rows(rows); }
int quant_gemv_q8_warps() { return kernels::quant_gemv_q8_warps(); }
void set_quant_gemv_q8_warps(int warps) { kernels::set_quant_gemv_q8_warps(warps); }

// The quantized weights of a skinny_gemm call (op.matrix quantized), as the kernel takes them.
static Result<kernels::SkinnyQuantWeights> quant_weights(const SkinnyGemmOp& op) {
  const char* name = "skinny_gemm";
  const DeviceMatrix& m = *op.matrix;
  if (!quant_matrix_type_supported(m.type))
    return unsupported(std::string("skinny_gemm: weights of type ") + ggml_type_name(m.type) +
                       " are not read in place on the GPU");
  const int64_t block = ggml_block_size(m.type);
  if (!m.data || m.cols != op.k || op.k % block != 0 || m.row_bytes != op.k / block * ggml_type_size(m.type))
    return bad(name, "matrix: data must not be null, cols == k, a multiple of the block, and row_bytes its blocks'");
  const int align = m.type == GgmlType::kQ4_1 || m.type == GgmlType::kQ5_1 || m.type == GgmlType::kQ4_K ||
                            m.type == GgmlType::kQ5_K
                        ? 4
                        : 2;
  if (!aligned(m.data, static_cast<size_t>(align)) || m.row_bytes % align != 0)
    return bad(name, "matrix: data and row_bytes must be " + std::to_string(align) + "-byte aligned for " +
                         ggml_type_name(m.type));
  kernels::SkinnyQuantWeights w{};
  w.type = static_cast<int>(m.type);
  w.data = static_cast<const uint8_t*>(m.data);
  w.row_bytes = m.row_bytes;
  if (op.output == SkinnyOutput::kSwiglu || op.output == SkinnyOutput::kGegluTanh) {
    const DeviceMatrix* up = op.matrix_up;
    if (!up || !up->data || up->type != m.type || up->row_bytes != m.row_bytes || up->cols != m.cols ||
        m.rows != op.n_out || up->rows != op.n_out || op.row_begin != 0 || !aligned(up->data, static_cast<size_t>(align)))
      return bad(name, "kSwiglu / kGegluTanh: matrix and matrix_up must be n_out rows each of one type");
    w.up_data = static_cast<const uint8_t*>(up->data);
    w.row_begin = 0;
    w.row_end = op.n_out;
  } else {
    if (op.row_begin < 0 || op.row_begin % 2 != 0 || m.rows < 1 || int64_t(op.row_begin) + m.rows > op.n_out)
      return bad(name, "matrix: row_begin must be even and [row_begin, row_begin + rows) inside n_out");
    w.row_begin = op.row_begin;
    w.row_end = op.row_begin + m.rows;
  }
  return w;
}

Status skinny_gemm(const SkinnyGemmOp& op_in, void* stream) {
  const char* name = "skinny_gemm";
  SkinnyGemmOp op = op_in;
  const bool quant = op.matrix != nullptr && op.matrix->quantized();
  if (op.matrix != nullptr && !quant) {
    if (op.row_begin != 0) return bad(name, "a bf16 matrix is read whole (row_begin 0)");
    op.w = op.matrix->bf16();
  }
  if (op.rows < 0 || op.n_out < 1 || op.k < 1) return bad(name, "rows >= 0, n_out >= 1 and k >= 1 are required");
  if (op.rows == 0) return {};
  if (op.rows > kernels::kSkinnyMaxRows)
    return unsupported("skinny_gemm takes at most " + std::to_string(kernels::kSkinnyMaxRows) + " rows; got " +
                       std::to_string(op.rows) + " (use gemm_bf16)");
  if (op.k % 8 != 0) return bad(name, "k " + std::to_string(op.k) + " must be a multiple of 8 (16-byte chunks)");
  if (quant ? !skinny_quant_supported(op.rows, op.k) : !skinny_gemm_supported(op.rows, op.k))
    return unsupported("skinny_gemm: " + std::to_string(op.rows) + " rows of k = " + std::to_string(op.k) +
                       " need more than " +
                       std::to_string(quant ? kernels::skinny_gemm_quant_smem_limit() : kSkinnySmemLimit) +
                       " bytes of shared memory");
  kernels::SkinnyQuantWeights wq{};
  if (quant) {
    auto w = quant_weights(op);
    if (!w.ok()) return w.status();
    wq = w.value();
  } else if (!op.w || !aligned(op.w, 16)) {
    return bad(name, "w must be non-null and 16-byte aligned");
  }
  if (op.input == SkinnyInput::kBf16) {
    if (!op.x || !aligned(op.x, 16) || op.ldx < op.k || op.ldx % 8 != 0)
      return bad(name, "x must be non-null and 16-byte aligned, ldx >= k and a multiple of 8");
  } else if (op.input == SkinnyInput::kSplitKv) {
    const SkinnySplitKv& s = op.split_kv;
    if (!s.o_partial || !s.lse_partial || !aligned(s.o_partial, 16))
      return bad(name, "split_kv: o_partial (16-byte aligned) and lse_partial must not be null");
    if (s.num_splits < 1 || s.q_heads < 1 || s.q_len < 1 || s.head_dim < 8 || s.head_dim % 8 != 0)
      return bad(name, "split_kv: num_splits, q_heads, q_len >= 1 and head_dim a multiple of 8 are required");
    if (int64_t(s.q_heads) * s.head_dim != op.k)
      return bad(name, "split_kv: k must be q_heads·head_dim = " + std::to_string(int64_t(s.q_heads) * s.head_dim));
    if (op.rows % s.q_len != 0 || int64_t(op.rows) * s.q_heads > s.partial_rows)
      return bad(name, "split_kv: rows must be whole sequences of q_len tokens within partial_rows");
  } else {
    if (!op.xf || !aligned(op.xf, 16) || op.ldxf < op.k || op.ldxf % 4 != 0)
      return bad(name, "xf must be non-null and 16-byte aligned, ldxf >= k and a multiple of 4");
    if (!op.norm_weight) return bad(name, "norm_weight must not be null");
    if (!(op.eps >= 0.0f)) return bad(name, "eps must be >= 0");
  }
  if (op.input == SkinnyInput::kAddRmsNorm) {
    if (!op.res_y || !aligned(op.res_y, 16) || op.ld_res_y < op.k || op.ld_res_y % 4 != 0 || !op.res_weight ||
        !aligned(op.res_weight, 16) || !aligned(op.norm_weight, 16))
      return bad(name, "kAddRmsNorm: res_y, res_weight and norm_weight must be non-null and 16-byte aligned, "
                       "ld_res_y >= k and a multiple of 4");
    if (op.res_out && (!aligned(op.res_out, 16) || op.ld_res_out < op.k || op.ld_res_out % 4 != 0))
      return bad(name, "kAddRmsNorm: res_out must be 16-byte aligned, ld_res_out >= k and a multiple of 4");
    // Every CTA reads xf and res_y while CTA 0 writes res_out: the rows must not overlap.
    auto overlaps = [&](const float* a, int64_t lda, const float* b, int64_t ldb) {
      const float* a_end = a + int64_t(op.rows - 1) * lda + op.k;
      const float* b_end = b + int64_t(op.rows - 1) * ldb + op.k;
      return a < b_end && b < a_end;
    };
    if (op.res_out && (overlaps(op.res_out, op.ld_res_out, op.xf, op.ldxf) ||
                       overlaps(op.res_out, op.ld_res_out, op.res_y, op.ld_res_y)))
      return bad(name, "kAddRmsNorm: res_out must not overlap xf or res_y");
  }
  switch (op.output) {
    case SkinnyOutput::kStore:
    case SkinnyOutput::kAccumulate:
      if (!op.y || op.ldy < op.n_out) return bad(name, "y must not be null and ldy >= n_out");
      break;
    case SkinnyOutput::kSwiglu:
    case SkinnyOutput::kGegluTanh:
      if (!op.act || op.ld_act < op.n_out) return bad(name, "act must not be null and ld_act >= n_out");
      break;
    case SkinnyOutput::kRopeHeads: {
      FLASHSCOPE_RETURN_IF_ERROR(check_rope_target(op.rope, name));
      if (quant) return bad(name, "kRopeHeads takes bf16 weights (store the product, then rope_append)");
      const int64_t row = int64_t(op.rope.q_heads + 2 * op.rope.kv_heads) * op.rope.head_dim;
      if (op.n_out != row)
        return bad(name, "n_out " + std::to_string(op.n_out) + " must be (q_heads + 2·kv_heads)·head_dim = " +
                             std::to_string(row) + " for kRopeHeads");
      if (!skinny_rope_heads_supported(op.n_out, op.rope.head_dim))
        return unsupported("skinny_gemm: kRopeHeads needs head_dim a multiple of 8 and n_out <= 8184");
      if (!op.y || op.ldy < op.n_out || op.ldy % 2 != 0 || !aligned(op.y, 8))
        return bad(name, "kRopeHeads: y must be non-null and 8-byte aligned, ldy >= n_out and even");
      if (!op.rope_counters || !aligned(op.rope_counters, 4))
        return bad(name, "kRopeHeads: rope_counters must not be null");
      break;
    }
    case SkinnyOutput::kRopeAppend: {
      FLASHSCOPE_RETURN_IF_ERROR(check_rope_target(op.rope, name));
      if (op.rope.neox || op.rope.bias || op.rope.q_norm || op.rope.k_norm)
        return bad(name, "the RoPE epilogue rotates adjacent pairs without bias or q/k norms; store the product "
                         "and run rope_append for NeoX pairs, biases or norms");
      const int64_t row = int64_t(op.rope.q_heads + 2 * op.rope.kv_heads) * op.rope.head_dim;
      if (op.n_out != row)
        return bad(name, "n_out " + std::to_string(op.n_out) + " must be (q_heads + 2·kv_heads)·head_dim = " +
                             std::to_string(row) + " for the RoPE epilogue");
      break;
    }
  }
  kernels::SkinnyGemmKernelParams k{};
  k.input = op.input == SkinnyInput::kBf16         ? kernels::SkinnyInput::kBf16
            : op.input == SkinnyInput::kRmsNorm    ? kernels::SkinnyInput::kRmsNorm
            : op.input == SkinnyInput::kAddRmsNorm ? kernels::SkinnyInput::kAddRmsNorm
                                                   : kernels::SkinnyInput::kSplitKv;
  if (op.input == SkinnyInput::kAddRmsNorm)
    k.residual = {op.res_y, op.ld_res_y, op.res_weight, op.res_out, op.ld_res_out};
  if (op.input == SkinnyInput::kSplitKv) {
    k.split_kv = {op.split_kv.o_partial, op.split_kv.lse_partial, op.split_kv.num_splits,
                  op.split_kv.q_heads,   op.split_kv.head_dim,    op.split_kv.q_len,
                  op.split_kv.partial_rows};
  }
  k.output = kernel_output(op.output);
  k.rows = op.rows;
  k.n_out = op.n_out;
  k.k = op.k;
  k.w = op.w;
  k.x = op.x;
  k.ldx = op.ldx;
  k.xf = op.xf;
  k.ldxf = op.ldxf;
  k.norm_weight = op.norm_weight;
  k.eps = op.eps;
  k.y = op.y;
  k.ldy = op.ldy;
  k.act = op.act;
  k.ld_act = op.ld_act;
  if (op.output == SkinnyOutput::kRopeAppend) k.rope = rope_params(op.rope);
  if (op.output == SkinnyOutput::kRopeHeads) {
    RopeAppendOp r = op.rope;
    r.qkv = op.y;
    r.qkv_stride = op.ldy;
    r.n = op.rows;
    k.rope = rope_params(r);
    k.rope_counters = op.rope_counters;
  }
  k.wq = wq;
  auto facts = device_facts();
  if (!facts.ok()) return facts.status();
  k.sm_count = facts->sm_count;
  return launched(kernels::launch_skinny_gemm(k, static_cast<cudaStream_t>(stream), facts->programmatic),
                  "skinny_gemm");
}

Status swiglu(const SwigluOp& op, void* stream) {
  const char* name = "swiglu";
  if (op.rows < 0 || op.ffn < 1) return bad(name, "rows >= 0 and ffn >= 1 are required");
  if (op.rows == 0) return {};
  if (op.rows > 65535) return bad(name, "rows must be <= 65535 (grid y)");
  if (!op.gu || !op.out) return bad(name, "gu and out must not be null");
  if (op.gu_stride < 2 * int64_t(op.ffn) || op.out_stride < op.ffn)
    return bad(name, "gu_stride must be >= 2·ffn and out_stride >= ffn");
  kernels::SwigluKernelParams k{op.gu,   op.gu_stride, op.out, op.out_stride, op.rows, op.ffn,
                                op.activation == GateActivation::kGeluTanh ? kernels::GateActivation::kGeluTanh
                                                                            : kernels::GateActivation::kSilu};
  auto pdl = programmatic();
  if (!pdl.ok()) return pdl.status();
  return launched(kernels::launch_swiglu(k, static_cast<cudaStream_t>(stream), *pdl), "swiglu");
}

Result<CublasHandle> CublasHandle::create() {
  cublasHandle_t h = nullptr;
  const cublasStatus_t st = cublasCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Status(st == CUBLAS_STATUS_ALLOC_FAILED ? StatusCode::kOutOfMemory : StatusCode::kDeviceError,
                  std::string("cublasCreate: ") + cublasGetStatusString(st));
  }
  CublasHandle out;
  out.handle_ = h;
  return out;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

CublasHandle::CublasHandle(CublasHandle&& o) noexcept : handle_(o.handle_) { o.handle_ = nullptr; }

CublasHandle& CublasHandle::operator=(CublasHandle&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
    handle_ = o.handle_;
    o.handle_ = nullptr;
  }
  return *this;
}

Status CublasHandle::bind(void* stream, void* workspace, size_t workspace_bytes) {
  if (handle_ == nullptr) return invalid_argument("CublasHandle::bind: no handle");
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasStatus_t st = cublasSetStream(h, static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS) return device_error(std::string("cublasSetStream: ") + cublasGetStatusString(st));
  if (workspace != nullptr) {
    st = cublasSetWorkspace(h, workspace, workspace_bytes);
    if (st != CUBLAS_STATUS_SUCCESS)
      return device_error(std::string("cublasSetWorkspace: ") + cublasGetStatusString(st));
  }
  return {};
}

Status gemm_bf16(void* cublas, const GemmOp& op) {
  const char* name = "gemm_bf16";
  if (cublas == nullptr) return bad(name, "no cuBLAS handle");
  if (op.rows < 0 || op.n_out < 1 || op.k < 1) return bad(name, "rows >= 0, n_out >= 1 and k >= 1 are required");
  if (op.rows == 0) return {};
  if (!op.w || !op.x || !op.y) return bad(name, "w, x and y must not be null");
  if (op.ldx < op.k || op.ldy < op.n_out || op.ldx > 0x7fffffff || op.ldy > 0x7fffffff)
    return bad(name, "ldx (" + std::to_string(op.ldx) + ") must be in [k, 2^31) and ldy (" + std::to_string(op.ldy) +
                         ") in [n_out, 2^31)");
  // Row-major y [rows, n_out] is column-major [n_out, rows]: y = W · x in
  // column-major terms, W (row-major [n_out, k]) read transposed.
  const float alpha = 1.0f, beta = op.accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasGemmEx(static_cast<cublasHandle_t>(cublas), CUBLAS_OP_T, CUBLAS_OP_N, op.n_out, op.rows, op.k, &alpha,
                   op.w, CUDA_R_16BF, op.k, op.x, CUDA_R_16BF, static_cast<int>(op.ldx), &beta, op.y, CUDA_R_32F,
                   static_cast<int>(op.ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return device_error("cublasGemmEx (bf16 x bf16 -> fp32, m=" + std::to_string(op.n_out) + " n=" +
                        std::to_string(op.rows) + " k=" + std::to_string(op.k) + ") failed: " + cublasGetStatusString(st));
  return {};
}

bool quant_matrix_type_supported(GgmlType type) {
  return kernels::quant::is_quant_type(static_cast<int>(type));
}

size_t quant_matrix_tail_bytes() { return kernels::quant::kQuantTailPad; }

namespace {

Status check_quant_matrix(const DeviceMatrix& w, const char* name) {
  if (!quant_matrix_type_supported(w.type))
    return unsupported(std::string(name) + ": weights of type " + ggml_type_name(w.type) +
                       " are not read in place on the GPU");
  const int64_t block = ggml_block_size(w.type);
  if (!w.data || w.rows < 0 || w.cols < 1 || w.cols % block != 0 ||
      w.row_bytes != w.cols / block * ggml_type_size(w.type))
    return bad(name, "the matrix needs data, cols a multiple of its block and row_bytes its blocks'");
  if (!aligned(w.data, 2) || w.row_bytes % 2 != 0) return bad(name, "the matrix must be 2-byte aligned");
  return {};
}

kernels::QuantMatrixParams quant_matrix_params(const DeviceMatrix& w) {
  return {static_cast<int>(w.type), static_cast<const uint8_t*>(w.data), w.row_bytes, w.rows, w.cols};
}

}  // namespace

Status dequantize_bf16(const DeviceMatrix& w, int row_begin, int count, uint16_t* out, int64_t ld_out, void* stream) {
  const char* name = "dequantize_bf16";
  FLASHSCOPE_RETURN_IF_ERROR(check_quant_matrix(w, name));
  if (row_begin < 0 || count < 0 || int64_t(row_begin) + count > w.rows)
    return bad(name, "rows [row_begin, row_begin + count) must lie inside the matrix");
  if (count == 0) return {};
  if (!out || !aligned(out, 16) || ld_out < w.cols || ld_out % 8 != 0)
    return bad(name, "out must be non-null and 16-byte aligned, ld_out >= cols and a multiple of 8");
  return launched(kernels::launch_dequantize_bf16(quant_matrix_params(w.rows_view(row_begin, count)), out, ld_out,
                                                  static_cast<cudaStream_t>(stream)),
                  "dequantize_bf16");
}

Status embedding_rows(const DeviceMatrix& table, const int32_t* ids, int n, float* x, void* stream, float scale) {
  if (!table.quantized()) {
    EmbeddingOp op;
    op.ids = ids;
    op.table = table.bf16();
    op.x = x;
    op.n = n;
    op.hidden = table.cols;
    op.vocab = table.rows;
    op.scale = scale;
    return embedding(op, stream);
  }
  const char* name = "embedding_rows";
  FLASHSCOPE_RETURN_IF_ERROR(check_quant_matrix(table, name));
  if (n < 0) return bad(name, "n must be >= 0");
  if (n == 0) return {};
  if (!ids || !x || !aligned(x, 16)) return bad(name, "ids and x (16-byte aligned) must not be null");
  return launched(kernels::launch_embedding_quant(quant_matrix_params(table), ids, n, x, scale,
                                                  static_cast<cudaStream_t>(stream)),
                  "embedding_quant");
}

Status matmul(void* cublas, const MatmulOp& op, void* stream) {
  const char* name = "matmul";
  if (!op.w) return bad(name, "w must not be null");
  const DeviceMatrix& w = *op.w;
  GemmOp g;
  g.x = op.x;
  g.ldx = op.ldx;
  g.rows = op.rows;
  g.k = w.cols;
  g.ldy = op.ldy;
  g.accumulate = op.accumulate;
  if (!w.quantized()) {
    g.w = w.bf16();
    g.y = op.y;
    g.n_out = w.rows;
    return gemm_bf16(cublas, g);
  }
  if (op.rows == 0) return {};
  FLASHSCOPE_RETURN_IF_ERROR(check_quant_matrix(w, name));
  const int64_t slice = static_cast<int64_t>(op.scratch_bytes / (2 * static_cast<size_t>(w.cols)));
  if (!op.scratch || slice < 1) return bad(name, "a quantized matrix needs a scratch of at least one bf16 row");
  if (!op.y) return bad(name, "y must not be null");
  for (int r0 = 0; r0 < w.rows; r0 += static_cast<int>(slice)) {
    const int count = static_cast<int>(std::min<int64_t>(slice, w.rows - r0));
    FLASHSCOPE_RETURN_IF_ERROR(dequantize_bf16(w, r0, count, op.scratch, w.cols, stream));
    g.w = op.scratch;
    g.y = op.y + r0;
    g.n_out = count;
    FLASHSCOPE_RETURN_IF_ERROR(gemm_bf16(cublas, g));
  }
  return {};
}

// The checks of one sampler row, and its kernel parameters.
static Result<kernels::SampleKernelParams> sample_params(const SampleOp& op) {
  const char* name = "sample";
  if (op.vocab < 1) return bad(name, "vocab must be >= 1");
  if (!op.logits || !op.token_out) return bad(name, "logits and token_out must not be null");
  if (op.num_penalty < 0 || (op.num_penalty > 0 && !op.penalty_ids))
    return bad(name, "penalty_ids must not be null when num_penalty > 0");
  if (op.num_repeat < 0 || op.num_repeat > op.num_penalty) return bad(name, "num_repeat must be in [0, num_penalty]");
  const SamplingParams& s = op.params;
  if (s.temperature > 0.0f) {
    if (!(s.top_p > 0.0f)) return bad(name, "top_p must be > 0 (1 disables it)");
    if (s.min_p < 0.0f || s.min_p > 1.0f) return bad(name, "min_p must be in [0, 1]");
    if (!(op.uniform >= 0.0 && op.uniform < 1.0)) return bad(name, "uniform must be in [0, 1)");
  }
  const int keep = sample_candidates(s, op.vocab);
  if (keep > kMaxSampleCandidates)
    return unsupported("sampling on the device keeps at most " + std::to_string(kMaxSampleCandidates) +
                       " candidates after top-k; top_k " + std::to_string(s.top_k) + " over a vocabulary of " +
                       std::to_string(op.vocab) + " keeps " + std::to_string(keep));
  const bool penalty = s.repetition_penalty != 1.0f && s.repetition_penalty > 0.0f;
  kernels::SampleKernelParams k{};
  k.logits = op.logits;
  k.vocab = op.vocab;
  k.penalty_ids = op.penalty_ids;
  k.penalty_sub = op.penalty_sub;
  k.num_penalty = op.num_penalty;
  k.num_repeat = penalty ? op.num_repeat : 0;
  k.repetition_penalty = s.repetition_penalty;
  k.temperature = s.temperature;
  k.keep = std::max(keep, 1);
  k.top_p = s.top_p;
  k.min_p = s.min_p;
  k.uniform = op.uniform;
  k.token_out = op.token_out;
  return k;
}

Status sample(const SampleOp& op, void* stream) {
  auto k = sample_params(op);
  if (!k.ok()) return k.status();
  return launched(
      kernels::launch_sample(k.value(), device_sm_count(), op.workspace, op.workspace_bytes,
                             static_cast<cudaStream_t>(stream)),
      "sample");
}

size_t sample_workspace_bytes(int vocab, int rows, int max_keep) {
  return kernels::sample_workspace_bytes(vocab, rows, max_keep, device_sm_count());
}

namespace {

Status grow(DeviceBuffer& buf, size_t bytes, const char* what) {
  if (buf.size() >= bytes) return {};
  auto b = DeviceBuffer::allocate(bytes);
  if (!b.ok()) return Status(b.status().code(), std::string(what) + ": " + b.status().message());
  buf = std::move(b).value();
  return {};
}

Status checked(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return {};
  cudaGetLastError();
  return device_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// The sampler's workspace for `rows` rows, grown (and zeroed, on `s`, as
// SampleOp::workspace asks) when it is too small; *data stays null with
// FLASHSCOPE_CUDA_SAMPLE_SPLIT=0 (one CTA a row, for comparisons).
Status grow_sample_workspace(DeviceBuffer& buf, int vocab, int rows, int max_keep, cudaStream_t s, void** data,
                             size_t* bytes) {
  *data = nullptr;
  *bytes = 0;
  const char* split = std::getenv("FLASHSCOPE_CUDA_SAMPLE_SPLIT");
  if (split != nullptr && std::strcmp(split, "0") == 0) return {};
  const size_t need = sample_workspace_bytes(vocab, rows, max_keep);
  if (buf.size() < need) {
    FLASHSCOPE_RETURN_IF_ERROR(grow(buf, need, "the sampler's workspace"));
    FLASHSCOPE_RETURN_IF_ERROR(
        checked(cudaMemsetAsync(buf.data(), 0, buf.size(), s), "cudaMemsetAsync of the sampler's workspace"));
  }
  *data = buf.data();
  *bytes = buf.size();
  return {};
}

}  // namespace

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

Status PinnedBuffer::allocate(size_t bytes, const char* what) {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  if (bytes == 0) return {};
  FLASHSCOPE_RETURN_IF_ERROR(checked(cudaMallocHost(&ptr_, bytes), (std::string("cudaMallocHost for ") + what).c_str()));
  bytes_ = bytes;
  std::memset(ptr_, 0, bytes);
  return {};
}

Status enqueue_sample_rows(float* logits, int64_t row_stride, int vocab, const std::vector<SampleRowInput>& rows,
                           BatchSampleScratch& scratch, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (logits == nullptr || vocab < 1 || row_stride < vocab)
    return invalid_argument("sample_rows: no logits, or a row stride below the vocabulary");
  scratch.device_rows.clear();
  scratch.host_rows_of.clear();
  std::vector<PenaltyPlan> plans(rows.size());
  size_t total_ids = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].rng == nullptr) return invalid_argument("sample_rows: row " + std::to_string(r) + " has no Rng");
    if (sample_candidates(rows[r].params, vocab) > kMaxSampleCandidates) {
      scratch.host_rows_of.push_back(static_cast<int>(r));
      continue;
    }
    scratch.device_rows.push_back(static_cast<int>(r));
    if (rows[r].recent != nullptr) plans[r] = plan_penalties(rows[r].params, *rows[r].recent, rows[r].generated, vocab);
    total_ids += plans[r].ids.size();
  }
  // The block: params [nd], token ids [nd], each row's penalty ids then its
  // subtrahends (4 bytes each); built in the
  // staging copy on the host with the device addresses it will have.
  const size_t nd = scratch.device_rows.size();
  const size_t tokens_at = (nd * sizeof(kernels::SampleKernelParams) + 15) / 16 * 16;
  const size_t ids_at = (tokens_at + nd * sizeof(int32_t) + 15) / 16 * 16;
  const size_t bytes = ids_at + std::max<size_t>(2 * total_ids, 1) * sizeof(int32_t);
  if (scratch.block.size() < bytes) {
    auto b = DeviceBuffer::allocate(bytes * 2);  // headroom: the penalty windows grow with the replies
    if (!b.ok()) return Status(b.status().code(), "the batched sampler's block: " + b.status().message());
    scratch.block = std::move(b).value();
  }
  if (scratch.staging.size() < scratch.block.size())
    FLASHSCOPE_RETURN_IF_ERROR(scratch.staging.allocate(scratch.block.size(), "the batched sampler's staging"));
  char* host = scratch.staging.data();
  char* dev = static_cast<char*>(scratch.block.data());
  size_t id_cursor = ids_at;
  int max_keep = 0;  // over the sampled (not greedy) rows
  for (size_t j = 0; j < nd; ++j) {
    const size_t r = static_cast<size_t>(scratch.device_rows[j]);
    const PenaltyPlan& plan = plans[r];
    const std::vector<int32_t>& row_ids = plan.ids;
    const size_t sub_at = id_cursor + row_ids.size() * sizeof(int32_t);
    if (!row_ids.empty()) std::memcpy(host + id_cursor, row_ids.data(), row_ids.size() * sizeof(int32_t));
    if (!plan.sub.empty()) std::memcpy(host + sub_at, plan.sub.data(), plan.sub.size() * sizeof(float));
    SampleOp op;
    op.logits = logits + static_cast<int64_t>(r) * row_stride;
    op.vocab = vocab;
    op.penalty_ids = reinterpret_cast<const int32_t*>(dev + id_cursor);
    op.penalty_sub = plan.sub.empty() ? nullptr : reinterpret_cast<const float*>(dev + sub_at);
    op.num_penalty = static_cast<int>(row_ids.size());
    op.num_repeat = plan.num_repeat;
    op.params = rows[r].params;
    op.uniform = rows[r].params.temperature > 0.0f ? rows[r].rng->uniform() : 0.0;  // sample_row's one draw
    op.token_out = reinterpret_cast<int32_t*>(dev + tokens_at) + j;
    auto k = sample_params(op);
    if (!k.ok()) return Status(k.status().code(), "sample_rows: row " + std::to_string(r) + ": " + k.status().message());
    std::memcpy(host + j * sizeof(kernels::SampleKernelParams), &k.value(), sizeof(kernels::SampleKernelParams));
    if (k.value().temperature > 0.0f) max_keep = std::max(max_keep, k.value().keep);
    id_cursor = sub_at + plan.sub.size() * sizeof(float);
  }
  scratch.tokens_offset = tokens_at;
  if (nd > 0) {
    FLASHSCOPE_RETURN_IF_ERROR(checked(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s),
                                       "cudaMemcpyAsync of the batched sampler's rows"));
    void* ws = nullptr;
    size_t ws_bytes = 0;
    FLASHSCOPE_RETURN_IF_ERROR(
        grow_sample_workspace(scratch.workspace, vocab, static_cast<int>(nd), max_keep, s, &ws, &ws_bytes));
    const auto* rows_dev = reinterpret_cast<const kernels::SampleKernelParams*>(dev);
    FLASHSCOPE_RETURN_IF_ERROR(launched(
        kernels::launch_sample_rows(rows_dev, static_cast<int>(nd), vocab, max_keep, device_sm_count(), ws, ws_bytes, s),
        "sample_rows"));
    // Stream order: the upload above has read this staging memory before the tokens land on it.
    FLASHSCOPE_RETURN_IF_ERROR(checked(cudaMemcpyAsync(host + tokens_at, dev + tokens_at, nd * sizeof(int32_t),
                                                       cudaMemcpyDeviceToHost, s),
                                       "cudaMemcpyAsync of the sampled tokens"));
  }
  const size_t nh = scratch.host_rows_of.size();
  if (nh > 0) {
    const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
    if (scratch.host_rows.size() < nh * row_bytes)
      FLASHSCOPE_RETURN_IF_ERROR(scratch.host_rows.allocate(nh * row_bytes, "the logits rows sampled on the host"));
    for (size_t j = 0; j < nh; ++j) {
      const int64_t r = scratch.host_rows_of[j];
      FLASHSCOPE_RETURN_IF_ERROR(checked(cudaMemcpyAsync(scratch.host_rows.data() + j * row_bytes, logits + r * row_stride,
                                                         row_bytes, cudaMemcpyDeviceToHost, s),
                                         "cudaMemcpyAsync of a logits row"));
    }
  }
  return {};
}

Status finish_sample_rows(const std::vector<SampleRowInput>& rows, int vocab, BatchSampleScratch& scratch,
                          int32_t* tokens) {
  const char* host = scratch.staging.data();
  for (size_t j = 0; j < scratch.device_rows.size(); ++j) {
    std::memcpy(&tokens[scratch.device_rows[j]], host + scratch.tokens_offset + j * sizeof(int32_t), sizeof(int32_t));
  }
  std::vector<float> row;
  try {
    if (!scratch.host_rows_of.empty()) row.resize(static_cast<size_t>(vocab));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "sample_rows: cannot allocate a logits row");
  }
  static const std::vector<int32_t> kNone;
  for (size_t j = 0; j < scratch.host_rows_of.size(); ++j) {
    const size_t r = static_cast<size_t>(scratch.host_rows_of[j]);
    std::memcpy(row.data(), scratch.host_rows.data() + j * row.size() * sizeof(float), row.size() * sizeof(float));
    tokens[r] = flashscope::sample(row, rows[r].params, *rows[r].rng, rows[r].recent ? *rows[r].recent : kNone,
                                   rows[r].generated);
  }
  return {};
}

Result<int32_t> sample_row(float* logits, int vocab, const SamplingParams& params, Rng& rng,
                           const std::vector<int32_t>& recent_tokens, SampleScratch& scratch, void* stream,
                           size_t generated) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (logits == nullptr || vocab < 1) return invalid_argument("sample_row: no logits");
  if (sample_candidates(params, vocab) > kMaxSampleCandidates) {
    std::vector<float> host;
    try {
      host.resize(static_cast<size_t>(vocab));
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "sample_row: cannot allocate the logits row");
    }
    // Into pageable memory: returns when the copy has landed.
    FLASHSCOPE_RETURN_IF_ERROR(checked(
        cudaMemcpyAsync(host.data(), logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync of the logits row"));
    FLASHSCOPE_RETURN_IF_ERROR(checked(cudaStreamSynchronize(s), "sample_row: reading the logits row"));
    return flashscope::sample(host, params, rng, recent_tokens, generated);
  }
  const PenaltyPlan plan = plan_penalties(params, recent_tokens, generated, vocab);
  const std::vector<int32_t>& ids = plan.ids;
  // The ids, then their subtrahends.
  FLASHSCOPE_RETURN_IF_ERROR(grow(scratch.penalty_ids, std::max<size_t>(2 * ids.size(), 256) * sizeof(int32_t),
                                  "the sampler's penalty ids"));
  FLASHSCOPE_RETURN_IF_ERROR(grow(scratch.token, 16, "the sampled token"));
  int32_t* dev_ids = static_cast<int32_t*>(scratch.penalty_ids.data());
  float* dev_sub = reinterpret_cast<float*>(dev_ids + ids.size());
  // From pageable memory: staged before the call returns, ordered on s.
  if (!ids.empty()) {
    FLASHSCOPE_RETURN_IF_ERROR(checked(cudaMemcpyAsync(dev_ids, ids.data(), ids.size() * sizeof(int32_t),
                                                       cudaMemcpyHostToDevice, s),
                                       "cudaMemcpyAsync of the penalty ids"));
  }
  if (!plan.sub.empty()) {
    FLASHSCOPE_RETURN_IF_ERROR(checked(cudaMemcpyAsync(dev_sub, plan.sub.data(), plan.sub.size() * sizeof(float),
                                                       cudaMemcpyHostToDevice, s),
                                       "cudaMemcpyAsync of the penalty subtrahends"));
  }
  SampleOp op;
  op.logits = logits;
  op.vocab = vocab;
  op.penalty_ids = dev_ids;
  op.penalty_sub = plan.sub.empty() ? nullptr : dev_sub;
  op.num_penalty = static_cast<int>(ids.size());
  op.num_repeat = plan.num_repeat;
  op.params = params;
  op.uniform = params.temperature > 0.0f ? rng.uniform() : 0.0;
  op.token_out = static_cast<int32_t*>(scratch.token.data());
  const int max_keep = params.temperature > 0.0f ? std::max(sample_candidates(params, vocab), 1) : 0;
  FLASHSCOPE_RETURN_IF_ERROR(
      grow_sample_workspace(scratch.workspace, vocab, 1, max_keep, s, &op.workspace, &op.workspace_bytes));
  FLASHSCOPE_RETURN_IF_ERROR(sample(op, stream));
  int32_t token = -1;
  FLASHSCOPE_RETURN_IF_ERROR(checked(
      cudaMemcpyAsync(&token, scratch.token.data(), sizeof token, cudaMemcpyDeviceToHost, s),
      "cudaMemcpyAsync of the sampled token"));
  FLASHSCOPE_RETURN_IF_ERROR(checked(cudaStreamSynchronize(s), "sampling on the device"));
  return token;
}

#else  // built without CUDA

namespace {
Status no_cuda() { return unsupported("this build of flashscope has no CUDA backend"); }
}  // namespace

Result<CublasHandle> CublasHandle::create() { return no_cuda(); }
CublasHandle::~CublasHandle() = default;
CublasHandle::CublasHandle(CublasHandle&& o) noexcept : handle_(o.handle_) { o.handle_ = nullptr; }
CublasHandle& CublasHandle::operator=(CublasHandle&& o) noexcept {
  handle_ = o.handle_;
  o.handle_ = nullptr;
  return *this;
}
Status CublasHandle::bind(void*, void*, size_t) { return no_cuda(); }
Result<int32_t> sample_row(float*, int, const SamplingParams&, Rng&, const std::vector<int32_t>&, SampleScratch&,
                           void*, size_t) {
  return no_cuda();
}

PinnedBuffer::~PinnedBuffer() = default;
Status PinnedBuffer::allocate(size_t, const char*) { return no_cuda(); }
Status enqueue_sample_rows(float*, int64_t, int, const std::vector<SampleRowInput>&, BatchSampleScratch&, void*) {
  return no_cuda();
}
Status finish_sample_rows(const std::vector<SampleRowInput>&, int, BatchSampleScratch&, int32_t*) { return no_cuda(); }

Status embedding(const EmbeddingOp&, void*) { return no_cuda(); }
Status rms_norm(const RmsNormOp&, void*) { return no_cuda(); }
Status add_rms_norm(const AddRmsNormOp&, void*) { return no_cuda(); }
Status rope_append(const RopeAppendOp&, void*) { return no_cuda(); }
Status swiglu(const SwigluOp&, void*) { return no_cuda(); }
Status gemm_bf16(void*, const GemmOp&) { return no_cuda(); }
bool skinny_gemm_supported(int, int) { return false; }
bool skinny_quant_supported(int, int) { return false; }
bool skinny_rope_heads_supported(int, int) { return false; }
int quant_gemv_max_rows() { return 0; }
void set_quant_gemv_max_rows(int) {}
int quant_gemv_q8_max_rows() { return 0; }
void set_quant_gemv_q8_max_rows(int) {}
int quant_gemv_q8_warps() { return 0; }
void set_quant_gemv_q8_warps(int) {}
bool quant_matrix_type_supported(GgmlType) { return false; }
size_t quant_matrix_tail_bytes() { return 16; }
Status dequantize_bf16(const DeviceMatrix&, int, int, uint16_t*, int64_t, void*) { return no_cuda(); }
Status embedding_rows(const DeviceMatrix&, const int32_t*, int, float*, void*, float) { return no_cuda(); }
Status matmul(void*, const MatmulOp&, void*) { return no_cuda(); }
Status skinny_gemm(const SkinnyGemmOp&, void*) { return no_cuda(); }
Status sample(const SampleOp&, void*) { return no_cuda(); }
size_t sample_workspace_bytes(int, int, int) { return 0; }

#endif

}  // namespace flashscope::cuda
