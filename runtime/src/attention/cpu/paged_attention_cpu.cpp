// Paged attention on the CPU: decode-sized calls straight over the pages
// (decode_attention.hpp); larger ones gather, then the dense CPU attention.
//
// Gathered backend (paged_attention past kDecodeMaxRows rows per kv-head): sequences are taken in chunks whose gathered
// K/V fits kGatherBudgetBytes (a chunk holds at least one sequence, however
// long). A chunk runs as ONE varlen attention_tiled call, so OpenMP spreads
// (sequence, q-head, 64-query block) items of the whole chunk over the
// threads: decode of many short sequences parallelises across sequences,
// not only across the few q-heads of one.
//
// With a left window (window_left = W) a sequence's keys before the page
// holding position kv_len − q_len − W (its first new token's first key) are
// never read: they are not gathered, and the dense call sees the sequence
// from that page on. Its bottom-right alignment keeps every position
// relative to the end, so the window means the same on the shorter run.
//
// Scratch of one chunk (elements of p.dtype unless noted):
//   k, v : [kv_heads, chunk_tokens, head_dim]  head-major, so one page's run
//          of one head ([page_size, head_dim], contiguous in the pool) is one
//          memcpy; attention_tiled reads it through strides
//          (seq_stride = head_dim, head_stride = chunk_tokens · head_dim)
//   q, o : [chunk_batch · q_len, q_heads, head_dim]  packed, as varlen wants;
//          q is copied in and o scattered back through the caller's strides
//          (q_len · q_heads · head_dim per sequence: small next to the K/V)
//   lse  : float [q_heads, chunk_batch · q_len]  (varlen layout), scattered
//          into the caller's dense [batch, q_heads, q_len]
//   cu_seqlens_q / _k : int32 [chunk_batch + 1]
// A chunk of one sequence (a prompt's chunk in the engine, a long sequence)
// needs none of q, o, lse and cu_seqlens: it runs as a dense call of batch 1
// on the caller's q, o and lse, the same tiles with the same bits. The K/V
// scratch is left uninitialised: the gather writes every row the call reads.
//
// Reference (paged_attention_reference): one sequence at a time, token by
// token through the block table into [kv_len, kv_heads, head_dim], then
// cpu::attention_reference (FP64). Deliberately plain and separate from the
// backend's gather.
#include "attention/cpu/paged_attention_cpu.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "attention/cpu/attention_cpu.hpp"
#include "flashscope/attention.hpp"

namespace flashscope::cpu {
namespace {

constexpr int64_t kGatherBudgetBytes = int64_t{64} << 20;  // K + V scratch of one chunk
// A smaller gather runs on the calling thread: a copy of a few MB gains
// nothing from a second thread, and every fork/join is a barrier that costs
// a whole time slice when another process holds a team member's core (an
// engine prompt chunk gathers once per layer).
[[maybe_unused]] constexpr int64_t kParallelGatherBytes = int64_t{8} << 20;

struct Chunk {
  int first = 0, count = 0;  // sequences [first, first + count)
  int64_t tokens = 0;        // Σ gathered tokens over the chunk
};

// The first key sequence b's new tokens can see, rounded down to its page:
// 0 without a left window.
int first_gathered(const PagedAttentionParams& p, int b) {
  if (p.window_left < 0) return 0;
  const int64_t first_key = int64_t{p.kv_lens[b]} - p.q_len - p.window_left;
  if (first_key <= 0) return 0;
  return static_cast<int>(first_key / p.page_size * p.page_size);
}

std::vector<Chunk> make_chunks(const PagedAttentionParams& p, int64_t bytes_per_token) {
  const int64_t budget_tokens = std::max<int64_t>(1, kGatherBudgetBytes / bytes_per_token);
  std::vector<Chunk> chunks;
  Chunk c;
  for (int b = 0; b < p.batch; ++b) {
    const int64_t len = p.kv_lens[b] - first_gathered(p, b);
    if (c.count > 0 && c.tokens + len > budget_tokens) {
      chunks.push_back(c);
      c = Chunk{b, 0, 0};
    }
    c.count += 1;
    c.tokens += len;
  }
  chunks.push_back(c);
  return chunks;
}

// Copies the pages of sequences [c.first, c.first + c.count) from their
// first gathered page on into the head-major scratch, tokens of sequence b
// starting at row cu_k[b - first].
void gather_chunk(const PagedAttentionParams& p, const Chunk& c, const int32_t* cu_k, uint16_t* k_out,
                  uint16_t* v_out) {
  const int P = p.page_size, D = p.head_dim, H = p.kv_heads;
  const auto* k_pages = static_cast<const uint16_t*>(p.k_pages);
  const auto* v_pages = static_cast<const uint16_t*>(p.v_pages);
  const int64_t head_stride = c.tokens * D;
  const int items = c.count * H;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) if (2 * c.tokens * H * D * int64_t{sizeof(uint16_t)} >= kParallelGatherBytes)
#endif
  for (int item = 0; item < items; ++item) {
    const int i = item / H, h = item % H;
    const int b = c.first + i;
    const int len = p.kv_lens[b];
    const int start = first_gathered(p, b);
    const int32_t* table = p.block_tables + int64_t{b} * p.block_table_stride;
    for (int t0 = start; t0 < len; t0 += P) {
      const int n = std::min(P, len - t0);
      const int64_t src = (int64_t{table[t0 / P]} * H + h) * P * D;
      const int64_t dst = h * head_stride + (int64_t{cu_k[i]} + t0 - start) * D;
      std::memcpy(k_out + dst, k_pages + src, size_t(n) * D * sizeof(uint16_t));
      std::memcpy(v_out + dst, v_pages + src, size_t(n) * D * sizeof(uint16_t));
    }
  }
}

// The dense attention's parameters every gathered call shares; the caller
// sets batch, kv_len and the tensors.
PrefillParams tiled_params(const PagedAttentionParams& p) {
  PrefillParams a;
  a.device = Device::kCpu;
  a.dtype = p.dtype;
  a.q_heads = p.q_heads;
  a.kv_heads = p.kv_heads;
  a.q_len = p.q_len;
  a.head_dim = p.head_dim;
  a.causal = p.causal;
  a.softmax_scale = p.softmax_scale;
  a.window_left = p.window_left;
  a.window_right = p.window_right;
  a.softcap = p.softcap;
  return a;
}

}  // namespace

DecodeParams decode_params(const PagedAttentionParams& p) {
  DecodeParams d;
  d.dtype = p.dtype;
  d.batch = p.batch;
  d.q_heads = p.q_heads;
  d.kv_heads = p.kv_heads;
  d.q_len = p.q_len;
  d.head_dim = p.head_dim;
  d.q = p.q;
  d.o = p.o;
  d.lse = p.lse;
  d.kv.k = p.k_pages;
  d.kv.v = p.v_pages;
  d.kv.page_size = p.page_size;
  d.kv.row_stride = p.head_dim;
  d.kv.head_stride = int64_t{p.page_size} * p.head_dim;
  d.kv.page_stride = int64_t{p.kv_heads} * p.page_size * p.head_dim;
  d.kv.block_tables = p.block_tables;
  d.kv.block_table_stride = p.block_table_stride;
  d.kv_lens = p.kv_lens;
  d.max_kv_len = p.max_kv_len;
  d.causal = p.causal;
  d.softmax_scale = p.softmax_scale;
  d.window_left = p.window_left;
  d.window_right = p.window_right;
  d.softcap = p.softcap;
  return d;
}

Status paged_attention(const PagedAttentionParams& p) {
  if (p.kv_heads > 0 && p.q_heads % p.kv_heads == 0 && int64_t{p.q_len} * (p.q_heads / p.kv_heads) <= kDecodeMaxRows)
    return decode_attention(decode_params(p));
  const int D = p.head_dim, Hq = p.q_heads, Lq = p.q_len;
  const int64_t row_elems = int64_t{p.kv_heads} * D;
  const int64_t bytes_per_token = 2 * row_elems * int64_t{sizeof(uint16_t)};  // K and V
  const int64_t q_row = int64_t{Hq} * D;                                      // one token of q/o, packed

  std::vector<Chunk> chunks;
  std::unique_ptr<uint16_t[]> k_s, v_s;
  std::vector<uint16_t> q_s, o_s;
  std::vector<float> lse_s;
  std::vector<int32_t> cu_q, cu_k;
  try {
    chunks = make_chunks(p, bytes_per_token);
    int64_t max_tokens = 0;
    int max_packed = 0;  // sequences of the largest chunk that runs packed (varlen)
    for (const Chunk& c : chunks) {
      max_tokens = std::max(max_tokens, c.tokens);
      if (c.count > 1) max_packed = std::max(max_packed, c.count);
    }
    k_s.reset(new (std::nothrow) uint16_t[size_t(std::max<int64_t>(1, max_tokens * row_elems))]);
    v_s.reset(new (std::nothrow) uint16_t[size_t(std::max<int64_t>(1, max_tokens * row_elems))]);
    if (!k_s || !v_s) throw std::bad_alloc();
    q_s.resize(size_t(int64_t{max_packed} * Lq * q_row));
    o_s.resize(q_s.size());
    if (p.lse != nullptr) lse_s.resize(size_t(int64_t{max_packed} * Lq * Hq));
    cu_q.resize(size_t(max_packed) + 1);
    cu_k.resize(size_t(max_packed) + 1);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "CPU paged attention: cannot allocate gather scratch"};
  }

  const auto* q = static_cast<const uint16_t*>(p.q.data);
  auto* o = static_cast<uint16_t*>(p.o.data);
  const size_t row_bytes = size_t(D) * sizeof(uint16_t);
  for (const Chunk& c : chunks) {
    if (c.count == 1) {
      const int b = c.first;
      const int len = p.kv_lens[b] - first_gathered(p, b);
      const int32_t cu_one[2] = {0, len};
      gather_chunk(p, c, cu_one, k_s.get(), v_s.get());
      PrefillParams a = tiled_params(p);
      a.batch = 1;
      a.kv_len = len;
      a.q = p.q;
      a.q.data = const_cast<uint16_t*>(q) + b * p.q.batch_stride;
      a.o = p.o;
      a.o.data = o + b * p.o.batch_stride;
      a.k = {k_s.get(), 0, D, c.tokens * D};
      a.v = {v_s.get(), 0, D, c.tokens * D};
      a.lse = p.lse != nullptr ? p.lse + int64_t{b} * Hq * Lq : nullptr;
      FLASHSCOPE_RETURN_IF_ERROR(attention_tiled(a));
      continue;
    }
    cu_q[0] = 0;
    cu_k[0] = 0;
    int max_len = 0;
    for (int i = 0; i < c.count; ++i) {
      const int len = p.kv_lens[c.first + i] - first_gathered(p, c.first + i);
      cu_q[size_t(i) + 1] = cu_q[size_t(i)] + Lq;
      cu_k[size_t(i) + 1] = cu_k[size_t(i)] + len;
      max_len = std::max(max_len, len);
    }
    gather_chunk(p, c, cu_k.data(), k_s.get(), v_s.get());
    for (int i = 0; i < c.count; ++i)
      for (int t = 0; t < Lq; ++t)
        for (int h = 0; h < Hq; ++h) {
          const int64_t src = (c.first + i) * p.q.batch_stride + t * p.q.seq_stride + h * p.q.head_stride;
          std::memcpy(&q_s[size_t((int64_t{i} * Lq + t) * q_row + int64_t{h} * D)], q + src, row_bytes);
        }

    PrefillParams a = tiled_params(p);
    a.batch = c.count;
    a.kv_len = max_len;
    a.q = {q_s.data(), 0, q_row, D};
    a.o = {o_s.data(), 0, q_row, D};
    a.k = {k_s.get(), 0, D, c.tokens * D};
    a.v = {v_s.get(), 0, D, c.tokens * D};
    a.lse = p.lse != nullptr ? lse_s.data() : nullptr;
    a.cu_seqlens_q = cu_q.data();
    a.cu_seqlens_k = cu_k.data();
    FLASHSCOPE_RETURN_IF_ERROR(attention_tiled(a));

    const int64_t total_q = int64_t{c.count} * Lq;
    for (int i = 0; i < c.count; ++i) {
      const int b = c.first + i;
      for (int t = 0; t < Lq; ++t)
        for (int h = 0; h < Hq; ++h) {
          const int64_t dst = b * p.o.batch_stride + t * p.o.seq_stride + h * p.o.head_stride;
          std::memcpy(o + dst, &o_s[size_t((int64_t{i} * Lq + t) * q_row + int64_t{h} * D)], row_bytes);
          if (p.lse != nullptr)
            p.lse[(int64_t{b} * Hq + h) * Lq + t] = lse_s[size_t(int64_t{h} * total_q + int64_t{i} * Lq + t)];
        }
    }
  }
  return {};
}

Status paged_attention_reference(const PagedAttentionParams& p, float* o_out, float* lse_out) {
  if (p.batch < 1 || p.q_len < 1 || p.q_heads < 1 || p.kv_heads < 1 || p.head_dim < 1 || p.page_size < 1)
    return invalid_argument("paged reference: batch, q_len, heads, head_dim and page_size must be >= 1");
  if (p.kv_lens == nullptr || p.block_tables == nullptr || p.k_pages == nullptr || p.v_pages == nullptr ||
      p.q.data == nullptr || o_out == nullptr)
    return invalid_argument("paged reference: a pointer is null");
  const int H = p.kv_heads, D = p.head_dim, P = p.page_size;
  const auto* k_pages = static_cast<const uint16_t*>(p.k_pages);
  const auto* v_pages = static_cast<const uint16_t*>(p.v_pages);
  const int64_t table_tokens = int64_t{p.block_table_stride} * P;
  std::vector<uint16_t> k, v;
  for (int b = 0; b < p.batch; ++b) {
    const int len = p.kv_lens[b];
    if (len < 0 || len > table_tokens)
      return invalid_argument("paged reference: kv_lens[" + std::to_string(b) + "] = " + std::to_string(len) +
                              " does not fit the block table");
    try {
      k.assign(size_t(len) * H * D, 0);
      v.assign(k.size(), 0);
    } catch (const std::bad_alloc&) {
      return {StatusCode::kOutOfMemory, "paged reference: cannot allocate gather scratch"};
    }
    const int32_t* table = p.block_tables + int64_t{b} * p.block_table_stride;
    for (int j = 0; j < len; ++j) {
      const int32_t page = table[j / P];
      if (page < 0 || (p.num_pages > 0 && page >= p.num_pages))
        return invalid_argument("paged reference: block_tables[" + std::to_string(b) + "][" + std::to_string(j / P) +
                                "] = " + std::to_string(page) + " is not a page id");
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t at = ((int64_t{page} * H + h) * P + j % P) * D + d;
          k[(size_t(j) * H + h) * D + d] = k_pages[at];
          v[(size_t(j) * H + h) * D + d] = v_pages[at];
        }
    }
    PrefillParams a;
    a.device = Device::kCpu;
    a.dtype = p.dtype;
    a.batch = 1;
    a.q_heads = p.q_heads;
    a.kv_heads = H;
    a.q_len = p.q_len;
    a.kv_len = len;
    a.head_dim = D;
    a.q = p.q;
    a.q.data = static_cast<uint16_t*>(p.q.data) + b * p.q.batch_stride;
    a.k = bshd(k.data(), len, H, D);
    a.v = bshd(v.data(), len, H, D);
    a.causal = p.causal;
    a.softmax_scale = p.softmax_scale;
    a.window_left = p.window_left;
    a.window_right = p.window_right;
    a.softcap = p.softcap;
    const int64_t rows = int64_t{p.q_len} * p.q_heads;
    FLASHSCOPE_RETURN_IF_ERROR(attention_reference(a, o_out + b * rows * D, lse_out ? lse_out + b * rows : nullptr));
  }
  return {};
}

}  // namespace flashscope::cpu
