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
// factors folded in, so the kernels only read angles.
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
#include "cuda/paged_attention_cuda.hpp"

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
  const ModelConfig& c = m.config;
  if (c.rope_dim / 2 <= 0) return;
  const float* factors = m.weights.rope_freqs.empty() ? nullptr : m.weights.rope_freqs.data();
  for (size_t r = 0; r < cm.ropes.size(); ++r) {
    cpu::rope_table(positions, n, c.rope_dim, cm.ropes[r].base, cm.ropes[r].scale, factors,
                    reinterpret_cast<float*>(host + at.cos + r * at.rope_stride),
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

Status enqueue_step(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v, int row0,
                    int head_rows, float* logits_out) {
  const ModelConfig& c = m.config;
  void* s = sc.stream;
  const int n = v.tokens();
  const int H = c.hidden, F = c.ffn;
  const int qd = c.n_heads * c.head_dim;
  const int qkv_dim = qd + 2 * c.n_kv_heads * c.head_dim;
  auto* x = static_cast<float*>(sc.x.data());
  auto* xn = static_cast<uint16_t*>(sc.xn.data());
  auto* qkv = static_cast<float*>(sc.qkv.data());
  auto* gu = static_cast<float*>(sc.gu.data());
  auto* act = static_cast<uint16_t*>(sc.act.data());
  auto* y = static_cast<float*>(sc.y.data());

  FLASHSCOPE_RETURN_IF_ERROR(
      cuda::embedding_rows(cm.token_embd, in_step<const int32_t>(sc, v.at.ids), n, x, s, c.embed_scale));

  auto norm = [&](const float* weight, int first_row, int rows) {
    cuda::RmsNormOp op;
    op.x = x + static_cast<int64_t>(first_row) * H;
    op.x_stride = H;
    op.weight = weight;
    op.y = xn;
    op.y_stride = H;
    op.rows = rows;
    op.dim = H;
    op.eps = c.rms_eps;
    return cuda::rms_norm(op, s);
  };
  // Every product goes through cuda::matmul (bf16: cuBLAS; quantized:
  // dequantized slices, then cuBLAS).
  auto gemm = [&](const cuda::DeviceMatrix& w, const uint16_t* in, int64_t ldx, float* out, int64_t ldy, int rows,
                  bool accumulate) {
    cuda::MatmulOp op;
    op.w = &w;
    op.x = in;
    op.ldx = ldx;
    op.y = out;
    op.ldy = ldy;
    op.rows = rows;
    op.accumulate = accumulate;
    op.scratch = static_cast<uint16_t*>(sc.dequant.data());
    op.scratch_bytes = sc.dequant.size();
    return cuda::matmul(cm.cublas.get(), op, s);
  };
  auto gemm_runs = [&](const MatrixRuns& runs, float* out, int64_t ldy) {
    for (int i = 0; i < runs.count; ++i)
      FLASHSCOPE_RETURN_IF_ERROR(gemm(runs.run[i], xn, H, out + runs.begin[i], ldy, n, false));
    return Status{};
  };
  // Gemma's post-norm of a block's output y, added into x; with next_weight
  // the next block's pre-norm into xn as well.
  auto post_norm = [&](const float* post_weight, const float* next_weight) {
    cuda::AddRmsNormOp op;
    op.y = y;
    op.y_stride = H;
    op.post_weight = post_weight;
    op.x = x;
    op.x_stride = H;
    op.next_weight = next_weight;
    op.xn = xn;
    op.xn_stride = H;
    op.rows = n;
    op.dim = H;
    op.eps = c.rms_eps;
    return cuda::add_rms_norm(op, s);
  };

  // The fused few-token path (see the top of this file) when every product
  // of the step fits it.
  const bool skinny = skinny_step(c, cm, n);
  if (skinny) totals().fused_step_enqueues.fetch_add(1, std::memory_order_relaxed);
  // Its QKV epilogue rotates adjacent pairs and knows no bias or q/k norm:
  // the other families store the product and run rope_append.
  const bool rope_in_gemm = c.rope_style == RopeStyle::kPairs && !c.qkv_bias && !c.qk_norm;
  const cuda::SkinnyOutput gate_out =
      c.ffn_activation == FfnActivation::kGeluTanh ? cuda::SkinnyOutput::kGegluTanh : cuda::SkinnyOutput::kSwiglu;

  // Gemma's post-norms in the fused path (cm.fuse_norms): a block's output y
  // is left pending, and the next product's staging (kAddRmsNorm) adds
  // rms_norm(y) · post_weight to the residual before its pre-norm, CTA 0
  // storing the sum into the residual's other buffer (x <-> x_alt: no CTA
  // reads what another writes). A layer's two post-norms then cost no launch
  // of their own; after the last layer one add_rms_norm brings the residual
  // back into x (with the LM head's norm behind it when cuBLAS runs the head).
  const bool fold_norms = skinny && cm.fuse_norms && c.post_norms &&
                          sc.x_alt.size() >= static_cast<size_t>(n) * static_cast<size_t>(H) * sizeof(float);
  if (fold_norms) totals().norm_fused_enqueues.fetch_add(1, std::memory_order_relaxed);
  // The families whose RoPE the QKV epilogue cannot do in registers: the
  // kRopeHeads GEMM runs rope_append on each head once its rows are stored
  // (cm.fuse_rope), where every layer's QKV is one bf16 run.
  const bool fold_rope = [&] {
    if (!skinny || rope_in_gemm || !cm.fuse_rope || cm.quantized) return false;
    if (!cuda::skinny_rope_heads_supported(qkv_dim, c.head_dim)) return false;
    return sc.rope_counters.size() >= static_cast<size_t>(c.n_heads + 2 * c.n_kv_heads) * sizeof(int32_t);
  }();
  if (fold_rope) totals().rope_fused_enqueues.fetch_add(1, std::memory_order_relaxed);
  float* x_cur = x;                     // the residual stream's buffer now
  const float* pending_post = nullptr;  // the post-norm weight of y, not yet added into x_cur
  auto x_other = [&]() { return x_cur == x ? static_cast<float*>(sc.x_alt.data()) : x; };

  auto fused = [&](cuda::SkinnyInput input, cuda::SkinnyOutput output, const cuda::DeviceMatrix& w, int n_out,
                   int k) {
    cuda::SkinnyGemmOp op;
    op.input = input;
    op.output = output;
    op.matrix = &w;
    op.rows = n;
    op.n_out = n_out;
    op.k = k;
    op.xf = x_cur;
    op.ldxf = H;
    op.eps = c.rms_eps;
    op.y = x_cur;
    op.ldy = H;
    op.act = act;
    op.ld_act = F;
    return op;
  };
  // The pre-norm input of a product that reads the residual, with a pending
  // post-norm folded in; `store`: this launch writes the new residual (the
  // first of a stacked product's runs; the others read the same inputs).
  auto norm_input = [&](cuda::SkinnyGemmOp& op, const float* norm_weight, bool store) {
    op.input = cuda::SkinnyInput::kRmsNorm;
    op.xf = x_cur;
    op.ldxf = H;
    op.norm_weight = norm_weight;
    if (pending_post == nullptr) return;
    op.input = cuda::SkinnyInput::kAddRmsNorm;
    op.res_y = y;
    op.ld_res_y = H;
    op.res_weight = pending_post;
    op.res_out = store ? x_other() : nullptr;
    op.ld_res_out = H;
  };
  // After such a product's launches: the sum is the residual.
  auto settle = [&]() {
    if (pending_post == nullptr) return;
    x_cur = x_other();
    pending_post = nullptr;
  };

  // A stacked product's runs stored into out [n, ldy] fp32, the fused
  // RMSNorm in front, each run its rows of the whole output (a bf16 product
  // is one run: cuda_load keeps a stack with a bf16 part all bf16).
  auto fused_store_runs = [&](const MatrixRuns& runs, const float* norm_weight, float* out, int64_t ldy) {
    for (int i = 0; i < runs.count; ++i) {
      cuda::SkinnyGemmOp op = fused(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kStore, runs.run[i],
                                    static_cast<int>(ldy), H);
      op.row_begin = runs.begin[i];
      norm_input(op, norm_weight, i == 0);
      op.y = out;
      op.ldy = ldy;
      FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(op, s));
    }
    settle();
    return Status{};
  };
  auto swiglu_rows = [&]() {
    cuda::SwigluOp sw;
    sw.gu = gu;
    sw.gu_stride = 2 * F;
    sw.out = act;
    sw.out_stride = F;
    sw.rows = n;
    sw.ffn = F;
    sw.activation = c.ffn_activation == FfnActivation::kGeluTanh ? cuda::GateActivation::kGeluTanh
                                                                 : cuda::GateActivation::kSilu;
    return cuda::swiglu(sw, s);
  };

  // An armed capture's copy of layer l's q rows (see StepScratch::tap_block).
  auto keep_q = [&](int l) -> Status {
    if (sc.tap_block.empty() || sc.tap_block[static_cast<size_t>(l)] < 0) return {};
    const size_t row_bytes = static_cast<size_t>(qd) * sizeof(uint16_t);
    char* dst = static_cast<char*>(sc.tap_stage.data()) +
                static_cast<size_t>(sc.tap_block[static_cast<size_t>(l)]) * static_cast<size_t>(sc.rows) * row_bytes;
    return cuda_check(cudaMemcpyAsync(dst, sc.q.data(), static_cast<size_t>(n) * row_bytes, cudaMemcpyDeviceToDevice,
                                      sc.stream),
                      "cudaMemcpyAsync of the captured query rows");
  };

  // cuBLAS path: whether xn already holds this layer's attention pre-norm
  // (the previous layer's post-FFN norm computed it).
  bool xn_ready = false;
  for (int l = 0; l < c.n_layers; ++l) {
    const CudaModel::Layer& L = cm.layers[static_cast<size_t>(l)];
    const CudaModel::Layer* next = l + 1 < c.n_layers ? &cm.layers[static_cast<size_t>(l + 1)] : nullptr;
    cuda::RopeAppendOp ra;
    ra.qkv = qkv;
    ra.qkv_stride = qkv_dim;
    ra.rope_cos = in_step<const float>(sc, v.at.cos + static_cast<size_t>(L.rope) * v.at.rope_stride);
    ra.rope_sin = in_step<const float>(sc, v.at.sin + static_cast<size_t>(L.rope) * v.at.rope_stride);
    ra.slots = in_step<const int64_t>(sc, v.at.slots);
    ra.q_out = static_cast<uint16_t*>(sc.q.data());
    ra.q_stride = qd;
    ra.k_pages = cm.pool.k_pages(l);
    ra.v_pages = cm.pool.v_pages(l);
    ra.n = n;
    ra.q_heads = c.n_heads;
    ra.kv_heads = c.n_kv_heads;
    ra.head_dim = c.head_dim;
    ra.rope_dim = c.rope_dim;
    ra.page_size = kPageSize;
    ra.num_pages = cm.pool.num_pages();
    ra.bias = L.bqkv;
    ra.q_norm = L.q_norm;
    ra.k_norm = L.k_norm;
    ra.norm_eps = c.rms_eps;
    ra.neox = c.rope_style == RopeStyle::kHalves;
    const auto* o = static_cast<const uint16_t*>(sc.o.data());
    // Where the O and down products go: straight into the residual stream,
    // or into y for the post-norm.
    const bool post_attn = L.post_attn_norm != nullptr, post_ffn = L.post_ffn_norm != nullptr;

    if (skinny) {
      if (rope_in_gemm) {
        for (int i = 0; i < L.qkv.count; ++i) {  // Q, K, V of different types: one launch per run
          cuda::SkinnyGemmOp qkv_op = fused(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeAppend,
                                            L.qkv.run[i], qkv_dim, H);
          qkv_op.row_begin = L.qkv.begin[i];
          norm_input(qkv_op, L.attn_norm, i == 0);
          qkv_op.rope = ra;
          FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(qkv_op, s));
        }
        settle();
      } else if (fold_rope) {  // one bf16 run: the GEMM runs rope_append at its end
        cuda::SkinnyGemmOp qkv_op = fused(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeHeads,
                                          L.qkv.run[0], qkv_dim, H);
        norm_input(qkv_op, L.attn_norm, true);
        qkv_op.y = qkv;
        qkv_op.ldy = qkv_dim;
        qkv_op.rope = ra;
        qkv_op.rope_counters = static_cast<int*>(sc.rope_counters.data());
        FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(qkv_op, s));
        settle();
      } else {
        FLASHSCOPE_RETURN_IF_ERROR(fused_store_runs(L.qkv, L.attn_norm, qkv, qkv_dim));
        FLASHSCOPE_RETURN_IF_ERROR(cuda::rope_append(ra, s));
      }
      FLASHSCOPE_RETURN_IF_ERROR(keep_q(l));
      const PagedAttentionParams ap = attention_params(c, cm, sc, l, v);
      FLASHSCOPE_RETURN_IF_ERROR(validate(ap));
      cuda::UnmergedOutput attn;
      FLASHSCOPE_RETURN_IF_ERROR(cuda::paged_attention_unmerged(ap, &attn));
      cuda::SkinnyGemmOp wo_op = fused(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kAccumulate, L.wo, H, qd);
      wo_op.x = o;
      wo_op.ldx = qd;
      if (attn.num_splits > 1) {  // the split-KV merge happens where o is read
        wo_op.input = cuda::SkinnyInput::kSplitKv;
        wo_op.split_kv = {attn.o_partial, attn.lse_partial, attn.num_splits, c.n_heads, c.head_dim, v.q_len,
                          attn.partial_rows};
      }
      if (post_attn) {
        wo_op.output = cuda::SkinnyOutput::kStore;
        wo_op.y = y;
      }
      FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(wo_op, s));
      if (post_attn && fold_norms) pending_post = L.post_attn_norm;
      if (post_attn && !fold_norms) FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_attn_norm, nullptr));
      if (L.gate.type == L.up.type) {
        cuda::SkinnyGemmOp gu_op = fused(cuda::SkinnyInput::kRmsNorm, gate_out, L.gate, F, H);
        gu_op.matrix_up = &L.up;
        norm_input(gu_op, L.ffn_norm, true);
        FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(gu_op, s));
        settle();
      } else {  // gate and up of different types: each into gu, then the gate kernel
        FLASHSCOPE_RETURN_IF_ERROR(fused_store_runs(L.gate_up, L.ffn_norm, gu, 2 * F));
        FLASHSCOPE_RETURN_IF_ERROR(swiglu_rows());
      }
      cuda::SkinnyGemmOp down_op = fused(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kAccumulate, L.down, H, F);
      down_op.x = act;
      down_op.ldx = F;
      if (post_ffn) {
        down_op.output = cuda::SkinnyOutput::kStore;
        down_op.y = y;
      }
      FLASHSCOPE_RETURN_IF_ERROR(cuda::skinny_gemm(down_op, s));
      if (post_ffn && fold_norms) pending_post = L.post_ffn_norm;
      if (post_ffn && !fold_norms) FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_ffn_norm, nullptr));
      continue;
    }

    if (!xn_ready) FLASHSCOPE_RETURN_IF_ERROR(norm(L.attn_norm, 0, n));
    FLASHSCOPE_RETURN_IF_ERROR(gemm_runs(L.qkv, qkv, qkv_dim));
    FLASHSCOPE_RETURN_IF_ERROR(cuda::rope_append(ra, s));
    FLASHSCOPE_RETURN_IF_ERROR(keep_q(l));
    FLASHSCOPE_RETURN_IF_ERROR(paged_attention(attention_params(c, cm, sc, l, v)));
    if (post_attn) {
      FLASHSCOPE_RETURN_IF_ERROR(gemm(L.wo, o, qd, y, H, n, false));
      FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_attn_norm, L.ffn_norm));
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(gemm(L.wo, o, qd, x, H, n, true));
      FLASHSCOPE_RETURN_IF_ERROR(norm(L.ffn_norm, 0, n));
    }
    FLASHSCOPE_RETURN_IF_ERROR(gemm_runs(L.gate_up, gu, 2 * F));
    FLASHSCOPE_RETURN_IF_ERROR(swiglu_rows());
    xn_ready = false;
    if (post_ffn) {
      FLASHSCOPE_RETURN_IF_ERROR(gemm(L.down, act, F, y, H, n, false));
      // The next layer's attention pre-norm rides along (the LM head's
      // norm covers other rows than the step's, so the last layer stops here).
      FLASHSCOPE_RETURN_IF_ERROR(post_norm(L.post_ffn_norm, next != nullptr ? next->attn_norm : nullptr));
      xn_ready = next != nullptr;
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(gemm(L.down, act, F, x, H, n, true));
    }
  }

  // A bf16 LM head stays on cuBLAS: it streams 49152 × 576 faster there than
  // through the skinny kernel, norm included (bench/TUNING.md#engine). A
  // quantized one reads 3-4× fewer bytes through the fused kernel (final
  // norm in front) for a few rows.
  const bool blas_head = head_rows > 0 && !skinny_head(c, cm, head_rows);
  bool head_normed = false;  // xn rows [row0, row0 + head_rows) hold the head's input
  if (pending_post != nullptr) {  // the last post-norm, back into x (the head and kAll's later blocks read x)
    cuda::AddRmsNormOp op;
    op.y = y;
    op.y_stride = H;
    op.post_weight = pending_post;
    op.x = x;
    op.x_stride = H;
    op.x_in = x_cur == x ? nullptr : x_cur;
    op.x_in_stride = H;
    op.next_weight = blas_head ? cm.output_norm : nullptr;
    op.xn = xn;
    op.xn_stride = H;
    op.rows = n;
    op.dim = H;
    op.eps = c.rms_eps;
    FLASHSCOPE_RETURN_IF_ERROR(cuda::add_rms_norm(op, s));
    head_normed = blas_head;
    x_cur = x;
    pending_post = nullptr;
  }
  if (head_rows > 0) {
    if (skinny_head(c, cm, head_rows)) {
      cuda::SkinnyGemmOp op;
      op.input = cuda::SkinnyInput::kRmsNorm;
      op.output = cuda::SkinnyOutput::kStore;
      op.matrix = &cm.output;
      op.rows = head_rows;
      op.n_out = c.vocab;
      op.k = H;
      op.xf = x + static_cast<int64_t>(row0) * H;
      op.ldxf = H;
      op.norm_weight = cm.output_norm;
      op.eps = c.rms_eps;
      op.y = logits_out;
      op.ldy = c.vocab;
      return cuda::skinny_gemm(op, s);
    }
    if (!head_normed) FLASHSCOPE_RETURN_IF_ERROR(norm(cm.output_norm, row0, head_rows));
    const uint16_t* head_in = head_normed ? xn + static_cast<int64_t>(row0) * H : xn;
    FLASHSCOPE_RETURN_IF_ERROR(gemm(cm.output, head_in, H, logits_out, c.vocab, head_rows, false));
  }
  return {};
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
