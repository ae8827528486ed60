// The CUDA backend's private types, shared by its files:
//   forward_cuda.cpp        load, sequences, one sequence's forward pass,
//                           device sampling of its last logits
//   forward_cuda_batch.cpp  the batched decode step of many sequences
//   cuda_step.cpp           what both run: scratch growth, the per-step
//                           input block, the enqueue of a step, decode graphs
//   cuda_kv_pool.cpp        the model's KV page pool
//
// KV memory: one page pool per model, not one per sequence, and that pool is
// the public PagedKvCache (flashscope/kv_cache.hpp): what an embedder gets
// from the paged attention API is what the engine runs on. Each layer has a
// K and a V pool [num_pages, kv_heads, kPageSize, head_dim] bf16, and a
// sequence is one of the cache's sequences that reserves ceil(capacity /
// kPageSize) pages at creation and keeps them to destruction (token t at
// pages[t / kPageSize], offset t % kPageSize); the engine counts its tokens
// itself, so no step asks the cache for slots. Because every sequence's pages
// live in the same pools, a batched decode step is one paged_attention launch
// per layer over all of its sequences: block tables [batch, stride] (each row
// a sequence's pages, padded with page 0, never read past its kv_len) and
// kv_lens [batch] are per-step inputs. The cache grows by reallocation (at
// least doubling; the used pages are copied, page ids stay), which happens
// only when a new sequence does not fit; every buffer that captured the old
// address sees the pool's generation change and drops its graphs. When the
// last sequence goes, the cache is freed.
//
// Scratch: a StepScratch is the activations, per-step input block, split-KV
// and cuBLAS workspaces, logits and graph of one stream. Each sequence has
// one (its own forward passes, so sequences run on several threads); the
// model has one more for batched steps, guarded by CudaModel::batch_mutex.
//
// Locking: CudaModel::mutex is held while a step allocates and enqueues (the
// shared cuBLAS handle is bound to that step's stream and workspace), while
// the pool grows or shrinks, and while sequences are created and destroyed.
// It is not held while the GPU runs. batch_mutex (taken first) is held for a
// whole batched step.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/rope_cache.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "model/model_impl.hpp"

namespace flashscope::model {

// Process-wide sums of every sequence's CudaForwardStats (and the batched
// steps'), for cuda_total_stats(). Counters only: no behaviour depends on them.
struct TotalStats {
  std::atomic<uint64_t> forwards{0}, decode_steps{0}, graph_replays{0}, graph_captures{0}, graph_capture_failures{0},
      plain_decode_steps{0}, batch_steps{0}, batch_rows{0}, batch_graph_replays{0}, batch_graph_captures{0},
      device_sampled_tokens{0}, host_sampled_tokens{0}, fused_step_enqueues{0}, norm_fused_enqueues{0},
      rope_fused_enqueues{0};
  std::mutex error_mutex;
  std::string last_capture_error;
};
TotalStats& totals();
// Counts a failed graph capture in the totals and remembers why.
void record_capture_failure(const std::string& message);
// Counts a token sampled with `params` over `vocab` (on the device, or on
// the host where the device sampler cannot keep that many candidates).
void count_sample(const SamplingParams& params, int vocab);

}  // namespace flashscope::model

#if FLASHSCOPE_WITH_CUDA

#include <cuda_runtime.h>

#include "backends/cuda/model_ops_cuda.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/kv_cache.hpp"
#include "flashscope/paged_attention.hpp"
#include "kernels/common/math.h"

namespace flashscope::model {

constexpr int kChunk = 512;        // tokens (or batch rows) per enqueue: the activation scratch's rows at most
constexpr int kLogitRows = 64;     // LM-head rows per GEMM with kAll (bounds a sequence's logits buffer)
constexpr int kPageSize = 64;      // KV page size (tokens)
constexpr int kMinKvBucket = 256;  // smallest decode max_kv_len
constexpr int kSkinnyRows = 4;     // steps of at most this many tokens take the fused few-token GEMMs (8: slower than cuBLAS, bench/TUNING.md#engine)
// With quantized weights the fused GEMMs read 3-4× fewer bytes and the
// many-row path pays a dequantization per matrix: they take steps of up to
// 8 tokens (the kernel's most) and the LM head of up to 8 rows.
constexpr int kQuantSkinnyRows = 8;
// The bf16 slice a quantized matrix is dequantized into for cuBLAS (many-row
// steps), per stream: 16 MiB is 4096 rows of k = 2048; larger matrices go in slices.
constexpr size_t kDequantScratchBytes = size_t{16} << 20;
constexpr size_t kAlign = 256;     // sub-allocations of the weight buffer
constexpr size_t kStepAlign = 16;  // sub-arrays of the per-step block

using kernels::align_up;  // offsets rounded up to kAlign / kStepAlign
int next_pow2(int x);
// The decode max_kv_len: fixed between powers of two, so a captured graph's
// split plan stays valid while the sequences grow into the bucket.
int kv_bucket(int kv_len, int cap_tokens);

Status cuda_check(cudaError_t err, const std::string& what);
Result<DeviceBuffer> device_alloc(size_t bytes, const char* what);
// All-ones bytes: NaN in bf16 and fp32, so a read of never-written scratch
// shows up as NaN logits instead of plausible garbage.
Status poison(void* data, size_t bytes, cudaStream_t stream, const char* what);

// Makes the model's device current for a call and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  int saved_ = -1;
  Status status_;
};

// The model's KV pages (see the top of this file).
struct KvPool {
  PagedKvCache cache;        // empty (no pools) while the model has no sequence
  uint64_t generation = 0;   // bumped whenever the pools move (made, grown, freed)

  int num_pages() const { return cache.num_pages(); }
  void* k_pages(int layer) const { return cache.k_pages(layer); }
  void* v_pages(int layer) const { return cache.v_pages(layer); }
};

// The key a decode graph is captured for: everything its baked-in kernel
// parameters depend on besides the per-step data in the step block.
struct GraphKey {
  int rows = 0;          // sequences in the step (1 for a sequence's own decode)
  int bucket = 0;        // max_kv_len of the split plan
  int table_stride = 0;  // block-table entries per sequence
  uint64_t generation = 0;
  uint64_t tap = 0;      // the armed capture's staging (StepScratch::tap_layout); 0: none armed
  bool operator==(const GraphKey& o) const {
    return rows == o.rows && bucket == o.bucket && table_stride == o.table_stride && generation == o.generation &&
           tap == o.tap;
  }
};

struct DecodeGraph {
  cudaGraphExec_t exec = nullptr;
  GraphKey key;        // what exec was captured for
  GraphKey warm;       // the last decode step run plainly: a capture waits for one with its key
  bool failed = false;  // a capture failed: this scratch stops trying
  void drop();
};

// Activations, per-step inputs, workspaces, logits and decode graph of one
// stream's forward passes. Growing a buffer moves it: generation++ (graphs
// baked its address).
struct StepScratch {
  cudaStream_t stream = nullptr;
  int rows = 0;  // tokens the activations hold
  DeviceBuffer x, xn, qkv, q, o, gu, act;
  DeviceBuffer y;  // [rows, hidden] fp32: a block's output before its post-norm (gemma3)
  // [rows, hidden] fp32 (gemma3): the residual stream's second buffer, which
  // the fused post-norms alternate with x (cuda_step.cpp); empty otherwise.
  DeviceBuffer x_alt;
  DeviceBuffer rope_counters;  // [q_heads + 2·kv_heads] int32, zero between launches (kRopeHeads)
  int logit_rows = 0;
  DeviceBuffer logits;     // [logit_rows, vocab] fp32
  DeviceBuffer dequant;    // quantized weights' bf16 slices for cuBLAS (many-row steps)
  DeviceBuffer attn_ws;    // split-KV workspace of paged attention
  DeviceBuffer cublas_ws;  // this stream's cuBLAS workspace (its graph replays may overlap other streams')
  cuda::PinnedBuffer step_host;  // per-step inputs (StepLayout), packed on the host
  DeviceBuffer step_dev;         // the same on the device, read by every kernel through fixed pointers
  std::vector<int32_t> positions;  // a batched step's RoPE positions (host)
  cuda::SampleScratch sampler;
  cuda::BatchSampleScratch batch_sampler;
  DecodeGraph graph;
  // An armed attention capture (model/query_tap.hpp), for this step only:
  // tap_block[l] >= 0 makes the step copy layer l's rotated q [tokens, H·D]
  // into tap_stage at rows [tap_block[l]·rows, …), and after it tap_host
  // receives them (step_tap.hpp). Empty while no capture is armed: the step
  // does nothing for it. A decode graph captured while armed bakes those
  // copies, so its key holds tap_layout: a number that changes whenever the
  // staged layers or the stage's address do (tap_keyed, tap_keyed_stage:
  // what it was last computed for), and an armed step never replays an
  // unarmed graph or one staging other layers.
  std::vector<int> tap_block;
  DeviceBuffer tap_stage;
  cuda::PinnedBuffer tap_host;
  std::vector<int> tap_keyed;
  const void* tap_keyed_stage = nullptr;
  uint64_t tap_layout = 0;
  uint64_t generation = 1;
  uint64_t pool_generation = 0;  // the pool generation the buffers above were last used with

  StepScratch() = default;
  StepScratch(const StepScratch&) = delete;
  StepScratch& operator=(const StepScratch&) = delete;
  ~StepScratch() { release(); }

  // Its stream and cuBLAS workspace (what is missing of them: a failed init can be retried).
  Status init(size_t cublas_workspace_bytes);
  // Waits for its stream, destroys the graph, frees every buffer and the
  // stream. Idempotent. Callers hold the model's mutex where it still exists.
  void release();
  void bump() {
    ++generation;
    graph.drop();
  }
};

// The rows of a stacked product (Q, K, V or gate, up) as 1..3 runs, each one
// matrix of one type: rows of one type are stacked in one run, so a bf16
// model (and a file whose Q, K and V share a type) has a single run; a
// Q4_K_M file's Q6_K V rows beside Q4_K Q and K rows make two or three.
struct MatrixRuns {
  cuda::DeviceMatrix run[3];
  int begin[3] = {0, 0, 0};  // each run's first row of the stacked product
  int count = 0;
};

struct CudaModel {
  struct Layer {
    MatrixRuns qkv;            // [(H + 2·KV)·D, hidden]: wq rows, wk rows, wv rows
    cuda::DeviceMatrix wo;     // [hidden, H·D]
    MatrixRuns gate_up;        // [2·ffn, hidden]: gate rows, then up rows
    cuda::DeviceMatrix gate;   // the gate rows of gate_up, and the up rows (adjacent
    cuda::DeviceMatrix up;     //   when they share a type)
    cuda::DeviceMatrix down;   // [hidden, ffn]
    const float* attn_norm = nullptr;  // [hidden]
    const float* ffn_norm = nullptr;   // [hidden]
    // The family's optional pieces (null where the config has none):
    const float* bqkv = nullptr;            // [(H + 2·KV)·D]: bq, bk, bv (qwen2)
    const float* q_norm = nullptr;          // [D] per-head RMSNorm of q before RoPE (qwen3, gemma3)
    const float* k_norm = nullptr;          // [D]
    const float* post_attn_norm = nullptr;  // [hidden] on the attention block's output (gemma3)
    const float* post_ffn_norm = nullptr;   // [hidden] on the FFN block's output (gemma3)
    int rope = 0;        // which of the step's RoPE tables (CudaModel::ropes) its q and k turn by
    int window_left = -1;  // paged attention's window_left: -1 unbounded (sliding layers: window - 1)
  };
  // The distinct RoPE angle sets of the layers (gemma3: global and local
  // base), each one table of the step block; Llama 3's frequency factors
  // are folded into every table on the host, whose rows come from `table`
  // (computed once per position).
  struct Rope {
    float base = 10000.0f;
    float scale = 1.0f;
    std::shared_ptr<cpu::RopeTableCache> table;
  };
  std::vector<Rope> ropes;

  int device = 0;
  DeviceBuffer weights;  // every tensor below points into it
  std::vector<Layer> layers;
  cuda::DeviceMatrix token_embd;      // [vocab, hidden]
  cuda::DeviceMatrix output;          // [vocab, hidden]; token_embd when tied
  const float* output_norm = nullptr;  // [hidden]
  // Weights kept in their GGUF blocks (WeightFormat::kQuantized) where the
  // GPU reads the type in place; other matrices are bf16.
  bool quantized = false;   // some layer matrix is in blocks
  bool layer_bf16 = false;  // some layer matrix is bf16
  uint64_t weight_bytes = 0;  // device bytes of the weights (the allocation)
  cuda::CublasHandle cublas;
  size_t cublas_workspace_bytes = 0;
  bool graphs = true;  // FLASHSCOPE_CUDA_GRAPHS=0 turns decode graphs off (for comparisons)
  // Steps of at most kSkinnyMaxRows tokens run their matrix products as
  // fused few-token GEMMs (cuda::skinny_gemm); FLASHSCOPE_CUDA_SKINNY=0
  // keeps them on cuBLAS with the separate norm / RoPE / SwiGLU kernels.
  bool skinny = true;
  // In those steps, Gemma's post-norms ride in the next GEMM's staging
  // (cuda_step.cpp); FLASHSCOPE_CUDA_FUSE_NORMS=0 launches add_rms_norm instead.
  bool fuse_norms = true;
  // And the q/k norms, RoPE and K/V append of a family the QKV GEMM's own
  // epilogue cannot rotate (NeoX pairs, biases, q/k norms) ride at the end
  // of that GEMM (kRopeHeads) instead of a rope_append launch, with bf16
  // weights, when FLASHSCOPE_CUDA_FUSE_ROPE=1 (opt-in: measured slower).
  bool fuse_rope = false;
  // The O product merges the split-KV partials as it stages its input for
  // calls of up to this many splits; above it the combine kernel merges them
  // once and the product reads bf16 (every CTA of the product stages the
  // whole input, so its merge reads splits x the input's bytes from L2).
  // FLASHSCOPE_CUDA_GEMM_MERGE_SPLITS=N sets it.
  int gemm_merge_max_splits = 16;
  std::mutex mutex;    // see the top of this file
  KvPool pool;         // guarded by mutex

  std::mutex batch_mutex;  // one batched step at a time
  StepScratch batch;       // the batched steps' scratch (its stream made on first use)

  CudaModel() = default;
  ~CudaModel() { batch.release(); }  // its graph before the buffers it captured
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;
};

// A new sequence of the pool's cache holding the pages of `tokens` tokens,
// the cache made or grown when too few are free; its pages are poisoned
// (NaN) on `stream`. Returns the cache's sequence id. mutex held.
Result<int> pool_take(CudaModel& cm, const ModelConfig& c, int tokens, cudaStream_t stream);
// Frees a sequence of the cache; frees the cache when no page is held.
// mutex held; nothing may still read or write its pages.
void pool_give_back(CudaModel& cm, int seq);

struct CudaState;
// Waits for the sequence's enqueued work when a forward left it running
// (CudaState::unsettled); its errors are reported here.
Status settle_sequence(CudaState& st);

struct CudaState final : Sequence::State {
  int n_layers = 0;
  int max_pages = 0;           // pages of capacity tokens
  int kv_seq = -1;             // its sequence in the pool's cache
  std::vector<int32_t> pages;  // the cache's block table of it, max_pages pages (fixed for its life)
  StepScratch scratch;
  int last_logits_row = -1;  // row of scratch.logits holding the last token's logits, -1 when none is pending
  // A kLast forward whose logits stay on the device returns once its work is
  // enqueued: the sampler's wait for its token ends it (one host round trip a
  // decoded token instead of two). Until then scratch.stream may still run
  // it; every other use of the sequence settles it first (settle_sequence).
  bool unsettled = false;
  CudaForwardStats stats;
  std::weak_ptr<CudaModel> model;  // its mutex guards frees against another thread's capture
  size_t page_bytes = 0;

  // The pool slot of the sequence's token t.
  int64_t slot(int t) const {
    return int64_t{pages[static_cast<size_t>(t / kPageSize)]} * kPageSize + t % kPageSize;
  }
  uint64_t cache_bytes() const override {
    return 2ull * static_cast<uint64_t>(n_layers) * static_cast<uint64_t>(pages.size()) * page_bytes;
  }
  ~CudaState() override;
};

// Byte offsets of one step's inputs in the step block (host and device
// alike). A function of the step's shape only, so decode steps of one shape
// always have the same ones (what lets them be a graph).
struct StepLayout {
  size_t kv_lens = 0;  // int32 [seqs]: cached tokens of each sequence including this step's
  size_t slots = 0;    // int64 [tokens]: pool slot of each new token's K/V
  size_t ids = 0;      // int32 [tokens]
  size_t cos = 0;      // float [rope_tables, tokens, rope_dim / 2]: table r at cos + r · rope_stride
  size_t sin = 0;      // float [rope_tables, tokens, rope_dim / 2]
  size_t rope_stride = 0;  // bytes from one RoPE table to the next
  size_t tables = 0;   // int32 [seqs, table_stride]: block tables
  size_t bytes = 0;
};
StepLayout step_layout(int seqs, int tokens, int rope_half, int table_stride, int rope_tables);
// Writes the step's RoPE tables (cm.ropes' rows: cpu::rope_table's values)
// for `positions` [n] into the host staging block at `at`.
void pack_rope_tables(const Model::Impl& m, const CudaModel& cm, const int32_t* positions, int n, char* host,
                      const StepLayout& at);

// One enqueue's shape: `seqs` sequences with q_len new tokens each (one
// sequence's chunk: seqs 1; a batched decode step: q_len 1), rows
// seqs·q_len of the activations, inputs at `at` in the step block.
struct StepView {
  int seqs = 1;
  int q_len = 1;
  int table_stride = 0;
  int mkl = 0;  // max_kv_len of the attention plan
  StepLayout at;
  int tokens() const { return seqs * q_len; }
};

// Grow-only scratch (mutex held). Each move bumps sc.generation.
Status ensure_rows(const ModelConfig& c, StepScratch& sc, int rows);
Status ensure_logit_rows(const ModelConfig& c, StepScratch& sc, int rows);
Status ensure_step_bytes(StepScratch& sc, size_t bytes);
Status ensure_attention_workspace(const ModelConfig& c, const CudaModel& cm, StepScratch& sc, const StepView& v);
// Bumps sc when the pool moved since sc last used it (mutex held).
void follow_pool(const CudaModel& cm, StepScratch& sc);
// Whether a step of `tokens` rows runs its layers' products as fused
// few-token GEMMs, and whether `head_rows` logits rows do (quantized output
// weights); enqueue_step decides by these.
bool skinny_step(const ModelConfig& c, const CudaModel& cm, int tokens);
bool skinny_head(const ModelConfig& c, const CudaModel& cm, int head_rows);
// The dequantization scratch a step of `tokens` rows with `head_rows`
// logits rows needs (quantized weights on the many-row path), grown once.
Status ensure_dequant_scratch(const ModelConfig& c, const CudaModel& cm, StepScratch& sc, int tokens, int head_rows);

// Everything of one step after its inputs are on the device: embedding, the
// layers, and (head_rows > 0) the final norm of rows [row0, row0 + head_rows)
// and their logits into logits_out [head_rows, vocab]. Nothing here
// allocates or synchronizes, so it can be captured. cm.cublas bound to
// sc.stream and sc.cublas_ws.
Status enqueue_step(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v, int row0,
                    int head_rows, float* logits_out);

// How run_decode ran a decode step.
struct DecodeRun {
  bool replayed = false;       // by cudaGraphLaunch
  bool captured = false;       // a graph was captured for this step first
  std::string capture_error;   // a capture failed (the step ran plainly; sc stops trying)
};
// A decode step (every row's logits into sc.logits rows [0, v.tokens())):
// the graph when there is one for this key, capturing it when the previous
// plain step had the same key, else plain launches.
Result<DecodeRun> run_decode(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const StepView& v);

}  // namespace flashscope::model

#endif  // FLASHSCOPE_WITH_CUDA
