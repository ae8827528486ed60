// What a sequence's forward pass and a batched decode step share on CUDA
// (cuda_model.hpp): scratch growth, the step block's layout, the enqueue of
// one step, and decode steps as CUDA graphs.
//
// One step of T = seqs · q_len tokens, its inputs at fixed offsets of the
// device step block (bracketed steps where the family has them: ModelConfig):
//
//   x    [T, hidden] fp32 = token_embd[ids] · embed_scale       embedding
//   per layer:
//     xn  [T, hidden] bf16 = rms_norm(x) · attn_norm             rms_norm
//     qkv [T, (H+2KV)·D] fp32 = xn · Wqkvᵀ                       cuBLAS, M = T
//     q [T, H, D] bf16, K/V pool pages at slots[T] =             rope_append: [+ bias],
//       rope(qkv; the layer's table)                             [q/k RMSNorm per head], pairs or halves
//     o [T, H, D] bf16 = paged_attention(q, pool, block tables,  one launch for every
//                        kv_lens, batch = seqs, q_len)           sequence of the step; the layer's window
//     x += o · Woᵀ                                               cuBLAS, beta = 1
//       [gemma3: y = o · Woᵀ; x += rms_norm(y) · post_attn_norm  add_rms_norm, with the next
//        and xn = rms_norm(x) · ffn_norm in one kernel]          norm fused behind it
//     xn = rms_norm(x) · ffn_norm
//     gu  [T, 2·ffn] fp32 = xn · Wguᵀ                            cuBLAS
//     act [T, ffn] bf16 = silu(gate) · up  [gelu_tanh: gemma3]   swiglu
//     x += act · Wdownᵀ                                          cuBLAS, beta = 1
//       [gemma3: y = act · Wdownᵀ; x += rms_norm(y) · post_ffn_norm, next layer's attn_norm into xn]
//   logits [rows, vocab] fp32 = rms_norm(x[rows]) · output_norm · Woutᵀ
//
// RoPE tables: one per distinct (base, scale) of the layers (CudaModel::ropes;
// gemma3 has two), computed on the host in double with Llama 3's frequency
// factors folded in (once per position: cpu::RopeTableCache), so the kernels
// only read angles.
//
// A step of at most kSkinnyRows tokens (a decode step, a small batch) runs
// each layer as four fused few-token GEMMs (cuda::skinny_gemm) around the
// attention instead of nine launches:
//     q, K/V pages = rope(rms_norm(x) · Wqkvᵀ)        kRmsNorm → kRopeAppend (llama: adjacent pairs,
//                                                      no bias or norm; the other families kStore
//                                                      into qkv, then rope_append)
//     x += o · Woᵀ                                     kBf16 → kAccumulate, or kSplitKv:
//                                                      the attention's split-KV partials merged
//                                                      here (no combine launch) [gemma3: kStore into
//                                                      y, its post-norm in the next product (below)]
//     act = swiglu(rms_norm(x) · Wguᵀ)                 kRmsNorm → kSwiglu (kGegluTanh)
//     x += act · Wdownᵀ                                kBf16 → kAccumulate [gemma3: as for O]
// Gemma's post-norms take no launch there (cm.fuse_norms): the O and down
// products store y, and the next product's staging (kAddRmsNorm) adds
// rms_norm(y) · post_weight into the residual before its own pre-norm, the
// residual alternating between x and x_alt; one add_rms_norm after the last
// layer (with the cuBLAS head's norm behind it) puts it back into x.
// Same roundings as the cuBLAS path (bf16 inputs, fp32 sums and residual);
// only the summation order differs. Past 4 tokens cuBLAS wins (its cost is
// flat in M; ours grows with the rows), so larger steps keep it
// (bench/skinny_gemm_sweep.cu; bench/TUNING.md#engine).
//
// Weights kept in their GGUF blocks (CudaModel::quantized): the same step
// with cuda::DeviceMatrix weights. Steps of up to kQuantSkinnyRows tokens run
// the fused GEMMs decoding the blocks in registers (Q, K, V of different
// types as one launch per run of one type); larger steps dequantize each
// matrix in slices into the stream's bf16 scratch for cuBLAS (cuda::matmul).
// The embedding reads its rows from the blocks.
//
// Graphs: a decode step's kernels read their inputs through fixed device
// pointers, so replay = one copy of the step block + cudaGraphLaunch. A
// graph is captured on a decode step whose key (rows, KV bucket, table
// stride, buffer generation, an armed capture's staging) equals the previous
// plain step's: that step loaded every kernel and cuBLAS's choices outside
// the capture. An armed capture's copies of the q rows are nodes of the
// graph (fixed stage rows, read back after the step). A step with
// another key drops the graph and runs plainly. If capture fails the step
// runs plainly and the scratch stops trying (the caller records why).
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "backends/cpu/model_ops.hpp"
#include "backends/cuda/cuda_model.hpp"
#include "attention/cuda/paged_attention_cuda.hpp"

namespace flashscope::model {

TotalStats& totals() {
  static TotalStats t;
  return t;
}

#if FLASHSCOPE_WITH_CUDA

int next_pow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

int kv_bucket(int kv_len, int cap_tokens) { return std::min(std::max(kMinKvBucket, next_pow2(kv_len)), cap_tokens); }

Status cuda_check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return {};
  cudaGetLastError();  // a non-sticky error must not be blamed on the next call
  if (err == cudaErrorMemoryAllocation) return {StatusCode::kOutOfMemory, what + ": out of device memory"};
  return device_error(what + ": " + cudaGetErrorString(err));
}

Result<DeviceBuffer> device_alloc(size_t bytes, const char* what) {
  auto b = DeviceBuffer::allocate(bytes);
  if (!b.ok()) return Status(b.status().code(), std::string(what) + ": " + b.status().message());
  return b;
}

Status poison(void* data, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0) return {};
  return cuda_check(cudaMemsetAsync(data, 0xFF, bytes, stream), std::string("cudaMemsetAsync (poison) of ") + what);
}

DeviceScope::DeviceScope(int device) {
  if (cudaGetDevice(&saved_) != cudaSuccess) {
    cudaGetLastError();
    saved_ = -1;
  }
  if (saved_ != device) status_ = cuda_check(cudaSetDevice(device), "cudaSetDevice");
}

DeviceScope::~DeviceScope() {
  if (saved_ >= 0 && status_.ok()) cudaSetDevice(saved_);
}

void DecodeGraph::drop() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  exec = nullptr;
}

Status StepScratch::init(size_t cublas_workspace_bytes) {
  if (stream == nullptr) {
    FLASHSCOPE_RETURN_IF_ERROR(
        cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  }
  if (cublas_ws.size() < cublas_workspace_bytes) {
    auto ws = device_alloc(cublas_workspace_bytes, "the cuBLAS workspace");
    if (!ws.ok()) return ws.status();
    cublas_ws = std::move(ws).value();
  }
  return {};
}

void StepScratch::release() {
  if (stream != nullptr) cudaStreamSynchronize(stream);
  graph.drop();
  for (DeviceBuffer* b : {&x, &xn, &qkv, &q, &o, &gu, &act, &y, &x_alt, &rope_counters, &logits, &dequant, &attn_ws,
                          &cublas_ws, &step_dev, &sampler.penalty_ids, &sampler.token, &batch_sampler.block, &tap_stage})
    *b = DeviceBuffer();
  rows = 0;
  logit_rows = 0;
  if (stream != nullptr) cudaStreamDestroy(stream);
  stream = nullptr;
}

StepLayout step_layout(int seqs, int tokens, int rope_half, int table_stride, int rope_tables) {
  const size_t S = static_cast<size_t>(seqs), T = static_cast<size_t>(tokens), R = static_cast<size_t>(rope_half);
  const size_t tables = static_cast<size_t>(std::max(rope_tables, 1));
  StepLayout s;
  s.kv_lens = 0;
  s.slots = align_up(4 * S, kStepAlign);
  s.ids = align_up(s.slots + 8 * T, kStepAlign);
  s.rope_stride = 4 * T * R;
  s.cos = align_up(s.ids + 4 * T, kStepAlign);
  s.sin = align_up(s.cos + tables * s.rope_stride, kStepAlign);
  s.tables = align_up(s.sin + tables * s.rope_stride, kStepAlign);
  s.bytes = align_up(s.tables + 4 * S * static_cast<size_t>(table_stride), kStepAlign);
  return s;
}

void pack_rope_tables(const Model::Impl& m, const CudaModel& cm, const int32_t* positions, int n, char* host,
                      const StepLayout& at) {
  if (m.config.rope_dim / 2 <= 0) return;
  for (size_t r = 0; r < cm.ropes.size(); ++r) {
    cm.ropes[r].table->rows(positions, n, reinterpret_cast<float*>(host + at.cos + r * at.rope_stride),
                            reinterpret_cast<float*>(host + at.sin + r * at.rope_stride));
  }
}

Status ensure_rows(const ModelConfig& c, StepScratch& sc, int rows) {
  if (sc.rows >= rows) return {};
  const int r = std::min(kChunk, next_pow2(std::max(rows, 16)));
  const size_t R = static_cast<size_t>(r), H = static_cast<size_t>(c.hidden), F = static_cast<size_t>(c.ffn);
  const size_t qd = static_cast<size_t>(c.n_heads) * c.head_dim;
  const size_t qkv_dim = qd + 2 * static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  const struct {
    DeviceBuffer* buf;
    size_t bytes;
    const char* what;
  } plan[] = {{&sc.x, R * H * 4, "activations x"},   {&sc.xn, R * H * 2, "activations xn"},
              {&sc.qkv, R * qkv_dim * 4, "activations qkv"}, {&sc.q, R * qd * 2, "activations q"},
              {&sc.o, R * qd * 2, "activations o"},  {&sc.gu, R * 2 * F * 4, "activations gate/up"},
              {&sc.act, R * F * 2, "activations act"}, {&sc.y, R * H * 4, "activations y"},
              {&sc.x_alt, c.post_norms ? R * H * 4 : 0, "activations x (second buffer)"}};
  constexpr size_t kBuffers = sizeof(plan) / sizeof(plan[0]);
  DeviceBuffer fresh[kBuffers];
  for (size_t i = 0; i < kBuffers; ++i) {
    auto b = device_alloc(plan[i].bytes, plan[i].what);
    if (!b.ok()) return b.status();
    fresh[i] = std::move(b).value();
    FLASHSCOPE_RETURN_IF_ERROR(poison(fresh[i].data(), plan[i].bytes, sc.stream, plan[i].what));
  }
  for (size_t i = 0; i < kBuffers; ++i) *plan[i].buf = std::move(fresh[i]);
  // kRopeHeads' counts per head: zero once, and every launch leaves them zero.
  const size_t counter_bytes = static_cast<size_t>(c.n_heads + 2 * c.n_kv_heads) * sizeof(int32_t);
  if (sc.rope_counters.size() < counter_bytes) {
    auto b = device_alloc(counter_bytes, "the RoPE head counters");
    if (!b.ok()) return b.status();
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemsetAsync(b->data(), 0, counter_bytes, sc.stream),
                                          "cudaMemsetAsync of the RoPE head counters"));
    sc.rope_counters = std::move(b).value();
  }
  sc.rows = r;
  sc.bump();
  return {};
}

Status ensure_logit_rows(const ModelConfig& c, StepScratch& sc, int rows) {
  if (sc.logit_rows >= rows) return {};
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(c.vocab) * 4;
  auto b = device_alloc(bytes, "the logits buffer");
  if (!b.ok()) return b.status();
  FLASHSCOPE_RETURN_IF_ERROR(poison(b->data(), bytes, sc.stream, "logits"));
  sc.logits = std::move(b).value();
  sc.logit_rows = rows;
  sc.bump();
  return {};
}

Status ensure_step_bytes(StepScratch& sc, size_t bytes) {
  if (sc.step_dev.size() >= bytes && sc.step_host.size() >= bytes) return {};
  // Room to grow: a sequence's chunks and a batch's rows vary from call to call.
  const size_t want = std::max(bytes, 2 * sc.step_dev.size());
  // No copy reads the staging memory now: every call ends with its stream synchronized.
  FLASHSCOPE_RETURN_IF_ERROR(sc.step_host.allocate(want, "the step inputs"));
  auto dev = device_alloc(want, "the step inputs");
  if (!dev.ok()) return dev.status();
  FLASHSCOPE_RETURN_IF_ERROR(poison(dev->data(), want, sc.stream, "the step inputs"));
  sc.step_dev = std::move(dev).value();
  sc.bump();
  return {};
}

bool skinny_step(const ModelConfig& c, const CudaModel& cm, int tokens) {
  if (!cm.skinny || tokens > (cm.quantized ? kQuantSkinnyRows : kSkinnyRows)) return false;
  const int qd = c.n_heads * c.head_dim;
  for (int k : {c.hidden, qd, c.ffn}) {
    if (cm.quantized && !cuda::skinny_quant_supported(tokens, k)) return false;
    if (cm.layer_bf16 && !cuda::skinny_gemm_supported(tokens, k)) return false;
  }
  return true;
}

bool skinny_head(const ModelConfig& c, const CudaModel& cm, int head_rows) {
  return cm.skinny && cm.output.quantized() && head_rows <= kQuantSkinnyRows &&
         cuda::skinny_quant_supported(head_rows, c.hidden);
}

Status ensure_dequant_scratch(const ModelConfig& c, const CudaModel& cm, StepScratch& sc, int tokens, int head_rows) {
  if (!cm.quantized && !cm.output.quantized()) return {};
  const bool layers = cm.quantized && !skinny_step(c, cm, tokens);
  const bool head = head_rows > 0 && cm.output.quantized() && !skinny_head(c, cm, head_rows);
  if (!layers && !head) return {};
  // At least one row of the widest product (k = ffn for the down projection).
  const size_t bytes = std::max(kDequantScratchBytes, size_t{2} * static_cast<size_t>(std::max(c.hidden, c.ffn)));
  if (sc.dequant.size() >= bytes) return {};
  auto b = device_alloc(bytes, "the dequantization scratch");
  if (!b.ok()) return b.status();
  sc.dequant = std::move(b).value();
  sc.bump();
  return {};
}

void follow_pool(const CudaModel& cm, StepScratch& sc) {
  if (sc.pool_generation == cm.pool.generation) return;
  sc.pool_generation = cm.pool.generation;
  sc.bump();
}

namespace {

template <typename T>
T* in_step(const StepScratch& sc, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(sc.step_dev.data()) + offset);
}

// The attention call of layer `layer` for a step of shape v.
PagedAttentionParams attention_params(const ModelConfig& c, const CudaModel& cm, const StepScratch& sc, int layer,
                                      const StepView& v) {
  PagedAttentionParams p;
  p.q = bshd(sc.q.data(), v.q_len, c.n_heads, c.head_dim);  // [seqs, q_len, H, D]
  p.o = bshd(sc.o.data(), v.q_len, c.n_heads, c.head_dim);
  p.k_pages = cm.pool.k_pages(layer);
  p.v_pages = cm.pool.v_pages(layer);
  p.block_tables = in_step<const int32_t>(sc, v.at.tables);
  p.block_table_stride = v.table_stride;
  p.kv_lens = in_step<const int32_t>(sc, v.at.kv_lens);
  p.batch = v.seqs;
  p.q_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.q_len = v.q_len;
  p.head_dim = c.head_dim;
  p.page_size = kPageSize;
  p.max_kv_len = v.mkl;
  p.causal = true;
  p.softmax_scale = c.attn_scale;  // 0: 1/sqrt(head_dim)
  p.window_left = cm.layers[static_cast<size_t>(layer)].window_left;
  p.dtype = DType::kBF16;
  p.device = Device::kCuda;
  p.stream = sc.stream;
  p.workspace = sc.attn_ws.data();
  p.workspace_bytes = sc.attn_ws.size();
  p.num_pages = cm.pool.num_pages();
  return p;
}

}  // namespace

// The plan depends only on shapes, the layer's window and the SM count, so
// the enqueue that follows (captured or not) gets the same one; the
// workspace is the largest any layer's plan asks for.
Status ensure_attention_workspace(const ModelConfig& c, const CudaModel& cm, StepScratch& sc, const StepView& v) {
  size_t bytes = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (l > 0 && cm.layers[static_cast<size_t>(l)].window_left == cm.layers[0].window_left) continue;
    auto plan = plan_paged_attention(attention_params(c, cm, sc, l, v));
    if (!plan.ok()) return plan.status();
    bytes = std::max(bytes, plan->workspace_bytes);
  }
  if (bytes <= sc.attn_ws.size()) return {};
  auto b = device_alloc(bytes, "the split-KV attention workspace");
  if (!b.ok()) return b.status();
  sc.attn_ws = std::move(b).value();
  sc.bump();
  return {};
}

namespace {

// One step's enqueue, in the order of the table at the top of this file:
// the step's buffers and shapes, the path its size takes (the fused
// few-token GEMMs or cuBLAS), and on the fused path the residual stream
// between products (Gemma's post-norms folded into the next product's
// staging). Lives on the stack for one enqueue; every step below launches
// what the one function did, in the same order with the same arguments.
class StepEnqueue {
 public:
  StepEnqueue(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v)
      : c_(m.config),
        cm_(cm),
        sc_(sc),
        v_(v),
        s_(sc.stream),
        n_(v.tokens()),
        H_(c_.hidden),
        F_(c_.ffn),
        qd_(c_.n_heads * c_.head_dim),
        qkv_dim_(qd_ + 2 * c_.n_kv_heads * c_.head_dim),
        x_(static_cast<float*>(sc.x.data())),
        xn_(static_cast<uint16_t*>(sc.xn.data())),
        qkv_(static_cast<float*>(sc.qkv.data())),
        gu_(static_cast<float*>(sc.gu.data())),
        act_(static_cast<uint16_t*>(sc.act.data())),
        y_(static_cast<float*>(sc.y.data())),
        x_cur_(x_) {}

  Status embed() {
    return cuda::embedding_rows(cm_.token_embd, in_step<const int32_t>(sc_, v_.at.ids), n_, x_, s_, c_.embed_scale);
  }
  void choose_path();
  bool skinny() const { return skinny_; }
  Status fused_layer(int l);
  Status blas_layer(int l);
  Status head(int row0, int head_rows, float* logits_out);

 private:
  Status norm(const float* weight, int first_row, int rows);
  Status gemm(const cuda::DeviceMatrix& w, const uint16_t* in, int64_t ldx, float* out, int64_t ldy, int rows,
              bool accumulate);
  Status gemm_runs(const MatrixRuns& runs, float* out, int64_t ldy);
  Status post_norm(const float* post_weight, const float* next_weight);
  float* x_other() const { return x_cur_ == x_ ? static_cast<float*>(sc_.x_alt.data()) : x_; }
  cuda::SkinnyGemmOp fused(cuda::SkinnyInput input, cuda::SkinnyOutput output, const cuda::DeviceMatrix& w, int n_out,
                           int k) const;
  void norm_input(cuda::SkinnyGemmOp& op, const float* norm_weight, bool store) const;
  void settle();
  Status fused_store_runs(const MatrixRuns& runs, const float* norm_weight, float* out, int64_t ldy);
  Status swiglu_rows();
  Status keep_q(int l);
  cuda::RopeAppendOp rope_op(int l) const;
  Status fused_qkv(const CudaModel::Layer& L, const cuda::RopeAppendOp& ra);
  Status fused_attention(int l, const CudaModel::Layer& L);
  Status fused_ffn(const CudaModel::Layer& L);

  const ModelConfig& c_;
  const CudaModel& cm_;
  StepScratch& sc_;
  const StepView& v_;
  void* s_;
  const int n_, H_, F_, qd_, qkv_dim_;
  float* const x_;
  uint16_t* const xn_;
  float* const qkv_;
  float* const gu_;
  uint16_t* const act_;
  float* const y_;

  bool skinny_ = false, rope_in_gemm_ = false, fold_norms_ = false, fold_rope_ = false;
  cuda::SkinnyOutput gate_out_ = cuda::SkinnyOutput::kSwiglu;
  float* x_cur_;                         // the residual stream's buffer now
  const float* pending_post_ = nullptr;  // the post-norm weight of y, not yet added into x_cur_
  // cuBLAS path: whether xn already holds this layer's attention pre-norm
  // (the previous layer's post-FFN norm computed it).
  bool xn_ready_ = false;
};

void StepEnqueue::choose_path() {
  // The fused few-token path (see the top of this file) when every product
  // of the step fits it.
  skinny_ = skinny_step(c_, cm_, n_);
  if (skinny_) totals().fused_step_enqueues.fetch_add(1, std::memory_order_relaxed);
  // Its QKV epilogue rotates adjacent pairs and knows no bias or q/k norm:
  // the other families store the product and run rope_append.
  rope_in_gemm_ = c_.rope_style == RopeStyle::kPairs && !c_.qkv_bias && !c_.qk_norm;
  gate_out_ =
      c_.ffn_activation == FfnActivation::kGeluTanh ? cuda::SkinnyOutput::kGegluTanh : cuda::SkinnyOutput::kSwiglu;

  // Gemma's post-norms in the fused path (cm.fuse_norms): a block's output y
  // is left pending, and the next product's staging (kAddRmsNorm) adds
  // rms_norm(y) · post_weight to the residual before its pre-norm, CTA 0
  // storing the sum into the residual's other buffer (x <-> x_alt: no CTA
  // reads what another writes). A layer's two post-norms then cost no launch
  // of their own; after the last layer one add_rms_norm brings the residual
  // back into x (with the LM head's norm behind it when cuBLAS runs the head).
  fold_norms_ = skinny_ && cm_.fuse_norms && c_.post_norms &&
                sc_.x_alt.size() >= static_cast<size_t>(n_) * static_cast<size_t>(H_) * sizeof(float);
  if (fold_norms_) totals().norm_fused_enqueues.fetch_add(1, std::memory_order_relaxed);
  // The families whose RoPE the QKV epilogue cannot do in registers: the
  // kRopeHeads GEMM runs rope_append on each head once its rows are stored
  // (cm.fuse_rope), where every layer's QKV is one bf16 run.
  fold_rope_ = [&] {
    if (!skinny_ || rope_in_gemm_ || !cm_.fuse_rope || cm_.quantized) return false;
    if (!cuda::skinny_rope_heads_supported(qkv_dim_, c_.head_dim)) return false;
    return sc_.rope_counters.size() >= static_cast<size_t>(c_.n_heads + 2 * c_.n_kv_heads) * sizeof(int32_t);
  }();
  if (fold_rope_) totals().rope_fused_enqueues.fetch_add(1, std::memory_order_relaxed);
}

Status StepEnqueue::norm(const float* weight, int first_row, int rows) {
  cuda::RmsNormOp op;
  op.x = x_ + static_cast<int64_t>(first_row) * H_;
  op.x_stride = H_;
  op.weight = weight;
  op.y = xn_;
  op.y_stride = H_;
  op.rows = rows;
  op.dim = H_;
  op.eps = c_.rms_eps;
  return cuda::rms_norm(op, s_);
}

// Every product of the cuBLAS path goes through cuda::matmul (bf16: cuBLAS;
// quantized: dequantized slices, then cuBLAS).
Status StepEnqueue::gemm(const cuda::DeviceMatrix& w, const uint16_t* in, int64_t ldx, float* out, int64_t ldy,
                         int rows, bool accumulate) {
  cuda::MatmulOp op;
  op.w = &w;
  op.x = in;
  op.ldx = ldx;
  op.y = out;
  op.ldy = ldy;
  op.rows = rows;
  op.accumulate = accumulate;
  op.scratch = static_cast<uint16_t*>(sc_.dequant.data());
  op.scratch_bytes = sc_.dequant.size();
  return cuda::matmul(cm_.cublas.get(), op, s_);
}

Status StepEnqueue::gemm_runs(const MatrixRuns& runs, float* out, int64_t ldy) {
  for (int i = 0; i < runs.count; ++i)
    FLASHSCOPE_RETURN_IF_ERROR(gemm(runs.run[i], xn_, H_, out + runs.begin[i], ldy, n_, false));
  return Status{};
}

// Gemma's post-norm of a block's output y, added into x; with next_weight
// the next block's pre-norm into xn as well.
Status StepEnqueue::post_norm(const float* post_weight, const float* next_weight) {
  cuda::AddRmsNormOp op;
  op.y = y_;
  op.y_stride = H_;
  op.post_weight = post_weight;
  op.x = x_;
  op.x_stride = H_;
  op.next_weight = next_weight;
  op.xn = xn_;
  op.xn_stride = H_;
  op.rows = n_;
  op.dim = H_;
  op.eps = c_.rms_eps;
  return cuda::add_rms_norm(op, s_);
}

cuda::SkinnyGemmOp StepEnqueue::fused(cuda::SkinnyInput input, cuda::SkinnyOutput output, const cuda::DeviceMatrix& w,
                                      int n_out, int k) const {
  cuda::SkinnyGemmOp op;
  op.input = input;
  op.output = output;
  op.matrix = &w;
  op.rows = n_;
  op.n_out = n_out;
  op.k = k;
  op.xf = x_cur_;
  op.ldxf = H_;
  op.eps = c_.rms_eps;
  op.y = x_cur_;
  op.ldy = H_;
  op.act = act_;
  op.ld_act = F_;
  return op;
}

// The pre-norm input of a product that reads the residual, with a pending
// post-norm folded in; `store`: this launch writes the new residual (the
// first of a stacked product's runs; the others read the same inputs).
void StepEnqueue::norm_input(cuda::SkinnyGemmOp& op, const float* norm_weight, bool store) const {
  op.input = cuda::SkinnyInput::kRmsNorm;
  op.xf = x_cur_;
  op.ldxf = H_;
  op.norm_weight = norm_weight;
  if (pending_post_ == nullptr) return;
  op.input = cuda::SkinnyInput::kAddRmsNorm;
  op.res_y = y_;
  op.ld_res_y = H_;
  op.res_weight = pending_post_;
  op.res_out = store ? x_other() : nullptr;
  op.ld_res_out = H_;
}

// After such a product's launches: the sum is the residual.
void StepEnqueue::settle() {
  if (pending_post_ == nullptr) return;
  x_cur_ = x_other();
  pending_post_ = nullptr;
}

// A stacked product's runs stored into out [n, ldy] fp32, the fused
// RMSNorm in front, each run its rows of the whole output (a bf16 product
// is one run: cuda_load keeps a stack with a bf16 part all bf16).
Status StepEnqueue::fused_store_runs(const MatrixRuns& runs, const float* norm_weight, float* out, int64_t ldy) {
  for (int i = 0; i < runs.count; ++i) {
    cuda::SkinnyGemmOp op =
        fused(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kStore, runs.run[i], static_cast<int>(ldy), H_);
    op.row_begin = runs.begin[i];
    norm_input(op, norm_weight, i == 0);
    op.y = out;
    op.ldy = ldy;
    FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(op, s_));
  }
  settle();
  return Status{};
}

Status StepEnqueue::swiglu_rows() {
  cuda::SwigluOp sw;
  sw.gu = gu_;
  sw.gu_stride = 2 * F_;
  sw.out = act_;
  sw.out_stride = F_;
  sw.rows = n_;
  sw.ffn = F_;
  sw.activation =
      c_.ffn_activation == FfnActivation::kGeluTanh ? cuda::GateActivation::kGeluTanh : cuda::GateActivation::kSilu;
  return cuda::swiglu(sw, s_);
}

// An armed capture's copy of layer l's q rows (see StepScratch::tap_block).
Status StepEnqueue::keep_q(int l) {
  if (sc_.tap_block.empty() || sc_.tap_block[static_cast<size_t>(l)] < 0) return {};
  const size_t row_bytes = static_cast<size_t>(qd_) * sizeof(uint16_t);
  char* dst = static_cast<char*>(sc_.tap_stage.data()) +
              static_cast<size_t>(sc_.tap_block[static_cast<size_t>(l)]) * static_cast<size_t>(sc_.rows) * row_bytes;
  return cuda_check(cudaMemcpyAsync(dst, sc_.q.data(), static_cast<size_t>(n_) * row_bytes, cudaMemcpyDeviceToDevice,
                                    sc_.stream),
                    "cudaMemcpyAsync of the captured query rows");
}

// Layer l's RoPE and K/V append over the qkv rows (its RoPE table, the pool's pages).
cuda::RopeAppendOp StepEnqueue::rope_op(int l) const {
  const CudaModel::Layer& L = cm_.layers[static_cast<size_t>(l)];
  cuda::RopeAppendOp ra;
  ra.qkv = qkv_;
  ra.qkv_stride = qkv_dim_;
  ra.rope_cos = in_step<const float>(sc_, v_.at.cos + static_cast<size_t>(L.rope) * v_.at.rope_stride);
  ra.rope_sin = in_step<const float>(sc_, v_.at.sin + static_cast<size_t>(L.rope) * v_.at.rope_stride);
  ra.slots = in_step<const int64_t>(sc_, v_.at.slots);
  ra.q_out = static_cast<uint16_t*>(sc_.q.data());
  ra.q_stride = qd_;
  ra.k_pages = cm_.pool.k_pages(l);
  ra.v_pages = cm_.pool.v_pages(l);
  ra.n = n_;
  ra.q_heads = c_.n_heads;
  ra.kv_heads = c_.n_kv_heads;
  ra.head_dim = c_.head_dim;
  ra.rope_dim = c_.rope_dim;
  ra.page_size = kPageSize;
  ra.num_pages = cm_.pool.num_pages();
  ra.bias = L.bqkv;
  ra.q_norm = L.q_norm;
  ra.k_norm = L.k_norm;
  ra.norm_eps = c_.rms_eps;
  ra.neox = c_.rope_style == RopeStyle::kHalves;
  return ra;
}

// q and the K/V pages from the normed residual: RoPE in the GEMM's epilogue
// (adjacent pairs), in its last CTA per head (kRopeHeads), or rope_append
// after a stored product.
Status StepEnqueue::fused_qkv(const CudaModel::Layer& L, const cuda::RopeAppendOp& ra) {
  if (rope_in_gemm_) {
    for (int i = 0; i < L.qkv.count; ++i) {  // Q, K, V of different types: one launch per run
      cuda::SkinnyGemmOp qkv_op =
          fused(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeAppend, L.qkv.run[i], qkv_dim_, H_);
      qkv_op.row_begin = L.qkv.begin[i];
      norm_input(qkv_op, L.attn_norm, i == 0);
      qkv_op.rope = ra;
      FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(qkv_op, s_));
    }
    settle();
  } else if (fold_rope_) {  // one bf16 run: the GEMM runs rope_append at its end
    cuda::SkinnyGemmOp qkv_op =
        fused(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeHeads, L.qkv.run[0], qkv_dim_, H_);
    norm_input(qkv_op, L.attn_norm, true);
    qkv_op.y = qkv_;
    qkv_op.ldy = qkv_dim_;
    qkv_op.rope = ra;
    qkv_op.rope_counters = static_cast<int*>(sc_.rope_counters.data());
    FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(qkv_op, s_));
    settle();
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(fused_store_runs(L.qkv, L.attn_norm, qkv_, qkv_dim_));
    FLASHSCOPE_RETURN_IF_ERROR(cuda::rope_append(ra, s_));
  }
  return Status{};
}

// The paged attention (split-KV partials left unmerged) and the O product,
// which merges them where it reads o; into y for a post-norm.
Status StepEnqueue::fused_attention(int l, const CudaModel::Layer& L) {
  const auto* o = static_cast<const uint16_t*>(sc_.o.data());
  const bool post_attn = L.post_attn_norm != nullptr;
  const PagedAttentionParams ap = attention_params(c_, cm_, sc_, l, v_);
  FLASHSCOPE_RETURN_IF_ERROR(validate(ap));
  cuda::UnmergedOutput attn;
  FLASHSCOPE_RETURN_IF_ERROR(cuda::paged_attention_unmerged(ap, cm_.gemm_merge_max_splits, &attn));
  cuda::SkinnyGemmOp wo_op = fused(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kAccumulate, L.wo, H_, qd_);
  wo_op.x = o;
  wo_op.ldx = qd_;
  if (attn.num_splits > 1) {  // the split-KV merge happens where o is read
    wo_op.input = cuda::SkinnyInput::kSplitKv;
    wo_op.split_kv = {attn.o_partial, attn.lse_partial, attn.num_splits, c_.n_heads, c_.head_dim, v_.q_len,
                      attn.partial_rows};
  }
  if (post_attn) {
    wo_op.output = cuda::SkinnyOutput::kStore;
    wo_op.y = y_;
  }
  FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(wo_op, s_));
  if (post_attn && fold_norms_) pending_post_ = L.post_attn_norm;
  if (post_attn && !fold_norms_) FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_attn_norm, nullptr));
  return Status{};
}

// The gated FFN: gate and up in one launch with the gate kernel in its
// epilogue (or, of different types, stored and gated apart), then down.
Status StepEnqueue::fused_ffn(const CudaModel::Layer& L) {
  const bool post_ffn = L.post_ffn_norm != nullptr;
  if (L.gate.type == L.up.type) {
    cuda::SkinnyGemmOp gu_op = fused(cuda::SkinnyInput::kRmsNorm, gate_out_, L.gate, F_, H_);
    gu_op.matrix_up = &L.up;
    norm_input(gu_op, L.ffn_norm, true);
    FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(gu_op, s_));
    settle();
  } else {  // gate and up of different types: each into gu, then the gate kernel
    FLASHSCOPE_RETURN_IF_ERROR(fused_store_runs(L.gate_up, L.ffn_norm, gu_, 2 * F_));
    FLASHSCOPE_RETURN_IF_ERROR(swiglu_rows());
  }
  cuda::SkinnyGemmOp down_op = fused(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kAccumulate, L.down, H_, F_);
  down_op.x = act_;
  down_op.ldx = F_;
  if (post_ffn) {
    down_op.output = cuda::SkinnyOutput::kStore;
    down_op.y = y_;
  }
  FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(down_op, s_));
  if (post_ffn && fold_norms_) pending_post_ = L.post_ffn_norm;
  if (post_ffn && !fold_norms_) FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_ffn_norm, nullptr));
  return Status{};
}

// Layer l as four fused few-token GEMMs around the attention.
Status StepEnqueue::fused_layer(int l) {
  const CudaModel::Layer& L = cm_.layers[static_cast<size_t>(l)];
  FLASHSCOPE_RETURN_IF_ERROR(fused_qkv(L, rope_op(l)));
  FLASHSCOPE_RETURN_IF_ERROR(keep_q(l));
  FLASHSCOPE_RETURN_IF_ERROR(fused_attention(l, L));
  return fused_ffn(L);
}

// Layer l as cuBLAS products and the norm, RoPE, attention and gate kernels
// between them; the O and down products go straight into the residual, or
// into y for a post-norm.
Status StepEnqueue::blas_layer(int l) {
  const CudaModel::Layer& L = cm_.layers[static_cast<size_t>(l)];
  const CudaModel::Layer* next = l + 1 < c_.n_layers ? &cm_.layers[static_cast<size_t>(l + 1)] : nullptr;
  const auto* o = static_cast<const uint16_t*>(sc_.o.data());
  const bool post_attn = L.post_attn_norm != nullptr, post_ffn = L.post_ffn_norm != nullptr;
  if (!xn_ready_) FLASHSCOPE_RETURN_IF_ERROR(norm(L.attn_norm, 0, n_));
  FLASHSCOPE_RETURN_IF_ERROR(gemm_runs(L.qkv, qkv_, qkv_dim_));
  FLASHSCOPE_RETURN_IF_ERROR(cuda::rope_append(rope_op(l), s_));
  FLASHSCOPE_RETURN_IF_ERROR(keep_q(l));
  FLASHSCOPE_RETURN_IF_ERROR(paged_attention(attention_params(c_, cm_, sc_, l, v_)));
  if (post_attn) {
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.wo, o, qd_, y_, H_, n_, false));
    FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_attn_norm, L.ffn_norm));
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.wo, o, qd_, x_, H_, n_, true));
    FLASHSCOPE_RETURN_IF_ERROR(norm(L.ffn_norm, 0, n_));
  }
  FLASHSCOPE_RETURN_IF_ERROR(gemm_runs(L.gate_up, gu_, 2 * F_));
  FLASHSCOPE_RETURN_IF_ERROR(swiglu_rows());
  xn_ready_ = false;
  if (post_ffn) {
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.down, act_, F_, y_, H_, n_, false));
    // The next layer's attention pre-norm rides along (the LM head's
    // norm covers other rows than the step's, so the last layer stops here).
    FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_ffn_norm, next != nullptr ? next->attn_norm : nullptr));
    xn_ready_ = next != nullptr;
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.down, act_, F_, x_, H_, n_, true));
  }
  return Status{};
}

// The last pending post-norm back into x, then the logits of rows
// [row0, row0 + head_rows) (none for 0).
Status StepEnqueue::head(int row0, int head_rows, float* logits_out) {
  // A bf16 LM head stays on cuBLAS: it streams 49152 × 576 faster there than
  // through the skinny kernel, norm included (bench/TUNING.md#engine). A
  // quantized one reads 3-4× fewer bytes through the fused kernel (final
  // norm in front) for a few rows.
  const bool blas_head = head_rows > 0 && !skinny_head(c_, cm_, head_rows);
  bool head_normed = false;  // xn rows [row0, row0 + head_rows) hold the head's input
  if (pending_post_ != nullptr) {  // the last post-norm, back into x (the head and kAll's later blocks read x)
    cuda::AddRmsNormOp op;
    op.y = y_;
    op.y_stride = H_;
    op.post_weight = pending_post_;
    op.x = x_;
    op.x_stride = H_;
    op.x_in = x_cur_ == x_ ? nullptr : x_cur_;
    op.x_in_stride = H_;
    op.next_weight = blas_head ? cm_.output_norm : nullptr;
    op.xn = xn_;
    op.xn_stride = H_;
    op.rows = n_;
    op.dim = H_;
    op.eps = c_.rms_eps;
    FLASHSCOPE_RETURN_IF_ERROR(cuda::add_rms_norm(op, s_));
    head_normed = blas_head;
    x_cur_ = x_;
    pending_post_ = nullptr;
  }
  if (head_rows > 0) {
    if (skinny_head(c_, cm_, head_rows)) {
      cuda::SkinnyGemmOp op;
      op.input = cuda::SkinnyInput::kRmsNorm;
      op.output = cuda::SkinnyOutput::kStore;
      op.matrix = &cm_.output;
      op.rows = head_rows;
      op.n_out = c_.vocab;
      op.k = H_;
      op.xf = x_ + static_cast<int64_t>(row0) * H_;
      op.ldxf = H_;
      op.norm_weight = cm_.output_norm;
      op.eps = c_.rms_eps;
      op.y = logits_out;
      op.ldy = c_.vocab;
      return cuda::skinny_gemm(op, s_);
    }
    if (!head_normed) FLASHSCOPE_RETURN_IF_ERROR(norm(cm_.output_norm, row0, head_rows));
    const uint16_t* head_in = head_normed ? xn_ + static_cast<int64_t>(row0) * H_ : xn_;
    FLASHSCOPE_RETURN_IF_ERROR(gemm(cm_.output, head_in, H_, logits_out, c_.vocab, head_rows, false));
  }
  return {};
}

}  // namespace

Status enqueue_step(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v, int row0,
                    int head_rows, float* logits_out) {
  StepEnqueue step(m, cm, sc, v);
  FLASHSCOPE_RETURN_IF_ERROR(step.embed());
  step.choose_path();
  for (int l = 0; l < m.config.n_layers; ++l)
    FLASHSCOPE_RETURN_IF_ERROR(step.skinny() ? step.fused_layer(l) : step.blas_layer(l));
  return step.head(row0, head_rows, logits_out);
}

namespace {

// Captures one decode step of shape v into sc.graph.
Status capture_decode(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v,
                      const GraphKey& key) {
  FLASHSCOPE_RETURN_IF_ERROR(
      cuda_check(cudaStreamBeginCapture(sc.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
  const Status enqueued =
      enqueue_step(m, cm, sc, v, 0, v.tokens(), static_cast<float*>(sc.logits.data()));
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(sc.stream, &g);
  if (!enqueued.ok() || ended != cudaSuccess) {
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();
    return enqueued.ok() ? device_error(std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended))
                         : Status(enqueued.code(), "while capturing: " + enqueued.message());
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(inst, "cudaGraphInstantiate"));
  sc.graph.exec = exec;
  sc.graph.key = key;
  return {};
}

// GraphKey::tap of the step sc is about to run (see StepScratch::tap_block).
Result<uint64_t> tap_key(StepScratch& sc) {
  if (sc.tap_block.empty()) return uint64_t{0};
  if (sc.tap_block != sc.tap_keyed || sc.tap_stage.data() != sc.tap_keyed_stage) {
    try {
      sc.tap_keyed = sc.tap_block;
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "attention capture: cannot allocate");
    }
    sc.tap_keyed_stage = sc.tap_stage.data();
    ++sc.tap_layout;
  }
  return sc.tap_layout;
}

}  // namespace

Result<DecodeRun> run_decode(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v) {
  DecodeRun run;
  GraphKey key;
  key.rows = v.seqs;
  key.bucket = v.mkl;
  key.table_stride = v.table_stride;
  key.generation = sc.generation;
  auto tap = tap_key(sc);
  if (!tap.ok()) return tap.status();
  key.tap = tap.value();
  if (sc.graph.exec != nullptr && !(sc.graph.key == key)) sc.graph.drop();
  if (sc.graph.exec == nullptr && cm.graphs && !sc.graph.failed && sc.graph.warm == key) {
    const Status cap = capture_decode(m, cm, sc, v, key);
    if (cap.ok()) {
      run.captured = true;
    } else {
      sc.graph.failed = true;
      run.capture_error = cap.message();
    }
  }
  if (sc.graph.exec != nullptr) {
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaGraphLaunch(sc.graph.exec, sc.stream), "cudaGraphLaunch (decode step)"));
    run.replayed = true;
    return run;
  }
  FLASHSCOPE_RETURN_IF_ERROR(enqueue_step(m, cm, sc, v, 0, v.tokens(), static_cast<float*>(sc.logits.data())));
  sc.graph.warm = key;
  return run;
}

#endif  // FLASHSCOPE_WITH_CUDA

}  // namespace flashscope::model
