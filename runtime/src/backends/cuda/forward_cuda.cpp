// The CUDA forward pass of a model (llama, qwen2, qwen3, gemma3: the
// families of ModelConfig) over one sequence's pages of the model's KV pool (cuda_model.hpp has the pool and scratch; cuda_step.cpp
// the step itself; forward_cuda_batch.cpp the batched decode step).
//
// Load (cuda_load): one device allocation. With WeightFormat::kQuantized
// (the default) every matrix of a type the GPU reads in place (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) is copied in its GGUF blocks, so the
// weights take their file's bytes; other matrices (F32, F16, BF16, Q2_K,
// Q3_K: no GPU kernel reads them), and every matrix with kBf16, are
// dequantized on the host (dequantize_rows, the same values the CPU backend
// multiplies by) and rounded to bf16. Q, K, V rows of one device type are
// stacked into one [rows, hidden] run and gate, up likewise, so each is one
// GEMM (a file mixing types has up to three runs; CudaModel's MatrixRuns).
// Norm weights stay fp32. Tied embeddings share token_embd. The families'
// vectors stay fp32 too: Q/K/V biases stacked like the weights
// ([(H + 2·KV)·D]), q/k norms [head_dim], Gemma's post-norms [hidden]. Each
// layer's RoPE table and window are fixed here, and paged attention is asked
// at load whether it runs the model's head_dim and windows (kUnsupported
// with the kernel's own message when not).
//
// A call runs its n new tokens in chunks of at most kChunk, each one step of
// cuda_step.cpp (seqs 1, q_len = the chunk's tokens); the LM head runs on the
// rows whose logits are asked for (kAll: blocks of kLogitRows rows).
//
// Numerics against the CPU backend: weights in their blocks decode to the CPU
// dequantizer's values (bf16 weights: those rounded, 2^-9 relative; a
// many-row step's dequantized slices likewise), GEMM inputs in bf16 instead of
// Q8 blocks, fp32 accumulation; q/k/v and the attention output in bf16 as on
// the CPU. tests/test_model_cuda.cpp holds both against a float64 reference.
//
// Per-step inputs (token ids, slots, RoPE cos/sin from cpu::rope_table in
// double, one table per distinct base of the layers, kv_len, the block table) are packed on the host into pinned memory
// and copied in one cudaMemcpyAsync before the kernels; every kernel reads
// them through fixed device pointers, which is what lets a decode step be a
// CUDA graph (cuda_step.cpp says when one is captured and replayed).
//
// Streams and threads: each sequence has its own non-blocking stream,
// scratch, cuBLAS workspace and graph, so sequences of one model may run on
// several threads. The model's cuBLAS handle is shared: its stream and
// workspace are set per chunk under the model's mutex, held while the
// chunk's work is enqueued (not while it runs). Every call ends with a
// stream synchronize: the host then owns the staging memory again and any
// asynchronous fault is reported by the call that caused it.
//
// Failure leaves the sequence as it was: K/V written past its length are
// never read (its count of tokens moves last) and are overwritten later.
// Sequence::truncate / clear need nothing here: a sequence's pages are its
// own for its lifetime and tokens.size() is its length.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/model_ops.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_model.hpp"
#include "backends/cuda/model_ops_cuda.hpp"
#include "backends/cuda/step_tap.hpp"
#include "flashscope/device.hpp"
#include "flashscope/half.hpp"
#include "util/math.hpp"

namespace flashscope::model {

CudaForwardStats cuda_total_stats() {
  TotalStats& t = totals();
  CudaForwardStats s;
  s.forwards = t.forwards.load();
  s.decode_steps = t.decode_steps.load();
  s.graph_replays = t.graph_replays.load();
  s.graph_captures = t.graph_captures.load();
  s.graph_capture_failures = t.graph_capture_failures.load();
  s.plain_decode_steps = t.plain_decode_steps.load();
  s.batch_steps = t.batch_steps.load();
  s.batch_rows = t.batch_rows.load();
  s.batch_graph_replays = t.batch_graph_replays.load();
  s.batch_graph_captures = t.batch_graph_captures.load();
  s.device_sampled_tokens = t.device_sampled_tokens.load();
  s.host_sampled_tokens = t.host_sampled_tokens.load();
  s.fused_step_enqueues = t.fused_step_enqueues.load();
  s.norm_fused_enqueues = t.norm_fused_enqueues.load();
  s.rope_fused_enqueues = t.rope_fused_enqueues.load();
  std::lock_guard<std::mutex> lock(t.error_mutex);
  s.last_capture_error = t.last_capture_error;
  return s;
}

void count_sample(const SamplingParams& params, int vocab) {
  const bool on_device = cuda::sample_candidates(params, vocab) <= cuda::max_sample_candidates();
  (on_device ? totals().device_sampled_tokens : totals().host_sampled_tokens).fetch_add(1, std::memory_order_relaxed);
}

void record_capture_failure(const std::string& message) {
  totals().graph_capture_failures.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(totals().error_mutex);
  totals().last_capture_error = message;
}

#if FLASHSCOPE_WITH_CUDA

namespace {

// Dequantizes matrix rows in blocks (bounded host memory), rounds to bf16,
// and copies them to dst. cudaMemcpy from pageable memory; the caller
// synchronizes the device before the weights are used.
Status upload_matrix(const Matrix& m, uint16_t* dst) {
  const int64_t rows = m.q.rows, cols = m.q.cols;
  const int64_t block_rows = std::max<int64_t>(1, (int64_t{1} << 20) / cols);
  std::vector<float> f;
  std::vector<uint16_t> h;
  try {
    f.resize(static_cast<size_t>(std::min(rows, block_rows) * cols));
    h.resize(f.size());
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "cannot allocate host staging for '" + m.tensor->name + "'"};
  }
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t nr = std::min(block_rows, rows - r0);
    const int64_t count = nr * cols;
    std::vector<Status> row_status(static_cast<size_t>(nr));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < nr; ++r) {
      row_status[static_cast<size_t>(r)] = dequantize_rows(*m.tensor, m.row0 + r0 + r, 1, f.data() + r * cols);
    }
    for (const Status& s : row_status) {
      if (!s.ok()) return Status(s.code(), "dequantizing '" + m.tensor->name + "': " + s.message());
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) h[static_cast<size_t>(i)] = float_to_bf16(f[static_cast<size_t>(i)]);
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemcpy(dst + r0 * cols, h.data(), static_cast<size_t>(count) * 2,
                                                     cudaMemcpyHostToDevice),
                                          "cudaMemcpy of '" + m.tensor->name + "' to the device"));
  }
  return {};
}

Status upload_floats(const std::vector<float>& v, float* dst, const char* what) {
  return cuda_check(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
                    std::string("cudaMemcpy of ") + what + " to the device");
}

// A layer's Q, K and V biases as one [(H + 2·KV)·D] vector, zeros for a
// missing one; empty when the layer has none.
std::vector<float> stacked_bias(const LayerWeights& L, size_t qd, size_t kvd) {
  if (L.bq.empty() && L.bk.empty() && L.bv.empty()) return {};
  std::vector<float> b(qd + 2 * kvd, 0.0f);
  std::copy(L.bq.begin(), L.bq.end(), b.begin());
  std::copy(L.bk.begin(), L.bk.end(), b.begin() + static_cast<std::ptrdiff_t>(qd));
  std::copy(L.bv.begin(), L.bv.end(), b.begin() + static_cast<std::ptrdiff_t>(qd + kvd));
  return b;
}

// What paged attention says of the model's layers (head_dim, each window,
// the scale) before any weight moves: a shape the kernels cannot run is
// refused at load with their own message, not at the first forward.
Status check_attention(const ModelConfig& c, const std::vector<CudaModel::Layer>& layers) {
  // Never dereferenced: validate and plan read shapes, strides and alignment.
  void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  PagedAttentionParams p;
  p.q = bshd(fake, 1, c.n_heads, c.head_dim);
  p.o = bshd(fake, 1, c.n_heads, c.head_dim);
  p.k_pages = fake;
  p.v_pages = fake;
  p.block_tables = static_cast<const int32_t*>(fake);
  p.block_table_stride = 1;
  p.kv_lens = static_cast<const int32_t*>(fake);
  p.batch = 1;
  p.q_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.q_len = 1;
  p.head_dim = c.head_dim;
  p.page_size = kPageSize;
  p.max_kv_len = kPageSize;
  p.num_pages = 1;
  p.causal = true;
  p.softmax_scale = c.attn_scale;
  p.dtype = DType::kBF16;
  p.device = Device::kCuda;
  for (const CudaModel::Layer& L : layers) {
    p.window_left = L.window_left;
    FLASHSCOPE_RETURN_IF_ERROR(validate(p));
    auto plan = plan_paged_attention(p);
    if (!plan.ok()) return plan.status();
  }
  return {};
}

}  // namespace

Status cuda_check_config(const ModelConfig& c) {
  // What the model kernels take; attention's own limits (head_dim, windows)
  // are asked of paged attention at load (check_attention), in its words.
  if (c.head_dim > cuda::kRopeAppendMaxHeadDim) {
    return unsupported("head_dim " + std::to_string(c.head_dim) + " is above the CUDA RoPE kernel's " +
                       std::to_string(cuda::kRopeAppendMaxHeadDim) + " (use Device::kCpu)");
  }
  return Status::ok_status();
}

namespace {

// What cuda_load refuses before it allocates anything.
Status check_loadable(const Model::Impl& m) {
  if (!cuda_available()) {
    return unsupported("Device::kCuda was requested but no CUDA device is present (or no driver); use Device::kCpu");
  }
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check_config(m.config));
  for (const LayerWeights& L : m.weights.layers) {
    if (!L.bo.empty()) {
      return unsupported("a llama model with an attention output bias runs on the CPU only in this build (use Device::kCpu)");
    }
  }
  return Status::ok_status();
}

// Each layer's RoPE table (one per distinct base and scale; factors: the
// model's rope_freqs or null) and window.
Status make_layers(const ModelConfig& c, const float* factors, CudaModel* cm) {
  try {
    cm->layers.resize(static_cast<size_t>(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerConfig lc = c.layer(l);
      CudaModel::Layer& D = cm->layers[static_cast<size_t>(l)];
      D.window_left = lc.window > 0 ? lc.window - 1 : -1;  // keys (p − window, p]
      auto same = [&](const CudaModel::Rope& r) { return r.base == lc.rope_base && r.scale == lc.rope_scale; };
      auto it = std::find_if(cm->ropes.begin(), cm->ropes.end(), same);
      if (it == cm->ropes.end()) {
        auto table = std::make_shared<cpu::RopeTableCache>(c.rope_dim, lc.rope_base, lc.rope_scale, factors);
        it = cm->ropes.insert(cm->ropes.end(), CudaModel::Rope{lc.rope_base, lc.rope_scale, std::move(table)});
      }
      D.rope = static_cast<int>(it - cm->ropes.begin());
    }
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the CUDA model");
  }
  return Status::ok_status();
}

// Where each tensor goes in the one weight allocation: matrices the GPU
// reads in place keep their GGUF bytes (WeightFormat::kQuantized), the rest
// are dequantized to bf16. Q, K, V rows (gate, up) of one device type are
// stacked into one run, so each run is one product. Holds pointers into
// itself and the CudaModel: planned and uploaded in place.
struct WeightPlan {
  static constexpr size_t kNone = ~size_t{0};  // an optional vector the family lacks

  // A matrix's place: offset in the allocation, filled in as a DeviceMatrix once it exists.
  struct Piece {
    const Matrix* src = nullptr;
    size_t at = 0;
    cuda::DeviceMatrix* dst = nullptr;  // the view of this matrix alone
  };
  struct Run {
    size_t at = 0;
    cuda::DeviceMatrix* dst = nullptr;
  };
  struct LayerOffsets {
    size_t attn_norm, ffn_norm;
    size_t bqkv, q_norm, k_norm, post_attn_norm, post_ffn_norm;
    cuda::DeviceMatrix q, k, v;  // placeholders for the views place_runs fills
  };

  bool keep_blocks = false;
  bool tied = false;
  // Matrices expanded to bf16 although their type is read in place: the
  // parts of a stacked product that also has a bf16 part (the bf16 kernels
  // read a product whole, not a run of its rows).
  std::vector<const Matrix*> forced_bf16;
  size_t total = 0;
  std::vector<Piece> pieces;
  std::vector<Run> runs;
  std::vector<LayerOffsets> lo;
  std::vector<std::vector<float>> biases;
  size_t out_norm_at = 0;

  GgmlType device_type(const Matrix& mat) const {
    const bool forced = std::find(forced_bf16.begin(), forced_bf16.end(), &mat) != forced_bf16.end();
    return keep_blocks && !forced && cuda::quant_matrix_type_supported(mat.q.type) ? mat.q.type : GgmlType::kBF16;
  }
  int64_t device_row_bytes(const Matrix& mat) const {
    return device_type(mat) == GgmlType::kBF16 ? mat.q.cols * 2 : static_cast<int64_t>(mat.q.row_bytes);
  }
  size_t reserve(size_t bytes) {
    const size_t at = align_up(total, kAlign);
    total = at + bytes;
    return at;
  }
  size_t reserve_floats(const std::vector<float>& v) { return v.empty() ? kNone : reserve(v.size() * 4); }
  void place(const Matrix& mat, cuda::DeviceMatrix* dst, size_t at) {
    dst->type = device_type(mat);
    dst->rows = static_cast<int>(mat.q.rows);
    dst->cols = static_cast<int>(mat.q.cols);
    dst->row_bytes = device_row_bytes(mat);
    pieces.push_back({&mat, at, dst});
  }
  void place_alone(const Matrix& mat, cuda::DeviceMatrix* dst) {
    place(mat, dst, reserve(static_cast<size_t>(mat.q.rows * device_row_bytes(mat))));
  }
  // parts stacked in order; views[i] (may be null) receives part i alone.
  void place_runs(std::vector<const Matrix*> parts, std::vector<cuda::DeviceMatrix*> views, MatrixRuns* mr) {
    bool any_bf16 = false, any_blocks = false;
    for (const Matrix* p : parts) (device_type(*p) == GgmlType::kBF16 ? any_bf16 : any_blocks) = true;
    if (any_bf16 && any_blocks) forced_bf16.insert(forced_bf16.end(), parts.begin(), parts.end());
    mr->count = 0;
    int row = 0;
    for (size_t i = 0; i < parts.size();) {
      size_t j = i;
      int64_t rows = 0;
      while (j < parts.size() && device_type(*parts[j]) == device_type(*parts[i])) rows += parts[j++]->q.rows;
      const int64_t rb = device_row_bytes(*parts[i]);
      size_t at = reserve(static_cast<size_t>(rows * rb));
      cuda::DeviceMatrix& r = mr->run[mr->count];
      r.type = device_type(*parts[i]);
      r.rows = static_cast<int>(rows);
      r.cols = static_cast<int>(parts[i]->q.cols);
      r.row_bytes = rb;
      mr->begin[mr->count] = row;
      runs.push_back({at, &r});
      ++mr->count;
      for (; i < j; ++i) {
        place(*parts[i], views[i], at);
        at += static_cast<size_t>(parts[i]->q.rows * rb);
        row += static_cast<int>(parts[i]->q.rows);
      }
    }
  }
};

// Every matrix and vector of m's weights placed in *plan, in upload order;
// cm's matrices and runs described (their data pointers come with the upload).
Status plan_weights(const Model::Impl& m, CudaModel* cm, WeightPlan* plan) {
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  plan->keep_blocks = m.options.weights == WeightFormat::kQuantized;
  const size_t H = static_cast<size_t>(c.hidden);
  const size_t qd = static_cast<size_t>(c.n_heads) * c.head_dim, kvd = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  plan->tied = c.tied_embeddings || w.output.tensor == w.token_embd.tensor;
  plan->lo.resize(static_cast<size_t>(c.n_layers));
  plan->biases.resize(plan->lo.size());
  plan->place_alone(w.token_embd, &cm->token_embd);
  for (size_t l = 0; l < plan->lo.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    CudaModel::Layer& D = cm->layers[l];
    WeightPlan::LayerOffsets& o = plan->lo[l];
    plan->place_runs({&L.wq, &L.wk, &L.wv}, {&o.q, &o.k, &o.v}, &D.qkv);
    plan->place_alone(L.wo, &D.wo);
    plan->place_runs({&L.gate, &L.up}, {&D.gate, &D.up}, &D.gate_up);
    plan->place_alone(L.down, &D.down);
    o.attn_norm = plan->reserve(H * 4);
    o.ffn_norm = plan->reserve(H * 4);
    try {
      plan->biases[l] = stacked_bias(L, qd, kvd);
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "cannot allocate the Q/K/V biases");
    }
    o.bqkv = plan->reserve_floats(plan->biases[l]);
    o.q_norm = plan->reserve_floats(L.q_norm);
    o.k_norm = plan->reserve_floats(L.k_norm);
    o.post_attn_norm = plan->reserve_floats(L.post_attn_norm);
    o.post_ffn_norm = plan->reserve_floats(L.post_ffn_norm);
  }
  plan->out_norm_at = plan->reserve(H * 4);
  if (!plan->tied) plan->place_alone(w.output, &cm->output);
  // The kernels' word loads of 2-byte-aligned blocks may read past the last row.
  plan->total += cuda::quant_matrix_tail_bytes();
  return Status::ok_status();
}

// The plan's one allocation, every matrix uploaded into it (blocks as they
// are, the rest as bf16), then the norms and the family's optional vectors.
Status upload_weights(const Model::Impl& m, CudaModel* cm, const WeightPlan& plan) {
  const Weights& w = m.weights;
  auto buf = device_alloc(plan.total, plan.keep_blocks ? "the model's weights" : "the model's bf16 weights");
  if (!buf.ok()) return buf.status();
  cm->weights = std::move(buf).value();
  cm->weight_bytes = plan.total;
  char* base = static_cast<char*>(cm->weights.data());
  auto f32_at = [&](size_t off) { return reinterpret_cast<float*>(base + off); };

  for (const WeightPlan::Run& r : plan.runs) r.dst->data = base + r.at;
  // quantized: some layer matrix is in blocks (the step rules of kQuantSkinnyRows);
  // layer_bf16: some is bf16 (the bf16 kernel's limits apply too).
  cm->quantized = false;
  cm->layer_bf16 = false;
  for (const WeightPlan::Piece& p : plan.pieces) {
    p.dst->data = base + p.at;
    const bool layer_matrix = p.src != &w.token_embd && p.src != &w.output;
    if (layer_matrix) (p.dst->quantized() ? cm->quantized : cm->layer_bf16) = true;
    if (p.dst->quantized()) {
      FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemcpy(base + p.at, p.src->q.data, p.dst->bytes(),
                                                       cudaMemcpyHostToDevice),
                                            "cudaMemcpy of '" + p.src->tensor->name + "' to the device"));
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(*p.src, reinterpret_cast<uint16_t*>(base + p.at)));
    }
  }
  for (size_t l = 0; l < plan.lo.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    CudaModel::Layer& D = cm->layers[l];
    const WeightPlan::LayerOffsets& o = plan.lo[l];
    FLASHSCOPE_RETURN_IF_ERROR(upload_floats(L.attn_norm, f32_at(o.attn_norm), "attn_norm"));
    FLASHSCOPE_RETURN_IF_ERROR(upload_floats(L.ffn_norm, f32_at(o.ffn_norm), "ffn_norm"));
    D.attn_norm = f32_at(o.attn_norm);
    D.ffn_norm = f32_at(o.ffn_norm);
    const struct {
      const std::vector<float>& host;
      size_t at;
      const float** dst;
      const char* what;
    } optional[] = {{plan.biases[l], o.bqkv, &D.bqkv, "the Q/K/V biases"},
                    {L.q_norm, o.q_norm, &D.q_norm, "attn_q_norm"},
                    {L.k_norm, o.k_norm, &D.k_norm, "attn_k_norm"},
                    {L.post_attn_norm, o.post_attn_norm, &D.post_attn_norm, "post_attention_norm"},
                    {L.post_ffn_norm, o.post_ffn_norm, &D.post_ffn_norm, "post_ffw_norm"}};
    for (const auto& v : optional) {
      if (v.at == WeightPlan::kNone) continue;
      FLASHSCOPE_RETURN_IF_ERROR(upload_floats(v.host, f32_at(v.at), v.what));
      *v.dst = f32_at(v.at);
    }
  }
  FLASHSCOPE_RETURN_IF_ERROR(upload_floats(w.output_norm, f32_at(plan.out_norm_at), "output_norm"));
  if (plan.tied) cm->output = cm->token_embd;
  cm->output_norm = f32_at(plan.out_norm_at);
  // A pageable cudaMemcpy may return before its DMA lands; the sequences'
  // streams do not wait for the legacy stream.
  return cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the weight upload");
}

// cuBLAS and its workspace for this device, and the switches the
// environment sets (FLASHSCOPE_CUDA_*).
Status start_cublas_and_switches(CudaModel* cm) {
  auto handle = cuda::CublasHandle::create();
  if (!handle.ok()) return handle.status();
  cm->cublas = std::move(handle).value();
  int cc_major = 0;
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, cm->device), "cudaDeviceGetAttribute"));
  // cuBLAS's recommended workspace: 32 MiB on Hopper and later, 4 MiB before.
  cm->cublas_workspace_bytes = cc_major >= 9 ? (size_t{32} << 20) : (size_t{4} << 20);
  const char* graphs = std::getenv("FLASHSCOPE_CUDA_GRAPHS");
  cm->graphs = !(graphs != nullptr && std::strcmp(graphs, "0") == 0);
  const char* skinny = std::getenv("FLASHSCOPE_CUDA_SKINNY");
  cm->skinny = !(skinny != nullptr && std::strcmp(skinny, "0") == 0);
  const char* fuse_norms = std::getenv("FLASHSCOPE_CUDA_FUSE_NORMS");
  cm->fuse_norms = !(fuse_norms != nullptr && std::strcmp(fuse_norms, "0") == 0);
  // Opt-in (=1): folding q/k-norm and RoPE into the QKV GEMM measured slower
  // than its own launch (bench/TUNING.md, "Decode-step fusion").
  const char* fuse_rope = std::getenv("FLASHSCOPE_CUDA_FUSE_ROPE");
  cm->fuse_rope = fuse_rope != nullptr && std::strcmp(fuse_rope, "1") == 0;
  if (const char* merge = std::getenv("FLASHSCOPE_CUDA_GEMM_MERGE_SPLITS"); merge != nullptr && *merge != '\0')
    cm->gemm_merge_max_splits = std::atoi(merge);
  return Status::ok_status();
}

}  // namespace

Result<std::shared_ptr<CudaModel>> cuda_load(const Model::Impl& m) {
  FLASHSCOPE_RETURN_IF_ERROR(check_loadable(m));
  std::shared_ptr<CudaModel> cm;
  try {
    cm = std::make_shared<CudaModel>();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the CUDA model");
  }
  FLASHSCOPE_RETURN_IF_ERROR(
      make_layers(m.config, m.weights.rope_freqs.empty() ? nullptr : m.weights.rope_freqs.data(), cm.get()));
  FLASHSCOPE_RETURN_IF_ERROR(check_attention(m.config, cm->layers));
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&cm->device), "cudaGetDevice"));
  WeightPlan plan;
  FLASHSCOPE_RETURN_IF_ERROR(plan_weights(m, cm.get(), &plan));
  FLASHSCOPE_RETURN_IF_ERROR(upload_weights(m, cm.get(), plan));
  FLASHSCOPE_RETURN_IF_ERROR(start_cublas_and_switches(cm.get()));
  return cm;
}

CudaState::~CudaState() {
  std::unique_lock<std::mutex> lock;
  const std::shared_ptr<CudaModel> cm = model.lock();
  if (cm) lock = std::unique_lock<std::mutex>(cm->mutex);
  scratch.release();  // waits for this sequence's stream: nothing reads its pages after this
  if (cm && kv_seq >= 0) pool_give_back(*cm, kv_seq);
}

Status settle_sequence(CudaState& st) {
  if (!st.unsettled) return {};
  st.unsettled = false;
  return cuda_check(cudaStreamSynchronize(st.scratch.stream), "forward on the device");
}

namespace {

void count(CudaState& st, uint64_t CudaForwardStats::*field, std::atomic<uint64_t> TotalStats::*total) {
  ++(st.stats.*field);
  (totals().*total).fetch_add(1, std::memory_order_relaxed);
}

// Packs one chunk's inputs into the host staging block at layout sl: kv_len,
// the slots of cache positions [first, first + n), ids, RoPE tables, the
// sequence's block table.
void pack_chunk(const Model::Impl& m, const CudaModel& cm, const CudaState& st, const StepLayout& sl, int first,
                int n, const int32_t* tokens, const int32_t* positions) {
  char* h = st.scratch.step_host.data();
  const int32_t kv_len = first + n;
  std::memcpy(h + sl.kv_lens, &kv_len, sizeof kv_len);
  auto* slots = reinterpret_cast<int64_t*>(h + sl.slots);
  for (int i = 0; i < n; ++i) slots[i] = st.slot(first + i);
  std::memcpy(h + sl.ids, tokens, static_cast<size_t>(n) * sizeof(int32_t));
  pack_rope_tables(m, cm, positions, n, h, sl);
  std::memcpy(h + sl.tables, st.pages.data(), st.pages.size() * sizeof(int32_t));
}

// All chunks of one call.
Status run_chunks(const Model::Impl& m, CudaModel& cm, CudaState& st, const int32_t* tokens, const int32_t* positions,
                  int n, int cached, LogitsMode mode, std::vector<float>* logits) {
  const ModelConfig& c = m.config;
  StepScratch& sc = st.scratch;
  const int V = c.vocab;
  FLASHSCOPE_RETURN_IF_ERROR(settle_sequence(st));  // the staging block is the host's again
  st.last_logits_row = -1;
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const int cn = std::min(kChunk, n - c0);
    const bool last_chunk = c0 + cn == n;
    int row0 = cn;  // first row whose logits this chunk produces
    if (mode == LogitsMode::kAll) row0 = 0;
    if (mode == LogitsMode::kLast && last_chunk) row0 = cn - 1;
    const int out_rows = cn - row0;
    const int kv_len = cached + c0 + cn;
    const bool decode = n == 1 && out_rows == 1;
    StepView v;
    v.seqs = 1;
    v.q_len = cn;
    v.table_stride = st.max_pages;
    v.mkl = decode ? kv_bucket(kv_len, st.max_pages * kPageSize) : kv_len;
    v.at = step_layout(1, cn, c.rope_dim / 2, st.max_pages, static_cast<int>(cm.ropes.size()));

    // Held while this chunk allocates and enqueues (not while it runs): the
    // handle's stream and workspace are this chunk's, and no other thread
    // allocates, frees or moves the pool while a step is being captured.
    std::unique_lock<std::mutex> lock(cm.mutex);
    follow_pool(cm, sc);
    FLASHSCOPE_RETURN_IF_ERROR(ensure_rows(c, sc, cn));
    if (out_rows > 0) FLASHSCOPE_RETURN_IF_ERROR(ensure_logit_rows(c, sc, std::min(out_rows, kLogitRows)));
    FLASHSCOPE_RETURN_IF_ERROR(ensure_step_bytes(sc, v.at.bytes));
    FLASHSCOPE_RETURN_IF_ERROR(ensure_attention_workspace(c, cm, sc, v));
    FLASHSCOPE_RETURN_IF_ERROR(ensure_dequant_scratch(c, cm, sc, cn, std::min(out_rows, kLogitRows)));

    StepTap tap(sc);
    if (st.q_tap) FLASHSCOPE_RETURN_IF_ERROR(tap.arm(c, *st.q_tap));

    pack_chunk(m, cm, st, v.at, cached + c0, cn, tokens + c0, positions + c0);
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
        cudaMemcpyAsync(sc.step_dev.data(), sc.step_host.data(), v.at.bytes, cudaMemcpyHostToDevice, sc.stream),
        "cudaMemcpyAsync of the step inputs"));

    FLASHSCOPE_RETURN_IF_ERROR(cm.cublas.bind(sc.stream, sc.cublas_ws.data(), sc.cublas_ws.size()));
    if (decode) {
      count(st, &CudaForwardStats::decode_steps, &TotalStats::decode_steps);
      auto run = run_decode(m, cm, sc, v);
      if (!run.ok()) return run.status();
      if (run->captured) count(st, &CudaForwardStats::graph_captures, &TotalStats::graph_captures);
      if (!run->capture_error.empty()) {
        ++st.stats.graph_capture_failures;
        st.stats.last_capture_error = run->capture_error;
        record_capture_failure(run->capture_error);
      }
      if (run->replayed) {
        count(st, &CudaForwardStats::graph_replays, &TotalStats::graph_replays);
      } else {
        count(st, &CudaForwardStats::plain_decode_steps, &TotalStats::plain_decode_steps);
      }
    } else {
      const int first_rows = std::min(out_rows, kLogitRows);
      FLASHSCOPE_RETURN_IF_ERROR(
          enqueue_step(m, cm, sc, v, row0, first_rows, static_cast<float*>(sc.logits.data())));
    }
    if (st.q_tap) {
      FLASHSCOPE_RETURN_IF_ERROR(tap.fetch(cn));
      FLASHSCOPE_RETURN_IF_ERROR(tap.keep(c, *st.q_tap, cached + c0, 0, cn));
    }
    // Logits: the first block of rows is in sc.logits; kAll's further
    // blocks reuse the buffer after each block's copy has landed (a copy
    // into pageable memory returns when it is done).
    for (int b0 = 0; b0 < out_rows; b0 += kLogitRows) {
      const int nb = std::min(kLogitRows, out_rows - b0);
      if (b0 > 0) {
        cuda::RmsNormOp op;
        op.x = static_cast<const float*>(sc.x.data()) + static_cast<int64_t>(row0 + b0) * c.hidden;
        op.x_stride = c.hidden;
        op.weight = cm.output_norm;
        op.y = static_cast<uint16_t*>(sc.xn.data());
        op.y_stride = c.hidden;
        op.rows = nb;
        op.dim = c.hidden;
        op.eps = c.rms_eps;
        FLASHSCOPE_RETURN_IF_ERROR(cuda::rms_norm(op, sc.stream));
        cuda::MatmulOp g;
        g.w = &cm.output;
        g.x = static_cast<const uint16_t*>(sc.xn.data());
        g.ldx = c.hidden;
        g.y = static_cast<float*>(sc.logits.data());
        g.ldy = V;
        g.rows = nb;
        g.scratch = static_cast<uint16_t*>(sc.dequant.data());
        g.scratch_bytes = sc.dequant.size();
        FLASHSCOPE_RETURN_IF_ERROR(cuda::matmul(cm.cublas.get(), g, sc.stream));
      }
      if (logits != nullptr) {
        const size_t out_row = mode == LogitsMode::kAll ? static_cast<size_t>(c0 + b0) : 0;
        FLASHSCOPE_RETURN_IF_ERROR(
            cuda_check(cudaMemcpyAsync(logits->data() + out_row * static_cast<size_t>(V), sc.logits.data(),
                                       static_cast<size_t>(nb) * static_cast<size_t>(V) * sizeof(float),
                                       cudaMemcpyDeviceToHost, sc.stream),
                       "cudaMemcpyAsync of the logits to the host"));
      }
      if (last_chunk && b0 + nb == out_rows) st.last_logits_row = nb - 1;
    }
    lock.unlock();
    // The host reuses the staging block for the next chunk; and a fault of
    // any kernel above is this call's. Except for logits left on the device
    // for the sampler (CudaState::unsettled): its wait ends this call's work.
    if (last_chunk && mode == LogitsMode::kLast && logits == nullptr) {
      st.unsettled = true;
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(sc.stream), "forward on the device"));
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Sequence::State>> cuda_new_state(const Model::Impl& m, int capacity) {
  const ModelConfig& c = m.config;
  if (!m.cuda) return invalid_argument("internal: the model has no CUDA side");
  CudaModel& cm = *m.cuda;
  DeviceScope device(cm.device);
  FLASHSCOPE_RETURN_IF_ERROR(device.status());
  auto st = std::unique_ptr<CudaState>(new (std::nothrow) CudaState());
  if (!st) return Status(StatusCode::kOutOfMemory, "cannot allocate a sequence");
  // No allocation while another thread captures a decode step, and the pool
  // is the model's. (Declared after st: on failure st's destructor, which
  // takes the lock to give pages back, runs after this unlocks.)
  std::lock_guard<std::mutex> lock(cm.mutex);
  st->model = m.cuda;
  st->owner = &m;
  st->capacity = capacity;
  st->n_layers = c.n_layers;
  st->max_pages = ceil_div(capacity, kPageSize);
  try {
    st->tokens.reserve(static_cast<size_t>(capacity));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the token list");
  }
  FLASHSCOPE_RETURN_IF_ERROR(st->scratch.init(cm.cublas_workspace_bytes));
  auto seq = pool_take(cm, c, capacity, st->scratch.stream);
  if (!seq.ok()) {
    return Status(seq.status().code(), "KV cache of " + std::to_string(capacity) + " tokens: " +
                                           seq.status().message());
  }
  st->kv_seq = seq.value();
  try {
    // A copy: the cache's own table may move as other sequences come and go.
    st->pages = cm.pool.cache.block_table(st->kv_seq);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the block table");
  }
  st->page_bytes = static_cast<size_t>(c.n_kv_heads) * kPageSize * static_cast<size_t>(c.head_dim) * 2;
  // The poisoned pages are this sequence's before any other stream can read them.
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(st->scratch.stream), "creating a CUDA sequence"));
  return std::unique_ptr<Sequence::State>(std::move(st));
}

Status cuda_forward(const Model::Impl& m, Sequence::State& state, const int32_t* tokens, const int32_t* positions,
                    int n, LogitsMode mode, std::vector<float>* logits) {
  auto& st = static_cast<CudaState&>(state);
  CudaModel& cm = *m.cuda;
  const ModelConfig& c = m.config;
  DeviceScope device(cm.device);
  FLASHSCOPE_RETURN_IF_ERROR(device.status());
  const int cached = static_cast<int>(st.tokens.size());
  if (mode != LogitsMode::kNone && logits != nullptr) {
    const size_t rows = mode == LogitsMode::kAll ? static_cast<size_t>(n) : 1;
    try {
      logits->resize(rows * static_cast<size_t>(c.vocab));
    } catch (const std::bad_alloc&) {
      return {StatusCode::kOutOfMemory, "forward: cannot allocate logits"};
    }
  }
  const Status run = run_chunks(m, cm, st, tokens, positions, n, cached, mode, logits);
  if (!run.ok()) {
    st.unsettled = false;
    // Work enqueued before the failure may still run: let it finish before
    // the host touches the staging memory again (its own error is the one
    // already reported, or a consequence of it).
    cudaStreamSynchronize(st.scratch.stream);
    cudaGetLastError();
    st.last_logits_row = -1;
    return run;
  }
  st.tokens.insert(st.tokens.end(), tokens, tokens + n);  // within the reserved capacity
  count(st, &CudaForwardStats::forwards, &TotalStats::forwards);
  return {};
}

CudaForwardStats cuda_stats(const Sequence::State& state) {
  const auto* st = dynamic_cast<const CudaState*>(&state);
  return st != nullptr ? st->stats : CudaForwardStats{};
}

Result<int32_t> cuda_sample_last(const Model::Impl& m, Sequence::State& state, const SamplingParams& params, Rng& rng,
                                 const std::vector<int32_t>& recent_tokens, size_t generated) {
  auto* st = dynamic_cast<CudaState*>(&state);
  if (st == nullptr || !m.cuda) return invalid_argument("cuda_sample_last: not a CUDA sequence");
  if (st->last_logits_row < 0) return invalid_argument("cuda_sample_last: no logits are pending on the device");
  DeviceScope device(m.cuda->device);
  FLASHSCOPE_RETURN_IF_ERROR(device.status());
  const int V = m.config.vocab;
  float* row = static_cast<float*>(st->scratch.logits.data()) + static_cast<size_t>(st->last_logits_row) * V;
  st->last_logits_row = -1;  // the sampler works in place: a row is sampled once
  auto token = cuda::sample_row(row, V, params, rng, recent_tokens, st->scratch.sampler, st->scratch.stream,
                                generated);
  if (token.ok()) {
    st->unsettled = false;  // sample_row waited for the stream, the forward's work before its own
    count_sample(params, V);
    return token;
  }
  const Status settled = settle_sequence(*st);  // it may have refused before waiting
  if (!settled.ok()) return Status(settled.code(), settled.message() + " (before sampling: " + token.status().message() + ")");
  return token;
}

uint64_t cuda_weight_bytes(const Model::Impl& m) { return m.cuda ? m.cuda->weight_bytes : 0; }

#else  // built without CUDA

struct CudaModel {};

uint64_t cuda_weight_bytes(const Model::Impl&) { return 0; }

Result<std::shared_ptr<CudaModel>> cuda_load(const Model::Impl&) {
  return unsupported("Device::kCuda was requested but this build of flashscope has no CUDA backend; use Device::kCpu");
}

Result<std::unique_ptr<Sequence::State>> cuda_new_state(const Model::Impl&, int) {
  return unsupported("this build of flashscope has no CUDA backend");
}

Status cuda_forward(const Model::Impl&, Sequence::State&, const int32_t*, const int32_t*, int, LogitsMode,
                    std::vector<float>*) {
  return unsupported("this build of flashscope has no CUDA backend");
}

CudaForwardStats cuda_stats(const Sequence::State&) { return {}; }

Result<int32_t> cuda_sample_last(const Model::Impl&, Sequence::State&, const SamplingParams&, Rng&,
                                 const std::vector<int32_t>&, size_t) {
  return unsupported("this build of flashscope has no CUDA backend");
}

#endif

}  // namespace flashscope::model
