// The CUDA forward pass of a llama model over one sequence's paged KV cache.
//
// Load (cuda_load): every matrix is dequantized on the host (dequantize_rows,
// the same values the CPU backend multiplies by) and rounded to bf16 into one
// device allocation; Q, K, V rows are stacked into one [(H + 2·KV)·D, hidden]
// matrix and gate, up into one [2·ffn, hidden] matrix, so each block is one
// GEMM. Norm weights stay fp32. Tied embeddings share token_embd.
//
// A chunk of n new tokens (at most kChunk), the cache holding `cached`:
//
//   x    [n, hidden] fp32 = token_embd[ids]                     embedding
//   per layer:
//     xn  [n, hidden] bf16 = rms_norm(x) · attn_norm             rms_norm
//     qkv [n, (H+2KV)·D] fp32 = xn · Wqkvᵀ                       cuBLAS
//     q [n, H, D] bf16, K/V pages at the new slots = rope(qkv)    rope_append
//     o [n, H, D] bf16 = paged_attention(q, pages, q_len = n)     causal, bottom-right
//     x += o · Woᵀ                                               cuBLAS, beta = 1
//     xn = rms_norm(x) · ffn_norm
//     gu  [n, 2·ffn] fp32 = xn · Wguᵀ                            cuBLAS
//     act [n, ffn] bf16 = silu(gate) · up                        swiglu
//     x += act · Wdownᵀ                                          cuBLAS, beta = 1
//   logits [rows, vocab] fp32 = rms_norm(x[rows]) · output_norm · Woutᵀ
//
// Numerics against the CPU backend: the same dequantized weights rounded to
// bf16 (2^-9 relative) instead of kept exact, GEMM inputs in bf16 instead of
// Q8 blocks, fp32 accumulation; q/k/v and the attention output in bf16 as on
// the CPU. tests/test_model_cuda.cpp holds both against a float64 reference.
//
// Per-step inputs (token ids, slots, RoPE cos/sin from cpu::rope_table in
// double, kv_len) are packed on the host into pinned memory and copied in one
// cudaMemcpyAsync before the kernels; the block table has its own device
// buffer, uploaded when the sequence's pages change. Every kernel reads them
// through fixed device pointers, which is what lets a decode step be a CUDA
// graph: replay = one copy + cudaGraphLaunch. A graph is captured on the
// second decode step after any buffer moved (the first runs plainly, loading
// every kernel and cuBLAS's choices outside the capture) and is rebuilt when
// a buffer moves or the decode KV bucket (max_kv_len, the split-KV plan's
// input: a power of two >= kv_len) grows. If capture fails the step runs
// plainly and the sequence stops trying; cuda_stats() records why.
//
// Streams and threads: each sequence has its own non-blocking stream,
// scratch, cuBLAS workspace and graph, so sequences of one model may run on
// several threads. The model's cuBLAS handle is shared: its stream and
// workspace are set per chunk under the model's mutex, held while the
// chunk's work is enqueued (not while it runs). Every call ends with a
// stream synchronize: the host then owns the staging memory again and any
// asynchronous fault is reported by the call that caused it.
//
// Failure leaves the sequence as it was: the cache's length is set back (and
// re-synced from tokens.size() at the start of every call, which also makes
// Sequence::truncate/clear take effect), the count of tokens moves last.
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

#include "cpu/model_ops.hpp"
#include "cuda/model_ops_cuda.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/half.hpp"
#include "flashscope/kv_cache.hpp"
#include "flashscope/paged_attention.hpp"
#include "model/cuda_backend.hpp"
#include "model/model_impl.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashscope::model {

namespace {

// Process-wide sums of every sequence's CudaForwardStats.
struct TotalStats {
  std::atomic<uint64_t> forwards{0}, decode_steps{0}, graph_replays{0}, graph_captures{0}, graph_capture_failures{0},
      plain_decode_steps{0};
  std::mutex error_mutex;
  std::string last_capture_error;
};

TotalStats& totals() {
  static TotalStats t;  // counters only: no behaviour depends on them
  return t;
}

}  // namespace

CudaForwardStats cuda_total_stats() {
  TotalStats& t = totals();
  CudaForwardStats s;
  s.forwards = t.forwards.load();
  s.decode_steps = t.decode_steps.load();
  s.graph_replays = t.graph_replays.load();
  s.graph_captures = t.graph_captures.load();
  s.graph_capture_failures = t.graph_capture_failures.load();
  s.plain_decode_steps = t.plain_decode_steps.load();
  std::lock_guard<std::mutex> lock(t.error_mutex);
  s.last_capture_error = t.last_capture_error;
  return s;
}

#if FLASHSCOPE_WITH_CUDA

namespace {

constexpr int kChunk = 512;          // tokens per chunk: the activation scratch's rows at most
constexpr int kLogitRows = 64;       // LM-head rows per GEMM with kAll (bounds the logits buffer)
constexpr int kPageSize = 64;        // KV page size (tokens)
constexpr int kMinKvBucket = 256;    // smallest decode max_kv_len
constexpr size_t kAlign = 256;       // sub-allocations of the weight buffer
constexpr size_t kStepAlign = 16;    // sub-arrays of the per-step block

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

Status cuda_check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return {};
  cudaGetLastError();  // a non-sticky error must not be blamed on the next call
  if (err == cudaErrorMemoryAllocation) return {StatusCode::kOutOfMemory, what + ": out of device memory"};
  return device_error(what + ": " + cudaGetErrorString(err));
}

// Makes the model's device current for a call and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      cudaGetLastError();
      saved_ = -1;
    }
    if (saved_ != device) status_ = cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (saved_ >= 0 && status_.ok()) cudaSetDevice(saved_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  int saved_ = -1;
  Status status_;
};

// Page-locked host memory: the source of truly asynchronous uploads.
class PinnedHost {
 public:
  PinnedHost() = default;
  ~PinnedHost() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  Status allocate(size_t bytes, const char* what) {
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMallocHost(&ptr_, bytes), std::string("cudaMallocHost for ") + what));
    bytes_ = bytes;
    std::memset(ptr_, 0, bytes);
    return {};
  }
  char* data() const { return static_cast<char*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// All-ones bytes: NaN in bf16 and fp32, so a read of never-written scratch
// shows up as NaN logits instead of plausible garbage.
Status poison(void* data, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0) return {};
  return cuda_check(cudaMemsetAsync(data, 0xFF, bytes, stream), std::string("cudaMemsetAsync (poison) of ") + what);
}

Result<DeviceBuffer> device_alloc(size_t bytes, const char* what) {
  auto b = DeviceBuffer::allocate(bytes);
  if (!b.ok()) return Status(b.status().code(), std::string(what) + ": " + b.status().message());
  return b;
}

}  // namespace

struct CudaModel {
  struct Layer {
    const uint16_t* wqkv = nullptr;       // [(H + 2·KV)·D, hidden] bf16: wq rows, wk rows, wv rows
    const uint16_t* wo = nullptr;         // [hidden, H·D]
    const uint16_t* w_gate_up = nullptr;  // [2·ffn, hidden]: gate rows, then up rows
    const uint16_t* w_down = nullptr;     // [hidden, ffn]
    const float* attn_norm = nullptr;     // [hidden]
    const float* ffn_norm = nullptr;      // [hidden]
  };

  int device = 0;
  DeviceBuffer weights;  // every tensor below points into it
  std::vector<Layer> layers;
  const uint16_t* token_embd = nullptr;  // [vocab, hidden]
  const uint16_t* output = nullptr;      // [vocab, hidden]; token_embd when tied
  const float* output_norm = nullptr;    // [hidden]
  cuda::CublasHandle cublas;
  size_t cublas_workspace_bytes = 0;
  bool graphs = true;  // FLASHSCOPE_CUDA_GRAPHS=0 turns decode graphs off (for comparisons)
  std::mutex mutex;    // the handle's stream and workspace belong to one chunk's enqueue at a time

  CudaModel() = default;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;
};

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
      row_status[static_cast<size_t>(r)] = dequantize_rows(*m.tensor, r0 + r, 1, f.data() + r * cols);
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

}  // namespace

Result<std::shared_ptr<CudaModel>> cuda_load(const Model::Impl& m) {
  if (!cuda_available()) {
    return unsupported("Device::kCuda was requested but no CUDA device is present (or no driver); use Device::kCpu");
  }
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  std::shared_ptr<CudaModel> cm;
  try {
    cm = std::make_shared<CudaModel>();
    cm->layers.resize(static_cast<size_t>(c.n_layers));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the CUDA model");
  }
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&cm->device), "cudaGetDevice"));

  // Where each tensor goes in the one weight allocation.
  const size_t H = static_cast<size_t>(c.hidden), F = static_cast<size_t>(c.ffn), V = static_cast<size_t>(c.vocab);
  const size_t qd = static_cast<size_t>(c.n_heads) * c.head_dim, kvd = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  const bool tied = c.tied_embeddings || w.output.tensor == w.token_embd.tensor;
  size_t total = 0;
  auto reserve = [&](size_t bytes) {
    const size_t at = align_up(total, kAlign);
    total = at + bytes;
    return at;
  };
  struct LayerOffsets {
    size_t wqkv, wo, gate_up, down, attn_norm, ffn_norm;
  };
  std::vector<LayerOffsets> lo(static_cast<size_t>(c.n_layers));
  const size_t embd_at = reserve(V * H * 2);
  for (LayerOffsets& o : lo) {
    o.wqkv = reserve((qd + 2 * kvd) * H * 2);
    o.wo = reserve(H * qd * 2);
    o.gate_up = reserve(2 * F * H * 2);
    o.down = reserve(H * F * 2);
    o.attn_norm = reserve(H * 4);
    o.ffn_norm = reserve(H * 4);
  }
  const size_t out_norm_at = reserve(H * 4);
  const size_t output_at = tied ? embd_at : reserve(V * H * 2);

  auto buf = device_alloc(total, "the model's bf16 weights");
  if (!buf.ok()) return buf.status();
  cm->weights = std::move(buf).value();
  char* base = static_cast<char*>(cm->weights.data());
  auto bf16_at = [&](size_t off) { return reinterpret_cast<uint16_t*>(base + off); };
  auto f32_at = [&](size_t off) { return reinterpret_cast<float*>(base + off); };

  FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(w.token_embd, bf16_at(embd_at)));
  for (size_t l = 0; l < lo.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const LayerOffsets& o = lo[l];
    uint16_t* wqkv = bf16_at(o.wqkv);
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.wq, wqkv));
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.wk, wqkv + qd * H));
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.wv, wqkv + (qd + kvd) * H));
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.wo, bf16_at(o.wo)));
    uint16_t* gate_up = bf16_at(o.gate_up);
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.gate, gate_up));
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.up, gate_up + F * H));
    FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(L.down, bf16_at(o.down)));
    FLASHSCOPE_RETURN_IF_ERROR(upload_floats(L.attn_norm, f32_at(o.attn_norm), "attn_norm"));
    FLASHSCOPE_RETURN_IF_ERROR(upload_floats(L.ffn_norm, f32_at(o.ffn_norm), "ffn_norm"));
    CudaModel::Layer& D = cm->layers[l];
    D.wqkv = wqkv;
    D.wo = bf16_at(o.wo);
    D.w_gate_up = gate_up;
    D.w_down = bf16_at(o.down);
    D.attn_norm = f32_at(o.attn_norm);
    D.ffn_norm = f32_at(o.ffn_norm);
  }
  FLASHSCOPE_RETURN_IF_ERROR(upload_floats(w.output_norm, f32_at(out_norm_at), "output_norm"));
  if (!tied) FLASHSCOPE_RETURN_IF_ERROR(upload_matrix(w.output, bf16_at(output_at)));
  cm->token_embd = bf16_at(embd_at);
  cm->output = bf16_at(output_at);
  cm->output_norm = f32_at(out_norm_at);
  // A pageable cudaMemcpy may return before its DMA lands; the sequences'
  // streams do not wait for the legacy stream.
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the weight upload"));

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
  return cm;
}

namespace {

// Byte offsets of one chunk's inputs in the per-step block (host and device
// alike). Computed from n, so a decode step (n = 1) always has the same ones.
struct StepLayout {
  size_t kv_len = 0;  // int32 [1]: cached tokens including this chunk's
  size_t slots = 0;   // int64 [n]
  size_t ids = 0;     // int32 [n]
  size_t cos = 0;     // float [n, rope_dim / 2]
  size_t sin = 0;     // float [n, rope_dim / 2]
  size_t bytes = 0;
};

StepLayout step_layout(int n, int rope_half) {
  StepLayout s;
  s.kv_len = 0;
  s.slots = kStepAlign;
  s.ids = align_up(s.slots + 8 * static_cast<size_t>(n), kStepAlign);
  s.cos = align_up(s.ids + 4 * static_cast<size_t>(n), kStepAlign);
  s.sin = align_up(s.cos + 4 * static_cast<size_t>(n) * rope_half, kStepAlign);
  s.bytes = align_up(s.sin + 4 * static_cast<size_t>(n) * rope_half, kStepAlign);
  return s;
}

struct CudaState final : Sequence::State {
  int n_layers = 0;
  int max_pages = 0;  // pages of capacity tokens: the block table's width
  PagedKvCache cache;
  int cache_seq = -1;
  cudaStream_t stream = nullptr;

  // Activations for up to `rows` tokens. Growing them moves them (generation++).
  int rows = 0;
  DeviceBuffer x, xn, qkv, q, o, gu, act;
  int logit_rows = 0;
  DeviceBuffer logits;     // [logit_rows, vocab] fp32
  DeviceBuffer attn_ws;    // split-KV workspace of paged attention
  DeviceBuffer cublas_ws;  // this sequence's cuBLAS workspace (its graph replays may overlap other sequences')
  cuda::SampleScratch sampler;
  int last_logits_row = -1;  // row of logits holding the last token's logits, -1 when none is pending

  PinnedHost step_host;  // per-step inputs, StepLayout(n)
  DeviceBuffer step_dev;
  PinnedHost table_host;  // int32 [max_pages]
  DeviceBuffer table_dev;
  std::vector<int32_t> table_uploaded;  // what table_dev holds

  cudaGraphExec_t graph = nullptr;
  int graph_bucket = 0;
  uint64_t graph_generation = 0;
  uint64_t generation = 1;  // bumped when a buffer a graph uses is reallocated
  bool warm = false;         // a plain decode step ran since the last bump
  bool graphs_failed = false;
  CudaForwardStats stats;

  uint64_t cache_bytes() const override {
    const KvCacheConfig& k = cache.config();
    return 2ull * static_cast<uint64_t>(k.num_layers) * static_cast<uint64_t>(k.num_pages) *
           static_cast<uint64_t>(k.kv_heads) * static_cast<uint64_t>(k.page_size) * static_cast<uint64_t>(k.head_dim) *
           2ull;
  }

  std::weak_ptr<CudaModel> model;  // its mutex guards frees against another thread's capture

  void drop_graph() {
    if (graph != nullptr) cudaGraphExecDestroy(graph);
    graph = nullptr;
  }

  ~CudaState() override {
    std::unique_lock<std::mutex> lock;
    const std::shared_ptr<CudaModel> cm = model.lock();
    if (cm) lock = std::unique_lock<std::mutex>(cm->mutex);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    drop_graph();
    // Every device allocation goes here, under the lock, not after it.
    for (DeviceBuffer* b : {&x, &xn, &qkv, &q, &o, &gu, &act, &logits, &attn_ws, &cublas_ws, &step_dev, &table_dev,
                            &sampler.penalty_ids, &sampler.token})
      *b = DeviceBuffer();
    cache = PagedKvCache();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

int next_pow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

// The decode max_kv_len: fixed between powers of two, so a captured graph's
// split plan stays valid while the sequence grows into the bucket.
int kv_bucket(int kv_len, int cap_tokens) { return std::min(std::max(kMinKvBucket, next_pow2(kv_len)), cap_tokens); }

void bump_generation(CudaState& st) {
  ++st.generation;
  st.warm = false;
  st.drop_graph();
}

Status ensure_rows(const ModelConfig& c, CudaState& st, int rows) {
  if (st.rows >= rows) return {};
  const int r = std::min(kChunk, next_pow2(std::max(rows, 16)));
  const size_t R = static_cast<size_t>(r), H = static_cast<size_t>(c.hidden), F = static_cast<size_t>(c.ffn);
  const size_t qd = static_cast<size_t>(c.n_heads) * c.head_dim;
  const size_t qkv_dim = qd + 2 * static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  const struct {
    DeviceBuffer* buf;
    size_t bytes;
    const char* what;
  } plan[] = {{&st.x, R * H * 4, "activations x"},   {&st.xn, R * H * 2, "activations xn"},
              {&st.qkv, R * qkv_dim * 4, "activations qkv"}, {&st.q, R * qd * 2, "activations q"},
              {&st.o, R * qd * 2, "activations o"},  {&st.gu, R * 2 * F * 4, "activations gate/up"},
              {&st.act, R * F * 2, "activations act"}};
  DeviceBuffer fresh[7];
  for (size_t i = 0; i < 7; ++i) {
    auto b = device_alloc(plan[i].bytes, plan[i].what);
    if (!b.ok()) return b.status();
    fresh[i] = std::move(b).value();
    FLASHSCOPE_RETURN_IF_ERROR(poison(fresh[i].data(), plan[i].bytes, st.stream, plan[i].what));
  }
  for (size_t i = 0; i < 7; ++i) *plan[i].buf = std::move(fresh[i]);
  st.rows = r;
  bump_generation(st);
  return {};
}

Status ensure_logit_rows(const ModelConfig& c, CudaState& st, int rows) {
  if (st.logit_rows >= rows) return {};
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(c.vocab) * 4;
  auto b = device_alloc(bytes, "the logits buffer");
  if (!b.ok()) return b.status();
  FLASHSCOPE_RETURN_IF_ERROR(poison(b->data(), bytes, st.stream, "logits"));
  st.logits = std::move(b).value();
  st.logit_rows = rows;
  st.last_logits_row = -1;
  bump_generation(st);
  return {};
}

// The attention call of layer `layer` for a chunk of n tokens with
// max_kv_len mkl; workspace as the state has it.
PagedAttentionParams attention_params(const ModelConfig& c, const CudaState& st, int layer, int n, int mkl,
                                      const StepLayout& sl) {
  PagedAttentionParams p;
  p.q = bshd(st.q.data(), n, c.n_heads, c.head_dim);
  p.o = bshd(st.o.data(), n, c.n_heads, c.head_dim);
  p.k_pages = st.cache.k_pages(layer);
  p.v_pages = st.cache.v_pages(layer);
  p.block_tables = static_cast<const int32_t*>(st.table_dev.data());
  p.block_table_stride = st.max_pages;
  p.kv_lens = reinterpret_cast<const int32_t*>(static_cast<const char*>(st.step_dev.data()) + sl.kv_len);
  p.batch = 1;
  p.q_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.q_len = n;
  p.head_dim = c.head_dim;
  p.page_size = kPageSize;
  p.max_kv_len = mkl;
  p.causal = true;
  p.dtype = DType::kBF16;
  p.device = Device::kCuda;
  p.stream = st.stream;
  p.workspace = st.attn_ws.data();
  p.workspace_bytes = st.attn_ws.size();
  p.num_pages = st.max_pages;
  return p;
}

// Grows the split-KV workspace to what the plan for (n, mkl) needs. The
// plan depends only on shapes and the SM count, so the enqueue that follows
// (captured or not) gets the same one.
Status ensure_attention_workspace(const ModelConfig& c, CudaState& st, int n, int mkl, const StepLayout& sl) {
  auto plan = plan_paged_attention(attention_params(c, st, 0, n, mkl, sl));
  if (!plan.ok()) return plan.status();
  if (plan->workspace_bytes <= st.attn_ws.size()) return {};
  auto b = device_alloc(plan->workspace_bytes, "the split-KV attention workspace");
  if (!b.ok()) return b.status();
  st.attn_ws = std::move(b).value();
  bump_generation(st);
  return {};
}

// Everything of one chunk after the inputs are on the device: embedding,
// the layers, and (head_rows > 0) the final norm of rows [row0, row0 +
// head_rows) and their logits into logits rows [0, head_rows). Nothing here
// allocates or synchronizes, so it can be captured.
Status enqueue_chunk(const Model::Impl& m, const CudaModel& cm, CudaState& st, int n, int mkl, const StepLayout& sl,
                     int row0, int head_rows) {
  const ModelConfig& c = m.config;
  void* s = st.stream;
  const int H = c.hidden, F = c.ffn;
  const int qd = c.n_heads * c.head_dim;
  const int qkv_dim = qd + 2 * c.n_kv_heads * c.head_dim;
  char* step = static_cast<char*>(st.step_dev.data());
  auto* x = static_cast<float*>(st.x.data());
  auto* xn = static_cast<uint16_t*>(st.xn.data());
  auto* qkv = static_cast<float*>(st.qkv.data());
  auto* gu = static_cast<float*>(st.gu.data());
  auto* act = static_cast<uint16_t*>(st.act.data());

  cuda::EmbeddingOp emb;
  emb.ids = reinterpret_cast<const int32_t*>(step + sl.ids);
  emb.table = cm.token_embd;
  emb.x = x;
  emb.n = n;
  emb.hidden = H;
  emb.vocab = c.vocab;
  FLASHSCOPE_RETURN_IF_ERROR(cuda::embedding(emb, s));

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
  auto gemm = [&](const uint16_t* w, const uint16_t* in, int64_t ldx, float* out, int64_t ldy, int rows, int n_out,
                  int k, bool accumulate) {
    cuda::GemmOp op;
    op.w = w;
    op.x = in;
    op.y = out;
    op.rows = rows;
    op.n_out = n_out;
    op.k = k;
    op.ldx = ldx;
    op.ldy = ldy;
    op.accumulate = accumulate;
    return cuda::gemm_bf16(cm.cublas.get(), op);
  };

  for (int l = 0; l < c.n_layers; ++l) {
    const CudaModel::Layer& L = cm.layers[static_cast<size_t>(l)];
    FLASHSCOPE_RETURN_IF_ERROR(norm(L.attn_norm, 0, n));
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.wqkv, xn, H, qkv, qkv_dim, n, qkv_dim, H, false));

    cuda::RopeAppendOp ra;
    ra.qkv = qkv;
    ra.qkv_stride = qkv_dim;
    ra.rope_cos = reinterpret_cast<const float*>(step + sl.cos);
    ra.rope_sin = reinterpret_cast<const float*>(step + sl.sin);
    ra.slots = reinterpret_cast<const int64_t*>(step + sl.slots);
    ra.q_out = static_cast<uint16_t*>(st.q.data());
    ra.q_stride = qd;
    ra.k_pages = st.cache.k_pages(l);
    ra.v_pages = st.cache.v_pages(l);
    ra.n = n;
    ra.q_heads = c.n_heads;
    ra.kv_heads = c.n_kv_heads;
    ra.head_dim = c.head_dim;
    ra.rope_dim = c.rope_dim;
    ra.page_size = kPageSize;
    ra.num_pages = st.max_pages;
    FLASHSCOPE_RETURN_IF_ERROR(cuda::rope_append(ra, s));

    FLASHSCOPE_RETURN_IF_ERROR(paged_attention(attention_params(c, st, l, n, mkl, sl)));
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.wo, static_cast<const uint16_t*>(st.o.data()), qd, x, H, n, H, qd, true));

    FLASHSCOPE_RETURN_IF_ERROR(norm(L.ffn_norm, 0, n));
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.w_gate_up, xn, H, gu, 2 * F, n, 2 * F, H, false));
    cuda::SwigluOp sw;
    sw.gu = gu;
    sw.gu_stride = 2 * F;
    sw.out = act;
    sw.out_stride = F;
    sw.rows = n;
    sw.ffn = F;
    FLASHSCOPE_RETURN_IF_ERROR(cuda::swiglu(sw, s));
    FLASHSCOPE_RETURN_IF_ERROR(gemm(L.w_down, act, F, x, H, n, H, F, true));
  }

  if (head_rows > 0) {
    FLASHSCOPE_RETURN_IF_ERROR(norm(cm.output_norm, row0, head_rows));
    FLASHSCOPE_RETURN_IF_ERROR(
        gemm(cm.output, xn, H, static_cast<float*>(st.logits.data()), c.vocab, head_rows, c.vocab, H, false));
  }
  return {};
}

void count(CudaState& st, uint64_t CudaForwardStats::*field, std::atomic<uint64_t> TotalStats::*total) {
  ++(st.stats.*field);
  (totals().*total).fetch_add(1, std::memory_order_relaxed);
}

// Captures one decode step (n = 1, one logits row) into st.graph.
Status capture_decode(const Model::Impl& m, const CudaModel& cm, CudaState& st, int mkl, const StepLayout& sl) {
  FLASHSCOPE_RETURN_IF_ERROR(
      cuda_check(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
  const Status enqueued = enqueue_chunk(m, cm, st, 1, mkl, sl, 0, 1);
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(st.stream, &g);
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
  st.graph = exec;
  st.graph_bucket = mkl;
  st.graph_generation = st.generation;
  return {};
}

// One decode step: the graph when there is one for this bucket and these
// buffers (capturing it on a warm state), else plain launches.
Status run_decode(const Model::Impl& m, const CudaModel& cm, CudaState& st, int mkl, const StepLayout& sl) {
  count(st, &CudaForwardStats::decode_steps, &TotalStats::decode_steps);
  if (st.graph != nullptr && (st.graph_bucket != mkl || st.graph_generation != st.generation)) st.drop_graph();
  if (st.graph == nullptr && cm.graphs && !st.graphs_failed && st.warm) {
    const Status cap = capture_decode(m, cm, st, mkl, sl);
    if (cap.ok()) {
      count(st, &CudaForwardStats::graph_captures, &TotalStats::graph_captures);
    } else {
      st.graphs_failed = true;
      st.stats.last_capture_error = cap.message();
      count(st, &CudaForwardStats::graph_capture_failures, &TotalStats::graph_capture_failures);
      std::lock_guard<std::mutex> lock(totals().error_mutex);
      totals().last_capture_error = cap.message();
    }
  }
  if (st.graph != nullptr) {
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaGraphLaunch(st.graph, st.stream), "cudaGraphLaunch (decode step)"));
    count(st, &CudaForwardStats::graph_replays, &TotalStats::graph_replays);
    return {};
  }
  FLASHSCOPE_RETURN_IF_ERROR(enqueue_chunk(m, cm, st, 1, mkl, sl, 0, 1));
  st.warm = true;
  count(st, &CudaForwardStats::plain_decode_steps, &TotalStats::plain_decode_steps);
  return {};
}

// Uploads the block table when the cache's pages changed.
Status sync_block_table(CudaState& st) {
  const std::vector<int32_t>& table = st.cache.block_table(st.cache_seq);
  if (table == st.table_uploaded) return {};
  if (table.size() > static_cast<size_t>(st.max_pages))
    return invalid_argument("internal: the block table outgrew its buffer");
  if (!table.empty()) {
    std::memcpy(st.table_host.data(), table.data(), table.size() * sizeof(int32_t));
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemcpyAsync(st.table_dev.data(), st.table_host.data(),
                                                          table.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                                          st.stream),
                                          "cudaMemcpyAsync of the block table"));
  }
  try {
    st.table_uploaded = table;
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "cannot copy the block table"};
  }
  return {};
}

// All chunks of one call. The cache already holds slots for the n tokens.
Status run_chunks(const Model::Impl& m, CudaModel& cm, CudaState& st, const int32_t* tokens, const int32_t* positions,
                  int n, const std::vector<Slot>& slots, int cached, LogitsMode mode, std::vector<float>* logits) {
  const ModelConfig& c = m.config;
  const int V = c.vocab;
  const int rope_half = c.rope_dim / 2;
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
    const int mkl = decode ? kv_bucket(kv_len, st.max_pages * kPageSize) : kv_len;
    const StepLayout sl = step_layout(cn, rope_half);

    // Held while this chunk allocates and enqueues (not while it runs): the
    // handle's stream and workspace are this chunk's, and no other thread
    // allocates or frees scratch while a decode step is being captured.
    std::unique_lock<std::mutex> lock(cm.mutex);
    FLASHSCOPE_RETURN_IF_ERROR(ensure_rows(c, st, cn));
    if (out_rows > 0) FLASHSCOPE_RETURN_IF_ERROR(ensure_logit_rows(c, st, std::min(out_rows, kLogitRows)));
    FLASHSCOPE_RETURN_IF_ERROR(ensure_attention_workspace(c, st, cn, mkl, sl));

    // The chunk's inputs, packed on the host, then one copy.
    char* h = st.step_host.data();
    const int32_t kv_len32 = kv_len;
    std::memcpy(h + sl.kv_len, &kv_len32, sizeof kv_len32);
    std::memcpy(h + sl.slots, slots.data() + c0, static_cast<size_t>(cn) * sizeof(Slot));
    std::memcpy(h + sl.ids, tokens + c0, static_cast<size_t>(cn) * sizeof(int32_t));
    if (rope_half > 0) {
      cpu::rope_table(positions + c0, cn, c.rope_dim, c.rope_base, reinterpret_cast<float*>(h + sl.cos),
                      reinterpret_cast<float*>(h + sl.sin));
    }
    FLASHSCOPE_RETURN_IF_ERROR(sync_block_table(st));
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
        cudaMemcpyAsync(st.step_dev.data(), h, sl.bytes, cudaMemcpyHostToDevice, st.stream),
        "cudaMemcpyAsync of the step inputs"));

    FLASHSCOPE_RETURN_IF_ERROR(cm.cublas.bind(st.stream, st.cublas_ws.data(), st.cublas_ws.size()));
    if (decode) {
      FLASHSCOPE_RETURN_IF_ERROR(run_decode(m, cm, st, mkl, sl));
    } else {
      const int first_rows = std::min(out_rows, kLogitRows);
      FLASHSCOPE_RETURN_IF_ERROR(enqueue_chunk(m, cm, st, cn, mkl, sl, row0, first_rows));
    }
    // Logits: the first block of rows is in st.logits; kAll's further
    // blocks reuse the buffer after each block's copy has landed (a copy
    // into pageable memory returns when it is done).
    for (int b0 = 0; b0 < out_rows; b0 += kLogitRows) {
      const int nb = std::min(kLogitRows, out_rows - b0);
      if (b0 > 0) {
        cuda::RmsNormOp op;
        op.x = static_cast<const float*>(st.x.data()) + static_cast<int64_t>(row0 + b0) * c.hidden;
        op.x_stride = c.hidden;
        op.weight = cm.output_norm;
        op.y = static_cast<uint16_t*>(st.xn.data());
        op.y_stride = c.hidden;
        op.rows = nb;
        op.dim = c.hidden;
        op.eps = c.rms_eps;
        FLASHSCOPE_RETURN_IF_ERROR(cuda::rms_norm(op, st.stream));
        cuda::GemmOp g;
        g.w = cm.output;
        g.x = static_cast<const uint16_t*>(st.xn.data());
        g.y = static_cast<float*>(st.logits.data());
        g.rows = nb;
        g.n_out = V;
        g.k = c.hidden;
        g.ldx = c.hidden;
        g.ldy = V;
        FLASHSCOPE_RETURN_IF_ERROR(cuda::gemm_bf16(cm.cublas.get(), g));
      }
      if (logits != nullptr) {
        const size_t out_row = mode == LogitsMode::kAll ? static_cast<size_t>(c0 + b0) : 0;
        FLASHSCOPE_RETURN_IF_ERROR(
            cuda_check(cudaMemcpyAsync(logits->data() + out_row * static_cast<size_t>(V), st.logits.data(),
                                       static_cast<size_t>(nb) * static_cast<size_t>(V) * sizeof(float),
                                       cudaMemcpyDeviceToHost, st.stream),
                       "cudaMemcpyAsync of the logits to the host"));
      }
      if (last_chunk && b0 + nb == out_rows) st.last_logits_row = nb - 1;
    }
    lock.unlock();
    // The host reuses the staging block for the next chunk; and a fault of
    // any kernel above is this call's.
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(st.stream), "forward on the device"));
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
  // No allocation while another thread captures a decode step. (Declared
  // after st: on failure st's destructor runs after this unlocks.)
  std::lock_guard<std::mutex> lock(cm.mutex);
  st->model = m.cuda;
  st->owner = &m;
  st->capacity = capacity;
  st->n_layers = c.n_layers;
  st->max_pages = (capacity + kPageSize - 1) / kPageSize;
  try {
    st->tokens.reserve(static_cast<size_t>(capacity));
    st->table_uploaded.reserve(static_cast<size_t>(st->max_pages));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the token list");
  }
  FLASHSCOPE_RETURN_IF_ERROR(
      cuda_check(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));

  KvCacheConfig kc;
  kc.num_layers = c.n_layers;
  kc.num_pages = st->max_pages;
  kc.page_size = kPageSize;
  kc.kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.dtype = DType::kBF16;
  kc.device = Device::kCuda;
  auto cache = PagedKvCache::create(kc);
  if (!cache.ok()) {
    return Status(cache.status().code(), "KV cache of " + std::to_string(capacity) + " tokens: " +
                                             cache.status().message());
  }
  st->cache = std::move(cache).value();
  st->cache_seq = st->cache.create_sequence();
  if (st->cache_seq < 0) return Status(StatusCode::kOutOfMemory, "cannot create the cache's sequence");
  // NaN pages: attention must never read a slot this sequence did not write.
  const size_t pool_bytes = static_cast<size_t>(st->max_pages) * c.n_kv_heads * kPageSize * c.head_dim * 2;
  for (int l = 0; l < c.n_layers; ++l) {
    FLASHSCOPE_RETURN_IF_ERROR(poison(st->cache.k_pages(l), pool_bytes, st->stream, "the K pages"));
    FLASHSCOPE_RETURN_IF_ERROR(poison(st->cache.v_pages(l), pool_bytes, st->stream, "the V pages"));
  }

  const size_t step_bytes = step_layout(kChunk, c.rope_dim / 2).bytes;
  FLASHSCOPE_RETURN_IF_ERROR(st->step_host.allocate(step_bytes, "the step inputs"));
  auto step_dev = device_alloc(step_bytes, "the step inputs");
  if (!step_dev.ok()) return step_dev.status();
  st->step_dev = std::move(step_dev).value();
  FLASHSCOPE_RETURN_IF_ERROR(poison(st->step_dev.data(), step_bytes, st->stream, "the step inputs"));
  const size_t table_bytes = static_cast<size_t>(st->max_pages) * sizeof(int32_t);
  FLASHSCOPE_RETURN_IF_ERROR(st->table_host.allocate(table_bytes, "the block table"));
  auto table_dev = device_alloc(table_bytes, "the block table");
  if (!table_dev.ok()) return table_dev.status();
  st->table_dev = std::move(table_dev).value();
  // Page ids past the sequence's pages are never read; 0 keeps them in range.
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemsetAsync(st->table_dev.data(), 0, table_bytes, st->stream),
                                        "cudaMemsetAsync of the block table"));
  auto ws = device_alloc(cm.cublas_workspace_bytes, "the cuBLAS workspace");
  if (!ws.ok()) return ws.status();
  st->cublas_ws = std::move(ws).value();
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(st->stream), "creating a CUDA sequence"));
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
  // Sequence::truncate / clear shorten tokens only: follow them here.
  const int cache_len = st.cache.length(st.cache_seq);
  if (cache_len > cached) FLASHSCOPE_RETURN_IF_ERROR(st.cache.truncate(st.cache_seq, cached));
  if (st.cache.length(st.cache_seq) != cached)
    return invalid_argument("internal: the KV cache holds " + std::to_string(st.cache.length(st.cache_seq)) +
                            " tokens, the sequence " + std::to_string(cached));
  auto slots = st.cache.append_slots(st.cache_seq, n);
  if (!slots.ok()) return slots.status();
  const Status run = run_chunks(m, cm, st, tokens, positions, n, slots.value(), cached, mode, logits);
  if (!run.ok()) {
    // Work enqueued before the failure may still run: let it finish before
    // the host touches the staging memory again (its own error is the one
    // already reported, or a consequence of it).
    cudaStreamSynchronize(st.stream);
    cudaGetLastError();
    (void)st.cache.truncate(st.cache_seq, cached);  // shrinking cannot fail for a live sequence
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
                                 const std::vector<int32_t>& recent_tokens) {
  auto* st = dynamic_cast<CudaState*>(&state);
  if (st == nullptr || !m.cuda) return invalid_argument("cuda_sample_last: not a CUDA sequence");
  if (st->last_logits_row < 0) return invalid_argument("cuda_sample_last: no logits are pending on the device");
  DeviceScope device(m.cuda->device);
  FLASHSCOPE_RETURN_IF_ERROR(device.status());
  const int V = m.config.vocab;
  float* row = static_cast<float*>(st->logits.data()) + static_cast<size_t>(st->last_logits_row) * V;
  st->last_logits_row = -1;  // the sampler works in place: a row is sampled once
  return cuda::sample_row(row, V, params, rng, recent_tokens, st->sampler, st->stream);
}

#else  // built without CUDA

struct CudaModel {};

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
                                 const std::vector<int32_t>&) {
  return unsupported("this build of flashscope has no CUDA backend");
}

#endif

}  // namespace flashscope::model
