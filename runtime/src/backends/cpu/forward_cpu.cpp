// The CPU forward pass of a model (every architecture of ModelConfig) over
// one sequence's KV cache, and the batched decode step: one new token of each
// of n sequences. A sequence's cache is a PagedKvCache of its own (CpuState).
//
// New tokens run in chunks of at most kChunk (bounded scratch; a chunk's
// activations stay in cache while every weight streams past once). For a
// chunk of n tokens, with the cache already holding `cached` tokens:
//
//   x    [n, hidden]  = token_embd[ids] · embed_scale           (rows dequantized)
//   per layer l (bracketed steps where the config has them):
//     xn [n, hidden]  = rms_norm(x) · attn_norm
//     q  [n, H·D]     = xn · Wqᵀ [+ bq];  k, v [n, KV·D] = xn · Wk/vᵀ [+ bk/bv]  (Q8 activations)
//     [q, k           = rms_norm per head (q_norm, k_norm)]      qwen3, gemma3
//     q, k            = rope(q, k, positions; layer l's base)    pairs (llama) or halves (NeoX)
//     cache K/V [cached .. cached+n) = bf16(k), bf16(v)          append_kv at the positions' slots
//     [kept: bf16(q) rows, when an attention capture armed layer l]  model/query_tap.hpp
//     o  [n, H·D]     = attention(bf16(q), cache[0, cached+n))   causal, bottom-right, scale attn_scale,
//                       keys within layer l's window             paged_attention on Device::kCpu: the
//                                                                pages where they lie for a few rows,
//                                                                gathered for a prompt
//     a               = o · Woᵀ [+ bo];  [a = rms_norm(a) · post_attn_norm]
//     x              += a
//     xn              = rms_norm(x) · ffn_norm
//     f               = (act(xn · Wgateᵀ) ⊙ (xn · Wupᵀ)) · Wdownᵀ    act: silu or gelu_tanh
//     [f = rms_norm(f) · post_ffn_norm];  x += f
//   logits [rows, vocab] = rms_norm(x[rows]) · output_norm · Woutᵀ   (rows: last or all)
//
// Batched decode (cpu_forward_batch): the same chunk with row i the next
// token of sequence i, so every weight streams past once for the whole
// batch; K/V go to each sequence's own cache and attention runs per row
// over its own sequence. The matmuls then skip the 4-token tiles: each row
// takes the per-token kernel a solo decode step takes, so a batched row's
// logits are the solo step's bit for bit (tiles sum in another order).
// The first sequence's scratch and thread advisor serve the batch.
//
// Threads: the team size of every OpenMP region of a call (matmuls and
// attention) is ModelOptions.threads, or what the sequence's ThreadAdvisor
// says the machine's load allows (cpu_load.hpp) of cpu_threads()'s default
// (the physical cores, bounded: cpu_threads.hpp).
//
// The cache only grows: tokens are written into slots past st.tokens.size()
// and the count moves at the very end, so a failed call leaves the sequence
// as it was (the slots it wrote are beyond the count and get overwritten).
//
// The cache. Each sequence owns a PagedKvCache holding one sequence whose
// pages cover its whole capacity, reserved when it is made, so a forward
// never allocates a page and never fails for want of one. As on CUDA the
// engine counts the tokens itself (st.tokens; the cache's own length stays
// 0) and writes position t at the slot its block table gives. One cache per
// sequence, not one per model as on CUDA: the CPU's batched step attends
// each sequence on its own anyway, and a cache that never grows never copies
// its pools, which would commit every reserved page. The pools are left
// unwritten at creation, so the operating system commits a page of memory
// only when a token is written into it: a full 8k context is reserved, not
// paid for.
//
// A q8_0 or q4_0 cache (ModelOptions::kv_type) keeps its pools itself, in
// the layout of attention/cpu/kv_q8.hpp or kv_q4.hpp (its pages the block
// table's identity), K/V quantized from the float rows as they are appended;
// attention then runs the decode kernel over it for every chunk, prompts
// included (attention/cpu/decode_attention.hpp, kv_q8 / kv_q4): it reads the
// codes where they lie, so a prompt needs no bf16 copy of the cache.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/backend.hpp"
#include "backends/capture_backend.hpp"
#include "backends/cpu/cpu_load.hpp"
#include "backends/cpu/model_ops.hpp"
#include "backends/cpu/openmp.hpp"
#include "backends/cpu/quant_matmul.hpp"
#include "backends/cpu/quant_matmul_kdot.hpp"
#include "backends/cpu/quant_matmul_kquant.hpp"
#include "attention/cpu/decode_attention.hpp"
#include "attention/cpu/kv_q4.hpp"
#include "attention/cpu/kv_q8.hpp"
#include "flashscope/cpu_threads.hpp"
#include "flashscope/half.hpp"
#include "flashscope/kv_cache.hpp"
#include "flashscope/paged_attention.hpp"
#include "util/math.hpp"

namespace flashscope::model {
namespace {

constexpr int kChunk = 128;  // tokens per forward chunk
// Tokens per page of a sequence's cache: the largest the cache takes. A
// prompt's attention gathers the pages (one copy per page and kv-head), so
// fewer, longer runs; a decode step's 64-key blocks never straddle a page.
constexpr int kPageSize = 256;

// Sets the calling thread's OpenMP team size (nthreads-var, an ICV of this
// thread only) for the duration of a forward call, and restores it.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int threads) {
#ifdef _OPENMP
    if (threads > 0) {
      saved_ = omp_get_max_threads();
      omp_set_num_threads(threads);
    }
#else
    (void)threads;
#endif
  }
  ~ThreadCountScope() {
#ifdef _OPENMP
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int saved_ = 0;
};

// The team of a call with ModelOptions::threads 0. Spinning threads
// (libgomp's default) make a preempted member cost the others its whole
// time slice at every barrier, so the team shrinks by the cores other
// programs keep busy (cpu_load.hpp). Sleeping threads (OMP_WAIT_POLICY=
// passive, which the app sets on small machines: openmp_wait.hpp) hand
// their cores back at once and the preempted one runs
// sooner, so there the whole team is faster under load than a shrunk one
// (bench/TUNING.md#cpu).
int auto_threads(cpu::ThreadAdvisor& advisor) {
  const CpuThreads& t = cpu_threads();
  return t.wait == OpenMpWait::kSleep ? t.default_threads : advisor.advise(t.default_threads);
}

// Activations of one chunk, allocated on the first forward and reused.
struct Scratch {
  int rows = 0;  // chunk capacity in tokens
  std::vector<float> x, xn, q, k, v, att, gate, up;
  // RoPE tables of the chunk's positions, one per distinct (base, scale)
  // among the layers (gemma3: the global and the sliding layers').
  struct Rope {
    float base = 0.0f, scale = 0.0f;
    std::vector<float> cos, sin;  // [rows, rope_dim / 2]
  };
  Rope rope[2];
  std::vector<int32_t> positions;        // a batch's RoPE positions (one per sequence)
  std::vector<uint16_t> q_bf16, o_bf16;  // attention operands
  std::vector<uint16_t> k_bf16, v_bf16;  // the chunk's new K/V rows, appended to the cache
  std::vector<Slot> slots;               // their cache slots
  std::vector<cpu::BlockQ8> xq;          // quantized input of the current matmuls
  std::vector<cpu::TileQ8> tiles;        // the same regrouped by 4-token tiles (prefill)
  std::vector<cpu::TileQ8K> ktiles;      // per-256 16-token tiles for K-quant weights (prefill)
  std::vector<cpu::BlockQ8K> kx;         // per-256 blocks of each token for K-quant weights (decode)
};

// One layer's quantized pool (K or V): [pages, kv_heads, kv_q8_head_bytes
// or kv_q4_head_bytes], left unwritten at creation as the bf16 pools are.
struct QuantPool {
  uint8_t* data = nullptr;
  QuantPool() = default;
  QuantPool(const QuantPool&) = delete;
  QuantPool& operator=(const QuantPool&) = delete;
  QuantPool(QuantPool&& o) noexcept : data(std::exchange(o.data, nullptr)) {}
  QuantPool& operator=(QuantPool&&) = delete;
  ~QuantPool() { std::free(data); }
};

// Bytes of one (page, kv-head) block of a quantized cache.
int64_t quant_head_bytes(KvType t, int head_dim) {
  return t == KvType::kQ4_0 ? cpu::kv_q4_head_bytes(kPageSize, head_dim) : cpu::kv_q8_head_bytes(kPageSize, head_dim);
}

struct CpuState final : Sequence::State {
  // K and V of every layer (see the top of this file): pools
  // [pages, kv_heads, kPageSize, head_dim] bf16, one sequence (kv_seq);
  // with a q8_0 or q4_0 cache, kq/vq instead (kv unused).
  PagedKvCache kv;
  int kv_seq = -1;
  std::vector<int32_t> pages;  // kv's block table of kv_seq: every page of capacity, fixed for its life
  KvType kv_type = KvType::kBF16;
  std::vector<QuantPool> kq, vq;  // [layers]
  int64_t quant_page_bytes = 0;   // kv_heads · quant_head_bytes

  bool quantized() const { return kv_type != KvType::kBF16; }
  Scratch scratch;
  cpu::ThreadAdvisor thread_advisor;  // team size under the machine's load (options.threads == 0)

  // The cache slot of the sequence's token t.
  Slot slot(int64_t t) const { return Slot{pages[static_cast<size_t>(t / kPageSize)]} * kPageSize + t % kPageSize; }
  uint64_t cache_bytes() const override {
    if (quantized()) return 2ull * kq.size() * pages.size() * static_cast<uint64_t>(quant_page_bytes);
    const KvCacheConfig& c = kv.config();
    return 2ull * static_cast<uint64_t>(c.num_layers) * pages.size() * kPageSize * static_cast<uint64_t>(c.kv_heads) *
           static_cast<uint64_t>(c.head_dim) * sizeof(uint16_t);
  }
};

Status ensure_scratch(const ModelConfig& c, int rows, Scratch* s) {
  if (s->rows >= rows) return Status::ok_status();
  const size_t n = static_cast<size_t>(rows);
  const size_t q_dim = static_cast<size_t>(c.n_heads) * c.head_dim;
  const size_t kv_dim = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  const size_t max_cols = std::max({static_cast<size_t>(c.hidden), q_dim, static_cast<size_t>(c.ffn)});
  try {
    s->x.resize(n * c.hidden);
    s->xn.resize(n * c.hidden);
    s->q.resize(n * q_dim);
    s->k.resize(n * kv_dim);
    s->v.resize(n * kv_dim);
    s->att.resize(n * q_dim);
    s->gate.resize(n * c.ffn);
    s->up.resize(n * c.ffn);
    for (Scratch::Rope& r : s->rope) {
      r.cos.resize(n * static_cast<size_t>(c.rope_dim / 2));
      r.sin.resize(n * static_cast<size_t>(c.rope_dim / 2));
    }
    s->positions.resize(n);
    s->q_bf16.resize(n * q_dim);
    s->o_bf16.resize(n * q_dim);
    s->k_bf16.resize(n * kv_dim);
    s->v_bf16.resize(n * kv_dim);
    s->slots.resize(n);
    s->xq.resize(n * ((max_cols + cpu::kQ8Block - 1) / cpu::kQ8Block));
    s->tiles.resize(n / cpu::kTileTokens * ((max_cols + cpu::kQ8Block - 1) / cpu::kQ8Block));
    s->ktiles.resize(n / cpu::kKTileTokens * (max_cols / cpu::kQ8KBlock));
    s->kx.resize(n * (max_cols / cpu::kQ8KBlock));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "forward: cannot allocate activation scratch for " + std::to_string(rows) +
                                          " tokens"};
  }
  s->rows = rows;
  return Status::ok_status();
}

// The input of a group of matmuls that share it (Q, K and V read the same
// normed x): quantized (and tiled, for 4+ tokens, unless rows must match
// solo decode steps bit for bit) once, on first use by a weight type that
// needs it.
class MatInput {
 public:
  MatInput(const float* x, int64_t n, int64_t cols, Scratch& s, bool tiled)
      : x_(x), n_(n), cols_(cols), s_(s), tiled_(tiled && n >= cpu::kTileTokens) {}

  // y [n, w.rows] (row stride ldy) = x · Wᵀ
  Status mul(const Matrix& w, float* y, int64_t ldy) {
    const int64_t blocks = cols_ / cpu::kQ8Block;
    // K-quant weights take whole 16-token tiles per 256 columns
    // (quant_matmul_kquant.hpp); the tokens left over run below.
    int64_t done = 0;
    if (tiled_ && cpu::is_k_quant(w.q.type) && cols_ % cpu::kQ8KBlock == 0 && n_ >= cpu::kKTileTokens) {
      if (!kquantized_) {
        cpu::pack_q8k_tiles(x_, cols_, n_, cols_, s_.ktiles.data());
        kquantized_ = true;
      }
      const int64_t n_tiles = n_ / cpu::kKTileTokens;
      FLASHSCOPE_RETURN_IF_ERROR(cpu::matmul_q8k_tiles(w.q, s_.ktiles.data(), n_tiles, y, ldy));
      done = n_tiles * cpu::kKTileTokens;
      if (done == n_) return Status::ok_status();
    }
    // Untiled (decode, a batch's rows, prompts under 4 tokens): K-quant
    // weights take each token against its per-256 blocks (quant_matmul_kdot.hpp).
    if (!tiled_ && cpu::is_k_quant(w.q.type) && cols_ % cpu::kQ8KBlock == 0) {
      const int64_t nsb = cols_ / cpu::kQ8KBlock;
      if (!kx_quantized_) {
        for (int64_t t = 0; t < n_; ++t) cpu::quantize_row_q8k(x_ + t * cols_, s_.kx.data() + t * nsb, cols_);
        kx_quantized_ = true;
      }
      return cpu::matmul_q8k_rows(w.q, s_.kx.data(), n_, y, ldy);
    }
    if (cpu::matmul_uses_q8(w.q.type) && !quantized_) {
      for (int64_t t = 0; t < n_; ++t) cpu::quantize_row_q8(x_ + t * cols_, s_.xq.data() + t * blocks, cols_);
      if (tiled_) cpu::pack_q8_tiles(s_.xq.data(), n_, blocks, s_.tiles.data());
      quantized_ = true;
    }
    // done is a multiple of the 4-token tile, so the rest starts at a tile.
    const cpu::TileQ8* tiles = tiled_ ? s_.tiles.data() + done / cpu::kTileTokens * blocks : nullptr;
    return cpu::matmul(w.q, x_ + done * cols_, cols_, s_.xq.data() + done * blocks, tiles, n_ - done,
                       y + done * ldy, ldy);
  }

 private:
  const float* x_;
  int64_t n_, cols_;
  Scratch& s_;
  bool tiled_;
  bool quantized_ = false;
  bool kquantized_ = false;
  bool kx_quantized_ = false;
};

// Where a chunk's rows live: n consecutive tokens of one sequence (at
// positions [slot0, slot0 + n) of its cache), or one token of each of n
// sequences (batch; row i at position batch[i]->tokens.size() of its own).
struct ChunkRows {
  CpuState* single = nullptr;
  int slot0 = 0;
  CpuState* const* batch = nullptr;
};

// Causal attention of q rows [q_row0, q_row0 + q_len) over one sequence's
// cache of layer l, [0, kv_len): bf16 q/o from scratch. In a layer with a
// sliding window of W keys, the query in slot t sees slots (t − W, t]
// (window_left = W − 1; both paths skip keys outside every row's window).
// The CPU paged attention runs a few rows per kv-head (decode, a short turn)
// over the pages where they lie, reading each K/V row once for all the
// q-heads of its kv-head, and gathers the pages for a prompt's tiled pass.
// max_kv_len is kv_len, which fixes the decode path's KV ranges as a call
// without it would.
Status attend(const ModelConfig& c, Scratch& s, const CpuState& seq, int l, int q_row0, int q_len, int kv_len) {
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int window = c.layer(l).window;
  if (seq.quantized()) {
    cpu::DecodeParams d;
    d.dtype = DType::kBF16;
    d.kv_q8 = seq.kv_type == KvType::kQ8_0;
    d.kv_q4 = seq.kv_type == KvType::kQ4_0;
    d.q_heads = c.n_heads;
    d.kv_heads = c.n_kv_heads;
    d.q_len = q_len;
    d.head_dim = c.head_dim;
    d.q = bshd(s.q_bf16.data() + q_row0 * q_dim, q_len, c.n_heads, c.head_dim);
    d.o = bshd(s.o_bf16.data() + q_row0 * q_dim, q_len, c.n_heads, c.head_dim);
    d.kv.k = seq.kq[static_cast<size_t>(l)].data;
    d.kv.v = seq.vq[static_cast<size_t>(l)].data;
    d.kv.page_stride = seq.quant_page_bytes;
    d.kv.head_stride = quant_head_bytes(seq.kv_type, c.head_dim);
    d.kv.page_size = kPageSize;
    d.kv.block_tables = seq.pages.data();
    d.kv.block_table_stride = static_cast<int>(seq.pages.size());
    d.kv_lens = &kv_len;
    d.max_kv_len = kv_len;
    d.causal = true;
    d.softmax_scale = c.attn_scale;
    if (window > 0) d.window_left = window - 1;
    return cpu::decode_attention(d);
  }
  PagedAttentionParams p;
  p.q = bshd(s.q_bf16.data() + q_row0 * q_dim, q_len, c.n_heads, c.head_dim);
  p.o = bshd(s.o_bf16.data() + q_row0 * q_dim, q_len, c.n_heads, c.head_dim);
  p.k_pages = seq.kv.k_pages(l);
  p.v_pages = seq.kv.v_pages(l);
  p.block_tables = seq.pages.data();
  p.block_table_stride = static_cast<int>(seq.pages.size());
  p.kv_lens = &kv_len;
  p.batch = 1;
  p.q_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.q_len = q_len;
  p.head_dim = c.head_dim;
  p.page_size = kPageSize;
  p.max_kv_len = kv_len;
  p.num_pages = seq.kv.num_pages();
  p.softmax_scale = c.attn_scale;
  p.causal = true;  // bottom-right: query i sees slots [0, kv_len - q_len + i]
  if (window > 0) p.window_left = window - 1;
  p.dtype = DType::kBF16;
  p.device = Device::kCpu;
  return paged_attention(p);
}

// Writes rows [row0, row0 + n) of the chunk's new K/V (bf16 in scratch) into
// seq's cache of layer l at its positions [pos0, pos0 + n).
Status append_rows(const ModelConfig& c, Scratch& s, const CpuState& seq, int l, int row0, int n, int64_t pos0) {
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  if (seq.quantized()) {  // from the float rows: one rounding, not bf16's and then the cache's
    const auto store = seq.kv_type == KvType::kQ4_0 ? cpu::kv_q4_store : cpu::kv_q8_store;
    for (int i = 0; i < n; ++i) {
      const int64_t t = pos0 + i;
      const int64_t page = seq.pages[static_cast<size_t>(t / kPageSize)];
      store(s.k.data() + (row0 + i) * kv_dim, s.v.data() + (row0 + i) * kv_dim, c.n_kv_heads, c.head_dim, kPageSize,
            seq.kq[static_cast<size_t>(l)].data + page * seq.quant_page_bytes,
            seq.vq[static_cast<size_t>(l)].data + page * seq.quant_page_bytes, static_cast<int>(t % kPageSize));
    }
    return Status::ok_status();
  }
  for (int i = 0; i < n; ++i) s.slots[static_cast<size_t>(row0 + i)] = seq.slot(pos0 + i);
  AppendKvParams a;
  a.k_new = bshd(s.k_bf16.data() + row0 * kv_dim, n, c.n_kv_heads, c.head_dim);
  a.v_new = bshd(s.v_bf16.data() + row0 * kv_dim, n, c.n_kv_heads, c.head_dim);
  a.slots = s.slots.data() + row0;
  a.num_tokens = n;
  a.k_pages = seq.kv.k_pages(l);
  a.v_pages = seq.kv.v_pages(l);
  a.kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.page_size = kPageSize;
  a.num_pages = seq.kv.num_pages();
  a.dtype = DType::kBF16;
  a.device = Device::kCpu;
  return append_kv(a);
}

void add_bias(float* y, const std::vector<float>& bias, int64_t n) {
  if (bias.empty()) return;
  const size_t d = bias.size();
  for (int64_t t = 0; t < n; ++t)
    for (size_t i = 0; i < d; ++i) y[static_cast<size_t>(t) * d + i] += bias[i];
}

// The chunk's RoPE table for layer l (computed on first use by a layer of its base).
const Scratch::Rope& rope_for(const ModelConfig& c, const Weights& w, Scratch& s, int l, const int32_t* pos, int n) {
  const LayerConfig L = c.layer(l);
  for (const Scratch::Rope& r : s.rope)
    if (r.base == L.rope_base && r.scale == L.rope_scale) return r;
  Scratch::Rope& r = s.rope[0].base == 0.0f ? s.rope[0] : s.rope[1];
  r.base = L.rope_base;
  r.scale = L.rope_scale;
  cpu::rope_table(pos, n, c.rope_dim, L.rope_base, L.rope_scale, w.rope_freqs.empty() ? nullptr : w.rope_freqs.data(),
                  r.cos.data(), r.sin.data());
  return r;
}

void add_into(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

void to_bf16(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

// One chunk of n rows (see ChunkRows), ids and RoPE positions per row.
// logits_out: null, or where the logits of rows [row0, n) go ([n - row0, vocab]).
Status forward_chunk(const Model::Impl& m, Scratch& s, const ChunkRows& rows, const int32_t* ids, const int32_t* pos,
                     int n, int row0, float* logits_out) {
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  const int64_t hidden = c.hidden;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const bool batch = rows.batch != nullptr;
  const bool tiled = !batch;

  for (int i = 0; i < n; ++i) {
    FLASHSCOPE_RETURN_IF_ERROR(dequantize_rows(*w.token_embd.tensor, ids[i], 1, s.x.data() + i * hidden));
  }
  if (c.embed_scale != 1.0f)
    for (int64_t i = 0; i < n * hidden; ++i) s.x[static_cast<size_t>(i)] *= c.embed_scale;
  for (Scratch::Rope& r : s.rope) r.base = 0.0f;  // new positions: recompute on first use

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];

    // Attention block.
    cpu::rms_norm(s.x.data(), L.attn_norm.data(), s.xn.data(), n, hidden, c.rms_eps);
    {
      MatInput in(s.xn.data(), n, hidden, s, tiled);
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.wq, s.q.data(), q_dim));
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.wk, s.k.data(), kv_dim));
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.wv, s.v.data(), kv_dim));
    }
    add_bias(s.q.data(), L.bq, n);
    add_bias(s.k.data(), L.bk, n);
    add_bias(s.v.data(), L.bv, n);
    if (c.qk_norm) {
      cpu::rms_norm(s.q.data(), L.q_norm.data(), s.q.data(), static_cast<int64_t>(n) * c.n_heads, c.head_dim, c.rms_eps);
      cpu::rms_norm(s.k.data(), L.k_norm.data(), s.k.data(), static_cast<int64_t>(n) * c.n_kv_heads, c.head_dim,
                    c.rms_eps);
    }
    {
      const Scratch::Rope& r = rope_for(c, w, s, l, pos, n);
      auto rope = c.rope_style == RopeStyle::kPairs ? cpu::rope_pairs : cpu::rope_halves;
      rope(s.q.data(), n, c.n_heads, c.head_dim, c.rope_dim, r.cos.data(), r.sin.data());
      rope(s.k.data(), n, c.n_kv_heads, c.head_dim, c.rope_dim, r.cos.data(), r.sin.data());
    }
    to_bf16(s.q.data(), s.q_bf16.data(), static_cast<size_t>(n * q_dim));
    if (!batch) {
      if (QueryTap* tap = rows.single->q_tap.get())
        FLASHSCOPE_RETURN_IF_ERROR(tap->keep(l, rows.slot0, s.q_bf16.data(), n));
    } else {
      for (int i = 0; i < n; ++i) {
        if (QueryTap* tap = rows.batch[i]->q_tap.get())
          FLASHSCOPE_RETURN_IF_ERROR(tap->keep(l, static_cast<int>(rows.batch[i]->tokens.size()),
                                               s.q_bf16.data() + i * q_dim, 1));
      }
    }
    if (m.options.kv_type == KvType::kBF16) {  // a quantized cache quantizes the float rows (append_rows)
      to_bf16(s.k.data(), s.k_bf16.data(), static_cast<size_t>(n * kv_dim));
      to_bf16(s.v.data(), s.v_bf16.data(), static_cast<size_t>(n * kv_dim));
    }
    if (!batch) {
      const CpuState& st = *rows.single;
      FLASHSCOPE_RETURN_IF_ERROR(append_rows(c, s, st, l, 0, n, rows.slot0));
      FLASHSCOPE_RETURN_IF_ERROR(attend(c, s, st, l, 0, n, rows.slot0 + n));
    } else {
      for (int i = 0; i < n; ++i) {
        const CpuState& st = *rows.batch[i];
        const int pos = static_cast<int>(st.tokens.size());
        FLASHSCOPE_RETURN_IF_ERROR(append_rows(c, s, st, l, i, 1, pos));
        FLASHSCOPE_RETURN_IF_ERROR(attend(c, s, st, l, i, 1, pos + 1));
      }
    }
    for (int64_t i = 0; i < n * q_dim; ++i) s.att[static_cast<size_t>(i)] = bf16_to_float(s.o_bf16[static_cast<size_t>(i)]);
    {
      MatInput in(s.att.data(), n, q_dim, s, tiled);
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.wo, s.xn.data(), hidden));
    }
    add_bias(s.xn.data(), L.bo, n);
    if (c.post_norms) cpu::rms_norm(s.xn.data(), L.post_attn_norm.data(), s.xn.data(), n, hidden, c.rms_eps);
    add_into(s.x.data(), s.xn.data(), static_cast<size_t>(n * hidden));

    // Feed-forward block.
    cpu::rms_norm(s.x.data(), L.ffn_norm.data(), s.xn.data(), n, hidden, c.rms_eps);
    {
      MatInput in(s.xn.data(), n, hidden, s, tiled);
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.gate, s.gate.data(), c.ffn));
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.up, s.up.data(), c.ffn));
    }
    if (c.ffn_activation == FfnActivation::kGeluTanh) {
      cpu::geglu_tanh(s.gate.data(), s.up.data(), static_cast<int64_t>(n) * c.ffn);
    } else {
      cpu::swiglu(s.gate.data(), s.up.data(), static_cast<int64_t>(n) * c.ffn);
    }
    {
      MatInput in(s.gate.data(), n, c.ffn, s, tiled);
      FLASHSCOPE_RETURN_IF_ERROR(in.mul(L.down, s.xn.data(), hidden));
    }
    if (c.post_norms) cpu::rms_norm(s.xn.data(), L.post_ffn_norm.data(), s.xn.data(), n, hidden, c.rms_eps);
    add_into(s.x.data(), s.xn.data(), static_cast<size_t>(n * hidden));
  }

  if (logits_out != nullptr && row0 < n) {
    const int head_rows = n - row0;
    const float* x_rows = s.x.data() + static_cast<int64_t>(row0) * hidden;
    cpu::rms_norm(x_rows, w.output_norm.data(), s.xn.data(), head_rows, hidden, c.rms_eps);
    MatInput in(s.xn.data(), head_rows, hidden, s, tiled);
    FLASHSCOPE_RETURN_IF_ERROR(in.mul(w.output, logits_out, c.vocab));
  }
  return Status::ok_status();
}

}  // namespace

CpuLayerCache cpu_layer_cache(const Sequence::State& state, int layer) {
  const auto& st = static_cast<const CpuState&>(state);
  if (st.quantized()) {
    CpuLayerCache q;
    q.kv_type = st.kv_type;
    q.k_quant = st.kq[static_cast<size_t>(layer)].data;
    q.v_quant = st.vq[static_cast<size_t>(layer)].data;
    q.block_table = st.pages.data();
    q.page_size = kPageSize;
    q.capacity = st.capacity;
    return q;
  }
  return {static_cast<const uint16_t*>(st.kv.k_pages(layer)), static_cast<const uint16_t*>(st.kv.v_pages(layer)),
          st.pages.data(), kPageSize, st.capacity};
}

Result<std::unique_ptr<Sequence::State>> cpu_new_state(const Model::Impl& m, int capacity) {
  const ModelConfig& c = m.config;
  auto st = std::unique_ptr<CpuState>(new (std::nothrow) CpuState());
  if (!st) return Status(StatusCode::kOutOfMemory, "cannot allocate a sequence");
  st->owner = &m;
  st->capacity = capacity;
  if (m.options.kv_type != KvType::kBF16) {
    const int num_pages = static_cast<int>(ceil_div<int64_t>(capacity, kPageSize));
    const std::string name = kv_type_name(m.options.kv_type);
    st->kv_type = m.options.kv_type;
    st->quant_page_bytes = c.n_kv_heads * quant_head_bytes(st->kv_type, c.head_dim);
    const size_t pool = static_cast<size_t>(st->quant_page_bytes) * static_cast<size_t>(num_pages);
    try {
      st->kq.resize(static_cast<size_t>(c.n_layers));
      st->vq.resize(static_cast<size_t>(c.n_layers));
      st->pages.resize(static_cast<size_t>(num_pages));
      for (int i = 0; i < num_pages; ++i) st->pages[static_cast<size_t>(i)] = i;
      st->tokens.reserve(static_cast<size_t>(capacity));
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "cannot allocate a sequence's " + name + " cache bookkeeping");
    }
    for (int l = 0; l < c.n_layers; ++l) {
      st->kq[static_cast<size_t>(l)].data = static_cast<uint8_t*>(std::malloc(pool));
      st->vq[static_cast<size_t>(l)].data = static_cast<uint8_t*>(std::malloc(pool));
      if (st->kq[static_cast<size_t>(l)].data == nullptr || st->vq[static_cast<size_t>(l)].data == nullptr)
        return Status(StatusCode::kOutOfMemory, "cannot reserve a " + name + " KV cache of " +
                                                    std::to_string(capacity) + " tokens (" +
                                                    std::to_string((2 * pool * c.n_layers) >> 20) + " MiB)");
    }
    return std::unique_ptr<Sequence::State>(std::move(st));
  }
  KvCacheConfig kc;
  kc.num_layers = c.n_layers;
  kc.num_pages = static_cast<int>(ceil_div<int64_t>(capacity, kPageSize));
  kc.page_size = kPageSize;
  kc.kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.dtype = DType::kBF16;
  kc.device = Device::kCpu;
  auto made = PagedKvCache::create(kc);
  if (!made.ok()) {
    const uint64_t bytes = 2ull * static_cast<uint64_t>(kc.num_pages) * kPageSize * static_cast<uint64_t>(c.n_layers) *
                           static_cast<uint64_t>(c.n_kv_heads) * static_cast<uint64_t>(c.head_dim) * sizeof(uint16_t);
    return Status(made.status().code(), "cannot reserve a KV cache of " + std::to_string(capacity) + " tokens (" +
                                            std::to_string(bytes >> 20) + " MiB): " + made.status().message());
  }
  st->kv = std::move(made).value();
  st->kv_seq = st->kv.create_sequence();
  if (st->kv_seq < 0) return Status(StatusCode::kOutOfMemory, "cannot add a sequence to its KV cache");
  FLASHSCOPE_RETURN_IF_ERROR(st->kv.reserve(st->kv_seq, capacity));
  try {
    st->pages = st->kv.block_table(st->kv_seq);
    st->tokens.reserve(static_cast<size_t>(capacity));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the token list");
  }
  return std::unique_ptr<Sequence::State>(std::move(st));
}

Status cpu_forward(const Model::Impl& m, Sequence::State& state, const int32_t* tokens, const int32_t* positions,
                   int n, LogitsMode mode, std::vector<float>* logits) {
  auto& st = static_cast<CpuState&>(state);
  const ModelConfig& c = m.config;
  const int cached = static_cast<int>(st.tokens.size());
  FLASHSCOPE_RETURN_IF_ERROR(ensure_scratch(c, std::min(n, kChunk), &st.scratch));
  if (mode != LogitsMode::kNone) {
    const size_t rows = mode == LogitsMode::kAll ? static_cast<size_t>(n) : 1;
    try {
      logits->resize(rows * static_cast<size_t>(c.vocab));
    } catch (const std::bad_alloc&) {
      return {StatusCode::kOutOfMemory, "forward: cannot allocate logits"};
    }
  }
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const int cn = std::min(kChunk, n - c0);
    // Per chunk, so a long prefill follows the load as decode steps do.
    const ThreadCountScope threads(m.options.threads > 0 ? m.options.threads : auto_threads(st.thread_advisor));
    const bool last_chunk = c0 + cn == n;
    int row0 = cn;  // no logits from this chunk
    float* out = nullptr;
    if (mode == LogitsMode::kAll) {
      row0 = 0;
      out = logits->data() + static_cast<size_t>(c0) * c.vocab;
    } else if (mode == LogitsMode::kLast && last_chunk) {
      row0 = cn - 1;
      out = logits->data();
    }
    ChunkRows rows;
    rows.single = &st;
    rows.slot0 = cached + c0;
    FLASHSCOPE_RETURN_IF_ERROR(forward_chunk(m, st.scratch, rows, tokens + c0, positions + c0, cn, row0, out));
  }
  st.tokens.insert(st.tokens.end(), tokens, tokens + n);  // within the reserved capacity: no allocation
  return Status::ok_status();
}

Status cpu_forward_batch(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                         std::vector<float>* logits) {
  auto& lead = static_cast<CpuState&>(*states[0]);
  const ModelConfig& c = m.config;
  Scratch& s = lead.scratch;
  FLASHSCOPE_RETURN_IF_ERROR(ensure_scratch(c, std::min(n, kChunk), &s));
  std::vector<CpuState*> seqs;
  try {
    seqs.resize(static_cast<size_t>(n));
    if (logits != nullptr) logits->resize(static_cast<size_t>(n) * static_cast<size_t>(c.vocab));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "forward_batch: cannot allocate the batch's logits"};
  }
  for (int i = 0; i < n; ++i) seqs[static_cast<size_t>(i)] = static_cast<CpuState*>(states[i]);
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const int cn = std::min(kChunk, n - c0);
    const ThreadCountScope threads(m.options.threads > 0 ? m.options.threads : auto_threads(lead.thread_advisor));
    for (int i = 0; i < cn; ++i) s.positions[static_cast<size_t>(i)] = static_cast<int32_t>(seqs[static_cast<size_t>(c0 + i)]->tokens.size());
    ChunkRows rows;
    rows.batch = seqs.data() + c0;
    float* out = logits != nullptr ? logits->data() + static_cast<size_t>(c0) * c.vocab : nullptr;
    FLASHSCOPE_RETURN_IF_ERROR(forward_chunk(m, s, rows, tokens + c0, s.positions.data(), cn, 0, out));
  }
  // Counts move last: a failed call leaves every sequence as it was.
  for (int i = 0; i < n; ++i) seqs[static_cast<size_t>(i)]->tokens.push_back(tokens[i]);  // within capacity
  return Status::ok_status();
}

}  // namespace flashscope::model
