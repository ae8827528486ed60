// Where an attention CTA's rows and keys live. The tile kernel in
// prefill_kernel.cuh is written against this small interface, so the same
// pipeline serves dense prefill and attention over the paged KV cache:
//
//   active()          this CTA has rows to compute
//   q0, rows          first row of the CTA's tile; rows in the whole problem
//   kv_begin, kv_end  the keys this CTA visits (a split of the sequence, and
//                     for causal no further than its last row can see)
//   kv_lo             windowed: keys before it are zero-filled, never read
//   q_ptr(r), o_ptr(r)  row addresses
//   key_rows(k0, lane), k_ptr(keys, r), v_ptr(keys, r)  key k0 + r's address
//   last_key(r)       causal or windowed: the last key row r may see
//   first_key(r)      windowed: the first key row r may see
//   store_lse(r, x)   the row's log-sum-exp, where the layout puts it
//   partial()         write float partials for the split-KV combine instead
// and, for the probe build only (kernels/common/probe.cuh):
//   probe_batch(), probe_head(), probe_split()  the CTA's coordinates
//   holds_head(b, h)  the CTA has rows of q-head h of sequence b
//   probe_query(r, h) row r's query index in its sequence if it is q-head h's, else -1
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/attention/persistent_deal.h"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/window_range.h"
#include "kernels/common/math.h"

namespace flashscope::kernels {

// Dense [batch, seq, heads, D] tensors (or packed varlen): one CTA per
// (q-tile, q-head, sequence); rows are the q-head's tokens.
template <typename T, int BLOCK_Q, bool kCausal, bool kWindow = false, int BLOCK_KV = 64>
struct DenseView {
  using Params = PrefillKernelParams;
  const Params& p;
  const T *Q, *K, *V;
  T* O;
  float* lse = nullptr;
  int q0 = 0, rows = 0, kv_len = 0, diag = 0, kv_begin = 0, kv_end = 0;
  int head = 0, seq = 0, kv_head = 0;  // the q-head, sequence (batch index) and kv-head of the CTA's rows
  int reach_left = 0, reach_right = 0;  // kWindow: window_reach of each side
  int kv_lo = 0;                        // kWindow: the first key any row sees (>= kv_begin)

  // Causal CTAs near the end of the sequence see the most keys: launch
  // them first so the long ones do not form the tail of the grid.
  __device__ DenseView(const Params& params)
      : DenseView(params, int(gridDim.x - 1 - blockIdx.x), int(blockIdx.y), int(blockIdx.z)) {}

  // The rows of one (q-tile, q-head, sequence), whichever CTA takes them.
  __device__ DenseView(const Params& params, int q_tile, int q_head, int seq_index)
      : DenseView(params, q_tile, q_head, seq_index, q_head / params.group) {}
  // ... with its kv-head worked out by the caller (q_head / group).
  __device__ DenseView(const Params& params, int q_tile, int q_head, int seq_index, int kv_head_index)
      : p(params), head(q_head), seq(seq_index), kv_head(kv_head_index) {
    int q_len = p.q_len;
    kv_len = p.kv_len;
    int64_t q_token0 = 0, k_token0 = 0, batch = seq;
    if (p.cu_seqlens_q != nullptr) {
      q_token0 = p.cu_seqlens_q[seq];
      k_token0 = p.cu_seqlens_k[seq];
      q_len = p.cu_seqlens_q[seq + 1] - static_cast<int>(q_token0);
      kv_len = p.cu_seqlens_k[seq + 1] - static_cast<int>(k_token0);
      batch = 0;
    }
    rows = q_len;
    q0 = q_tile * BLOCK_Q;
    Q = static_cast<const T*>(p.q) + batch * p.q_batch_stride + q_token0 * p.q_seq_stride + q_head * p.q_head_stride;
    K = static_cast<const T*>(p.k) + batch * p.k_batch_stride + k_token0 * p.k_seq_stride + kv_head * p.k_head_stride;
    V = static_cast<const T*>(p.v) + batch * p.v_batch_stride + k_token0 * p.v_seq_stride + kv_head * p.v_head_stride;
    O = static_cast<T*>(p.o) + batch * p.o_batch_stride + q_token0 * p.o_seq_stride + q_head * p.o_head_stride;
    if (p.lse != nullptr)
      lse = p.cu_seqlens_q != nullptr ? p.lse + int64_t(q_head) * p.cu_seqlens_q[p.batch] + q_token0
                                      : p.lse + (int64_t(seq) * p.q_heads + q_head) * p.q_len;
    // Bottom-right causal: row r sees keys j <= r + diag.
    diag = kv_len - q_len;
    kv_end = kCausal ? min(kv_len, max(0, q0 + BLOCK_Q + diag)) : kv_len;
    if constexpr (kWindow) {
      reach_left = window_reach(p.window_left);
      reach_right = window_reach(p.window_right);
      windowed_key_range(q0 + diag, min(rows, q0 + BLOCK_Q) - 1 + diag, reach_left, reach_right, kv_len, BLOCK_KV,
                         kv_lo, kv_begin, kv_end);
    }
  }
  __device__ bool active() const { return q0 < rows; }
  __device__ bool partial() const { return false; }
  __device__ const T* q_ptr(int r) const { return Q + int64_t(r) * p.q_seq_stride; }
  __device__ T* o_ptr(int r) const { return O + int64_t(r) * p.o_seq_stride; }
  struct Keys {
    int k0;
  };
  __device__ Keys key_rows(int k0, int) const { return {k0}; }
  __device__ const T* k_ptr(Keys keys, int r) const { return K + int64_t(keys.k0 + r) * p.k_seq_stride; }
  __device__ const T* v_ptr(Keys keys, int r) const { return V + int64_t(keys.k0 + r) * p.v_seq_stride; }
  __device__ int last_key(int r) const {
    if constexpr (kWindow) return r + diag + reach_right;
    return r + diag;
  }
  __device__ int first_key(int r) const { return r + diag - reach_left; }
  __device__ void store_lse(int r, float x) const {
    if (lse != nullptr) lse[r] = x;
  }
  __device__ float* partial_o(int) const { return nullptr; }
  __device__ void store_partial_lse(int, float) const {}

  __device__ int probe_batch() const { return blockIdx.z; }
  __device__ int probe_head() const { return blockIdx.y; }
  __device__ int probe_split() const { return 0; }
  __device__ bool holds_head(int b, int h) const { return int(blockIdx.z) == b && int(blockIdx.y) == h; }
  __device__ int probe_query(int r, int) const { return r < rows ? r : -1; }
};

// The paged KV cache: one CTA per (q-tile x split, kv-head, sequence). The
// rows are all (token, q-head) pairs of the kv-head's group, token-major
// (r = t * group + g), so every page is read once for the whole group.
template <typename T, int DIM, int BLOCK_Q, int BLOCK_KV, bool kCausal, bool kWindow = false>
struct PagedView {
  using Params = PagedKernelParams;
  const Params& p;
  const int32_t* table;
  int seq = 0, kv_head = 0, split = 0;
  int q0 = 0, rows = 0, kv_len = 0, kv_begin = 0, kv_end = 0;
  int reach_left = 0, reach_right = 0;  // kWindow: window_reach of each side
  int kv_lo = 0;                        // kWindow: the first key any row sees (>= kv_begin)

  __device__ PagedView(const Params& params) : p(params) {
    split = blockIdx.x % p.num_splits;
    const int q_tile = blockIdx.x / p.num_splits;
    kv_head = blockIdx.y;
    seq = blockIdx.z;
    rows = p.q_len * p.group;
    q0 = q_tile * BLOCK_Q;
    kv_len = p.kv_lens[seq];
    table = p.block_tables + int64_t(seq) * p.block_table_stride;
    // Each split takes an equal share of the keys, rounded up to whole tiles,
    // computed from the live kv_len: a captured CUDA graph stays valid.
    if constexpr (kWindow) {
      // The splits share the keys of the CTA's window, not of the sequence:
      // decode reads only the pages its window reaches.
      reach_left = window_reach(p.window_left);
      reach_right = window_reach(p.window_right);
      int begin = 0, end = 0;
      windowed_key_range(position(q0), position(min(rows, q0 + BLOCK_Q) - 1), reach_left, reach_right, kv_len,
                         BLOCK_KV, kv_lo, begin, end);
      window_split(begin, end, BLOCK_KV, p.num_splits, split, kv_begin, kv_end);
    } else {
      const int tiles = ceil_div(kv_len, BLOCK_KV);
      const int tiles_per_split = ceil_div(tiles, p.num_splits);
      kv_begin = min(kv_len, split * tiles_per_split * BLOCK_KV);
      kv_end = min(kv_len, kv_begin + tiles_per_split * BLOCK_KV);
      if (kCausal) kv_end = min(kv_end, max(kv_begin, last_key(min(rows, q0 + BLOCK_Q) - 1) + 1));
    }
  }
  __device__ bool active() const { return q0 < rows; }
  __device__ bool partial() const { return p.num_splits > 1; }
  __device__ int token(int r) const { return int(p.group_div.quotient(uint32_t(r))); }
  __device__ int q_head(int r) const { return kv_head * p.group + (r - token(r) * p.group); }
  __device__ const T* q_ptr(int r) const {
    return static_cast<const T*>(p.q) + seq * p.q_batch_stride + token(r) * p.q_seq_stride +
           q_head(r) * p.q_head_stride;
  }
  __device__ T* o_ptr(int r) const {
    return static_cast<T*>(p.o) + seq * p.o_batch_stride + token(r) * p.o_seq_stride + q_head(r) * p.o_head_stride;
  }
  // Key j lives in page table[j / page_size] at offset j % page_size; a page
  // holds [kv_heads, page_size, DIM]. A tile of BLOCK_KV keys spans at most
  // BLOCK_KV / 16 pages (or lies inside one): lane i reads the tile's i-th
  // page id once and turns it into the cache row where this kv-head's part
  // of that page starts; every key's address takes that row by shuffle (per
  // key a shift, a mask, a shuffle, an add and one wide multiply-add: the
  // copies are most of a decode tile's instructions). Rows fit 32 bits: the
  // pool holds rows · DIM · sizeof(T) bytes of device memory, and 2^32 rows
  // of the smallest head (32 bf16) would be 256 GiB.
  struct Keys {
    int k0;
    uint32_t lane_row;
  };
  __device__ Keys key_rows(int k0, int lane) const {
    const int last_page = (max(kv_len, 1) - 1) >> p.page_size_log2;  // clamped: reads stay inside the table
    const int page_index = min((k0 >> p.page_size_log2) + lane, last_page);
    return {k0, (uint32_t(table[page_index]) * uint32_t(p.kv_heads) + uint32_t(kv_head)) << p.page_size_log2};
  }
  __device__ uint32_t key_row(Keys keys, int r) const {
    const int page_mask = (1 << p.page_size_log2) - 1;
    const int local_page = ((keys.k0 & page_mask) + r) >> p.page_size_log2;
    return __shfl_sync(0xffffffffu, keys.lane_row, local_page) + uint32_t((keys.k0 + r) & page_mask);
  }
  __device__ const T* k_ptr(Keys keys, int r) const {
    return static_cast<const T*>(p.k_pages) + uint64_t(key_row(keys, r)) * DIM;
  }
  __device__ const T* v_ptr(Keys keys, int r) const {
    return static_cast<const T*>(p.v_pages) + uint64_t(key_row(keys, r)) * DIM;
  }
  // The new token t sits at position kv_len - q_len + t.
  __device__ int position(int r) const { return kv_len - p.q_len + token(r); }
  __device__ int last_key(int r) const {
    if constexpr (kWindow) return position(r) + reach_right;
    return position(r);
  }
  __device__ int first_key(int r) const { return position(r) - reach_left; }
  __device__ int64_t out_index(int r) const { return (int64_t(seq) * p.q_heads + q_head(r)) * p.q_len + token(r); }
  __device__ void store_lse(int r, float x) const {
    if (p.lse != nullptr) p.lse[out_index(r)] = x;
  }
  // Split-KV partials: the split's own normalized O (float) and its lse.
  __device__ int64_t partial_index(int r) const {
    return int64_t(split) * p.batch * p.q_heads * p.q_len + out_index(r);
  }
  __device__ float* partial_o(int r) const { return p.o_partial + partial_index(r) * DIM; }
  __device__ void store_partial_lse(int r, float x) const { p.lse_partial[partial_index(r)] = x; }

  __device__ int probe_batch() const { return seq; }
  __device__ int probe_head() const { return kv_head; }  // the CTA's rows span the kv-head's q-heads
  __device__ int probe_split() const { return split; }
  // Rows r of q-head h are r = t * group + h % group: the first one at or after q0.
  __device__ bool holds_head(int b, int h) const {
    if (seq != b || h / p.group != kv_head) return false;
    const int g = h % p.group;
    const int first = q0 + ((g - q0 % p.group) % p.group + p.group) % p.group;
    return first < min(rows, q0 + BLOCK_Q);
  }
  __device__ int probe_query(int r, int h) const { return r < rows && q_head(r) == h ? token(r) : -1; }
};

// The view of the calling CTA. LONGEST_FIRST (causal launches without
// probes): CTAs are dispatched in blockIdx order, x fastest, and DenseView's
// own mapping puts each head's longest q-tiles first, so the last head's
// longest CTA would start near the end of the grid and finish alone. Here
// the grid is read as groups of p.longest_first_group (q-head, sequence)
// pairs, each group in one list, longest q-tiles of all its pairs first: the
// grid ends on short tiles, and a group is small enough that the K and V its
// running CTAs read stay in L2 (bench/TUNING.md#hopper-prefill: groups of
// 4 pairs, "Causal grids"). Views
// without the (q_tile, head, sequence) constructor
// (the paged cache) keep blockIdx's mapping, and so do probed launches:
// their span buffers are indexed by blockIdx.x, which must differ between
// the traced head's CTAs.
template <typename View>
inline constexpr bool kViewTakesTileCoords =
    std::is_constructible_v<View, const typename View::Params&, int, int, int>;

template <typename View, bool LONGEST_FIRST>
__device__ __forceinline__ View cta_view(const typename View::Params& p) {
  if constexpr (LONGEST_FIRST && kViewTakesTileCoords<View>) {
    // The grid as the longest-first list persistent CTAs walk (persistent_deal.h).
    const int linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const auto t = BasicWorkTileList<PlainDivmod>(gridDim.x, gridDim.y, gridDim.z, p.longest_first_group, true,
                                                  p.group)
                       .at(linear);
    return View(p, t.q_tile, t.q_head, t.seq, t.kv_head);
  } else {
    return View(p);
  }
}

}  // namespace flashscope::kernels
