// Plain parameters of the prefill kernels: pointers, strides (elements) and
// sizes, already validated by the runtime. Passed by value as a
// __grid_constant__ so the kernel reads them from constant memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/fast_divmod.h"

namespace flashscope::kernels {

// Logit soft-capping, s <- cap · tanh(s / cap) on the scaled score s, in the
// kernels' units: they hold raw logits x (s = x · scale) and take
// exp2(x · scale_log2), so the capped logit is written back as
//   x <- out · tanh(x · scale / cap),  out = cap / scale,
// with tanh(y) = 1 - 2 / (1 + exp2(y · 2·log2e)): exp2_in = 2 · log2e · scale / cap.
struct SoftcapParams {
  float exp2_in;
  float out;
};

struct PrefillKernelParams {
  const void* q;  // [batch, q_len, q_heads, D]   (or packed [total_q, q_heads, D])
  const void* k;  // [batch, kv_len, kv_heads, D] (or packed [total_k, kv_heads, D])
  const void* v;  // like k
  void* o;        // like q
  float* lse;     // [batch, q_heads, q_len] or packed [q_heads, total_q]; may be null

  int64_t q_batch_stride, q_seq_stride, q_head_stride;
  int64_t k_batch_stride, k_seq_stride, k_head_stride;
  int64_t v_batch_stride, v_seq_stride, v_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;

  int batch;
  int q_heads;
  int kv_heads;
  int group;   // q_heads / kv_heads: q-head h reads kv-head h / group
  int q_len;   // the maximum over the batch when varlen
  int kv_len;  // likewise

  const int32_t* cu_seqlens_q;  // [batch + 1] or null (dense)
  const int32_t* cu_seqlens_k;

  float scale_log2;  // softmax scale * log2(e): logits go straight into exp2

  // Causal launches (attention_views.cuh, cta_view): (q-head, sequence)
  // pairs per longest-first group of the grid; 0 lets the launcher choose
  // (causal_longest_first_group below).
  int longest_first_group;

  // Optional device scratch (the caller's; zero-filled before its first
  // use, left zero-filled by every launch). Long non-causal Hopper launches
  // split their last wave across all SMs through it (persistent_deal.h,
  // SplitTail); without it, or when smaller than
  // hopper_prefill_workspace_bytes asks, they deal whole tiles only.
  void* workspace;
  size_t workspace_bytes;

  // Sliding window and soft-cap (kernels instantiated with kModWindow /
  // kModSoftcap, prefill_config.cuh; the others never read these). Row r of
  // a sequence sits at position r + kv_len - q_len and sees keys
  // [pos - window_left, pos + window_right]; -1 is unbounded, and a causal
  // call reaches these kernels as window_right = 0.
  int window_left = -1;
  int window_right = -1;
  SoftcapParams softcap = {0.0f, 0.0f};
};

}  // namespace flashscope::kernels

namespace flashscope::kernels {

// Attention over a paged KV cache: the new tokens of each sequence (q_len of
// them) against all its cached keys, q-heads of one kv-head packed together.
struct PagedKernelParams {
  const void* q;  // [batch, q_len, q_heads, D]
  void* o;        // like q
  float* lse;     // [batch, q_heads, q_len]; may be null
  int64_t q_batch_stride, q_seq_stride, q_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;

  const void* k_pages;  // [num_pages, kv_heads, page_size, D]
  const void* v_pages;
  const int32_t* block_tables;  // [batch, block_table_stride]
  int block_table_stride;
  const int32_t* kv_lens;  // [batch], including the q_len new tokens

  int batch, q_heads, kv_heads, group, q_len;
  // group as a multiply and a shift: each CTA splits its rows into (token,
  // q-head) several times, and a division by a run-time int is ~20
  // instructions of a decode tile's one dependent chain.
  FastDivmod group_div;
  int page_size_log2;
  float scale_log2;

  // Split-KV: CTAs of split s cover keys [s·chunk, (s+1)·chunk) of their
  // sequence and write partial results here, merged by the combine kernel.
  int num_splits;
  float* o_partial;    // [num_splits, batch, q_heads, q_len, D]   (num_splits > 1)
  float* lse_partial;  // [num_splits, batch, q_heads, q_len]

  // As in PrefillKernelParams: new token t sits at position kv_len - q_len + t.
  // With a window the splits share the keys of the window, not the sequence.
  int window_left = -1;
  int window_right = -1;
  SoftcapParams softcap = {0.0f, 0.0f};
};

}  // namespace flashscope::kernels
