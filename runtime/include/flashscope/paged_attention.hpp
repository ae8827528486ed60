// Attention over the paged KV cache: decode (1..8 new tokens per sequence,
// e.g. drafted tokens to verify) and chunked prefill (a turn's new tokens
// after the cached history), one entry point for both.
//
// Shapes (logical; strides in the AttnTensor views, elements):
//   q, o         : [batch, q_len, q_heads, head_dim]  (the new tokens)
//   lse          : [batch, q_heads, q_len] float32, optional
//   k/v pages    : [num_pages, kv_heads, page_size, head_dim] (see kv_cache.hpp)
//   block_tables : [batch, block_table_stride] int32 page ids
//   kv_lens      : [batch] int32: cached tokens of each sequence INCLUDING
//                  its q_len new ones, whose K/V must already be appended
// The new token t (0-based) of sequence b sits at position kv_lens[b] - q_len + t
// and, when causal, attends keys at positions <= its own (the whole prefix
// and the new tokens before it). kv_lens[b] >= q_len.
//
// All q-heads that share a kv-head are computed together, so each page is
// read once per kv-head, not once per q-head. When batch x kv_heads is small
// against the SM count the KV range of each sequence is split across CTAs
// (flash-decoding) and a combine kernel merges the partial (m, l, o) states;
// the split count comes from a host-side plan that depends only on shapes
// and max_kv_len, so a captured CUDA graph stays valid as sequences grow.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashscope/attention.hpp"
#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope {

struct PagedAttentionParams {
  AttnTensor q, o;
  float* lse = nullptr;

  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  const int32_t* block_tables = nullptr;
  int block_table_stride = 0;  // entries per sequence row; >= ceil(max_kv_len / page_size)
  const int32_t* kv_lens = nullptr;

  int batch = 1;
  int q_heads = 0;
  int kv_heads = 0;
  int q_len = 1;       // new tokens per sequence
  int head_dim = 0;
  int page_size = 16;
  int max_kv_len = 0;  // an upper bound on kv_lens (sizes the split plan)
  bool causal = true;
  float softmax_scale = 0.0f;  // 0 means 1/sqrt(head_dim)

  // Sliding window and soft-cap, as in PrefillParams: new token t of
  // sequence b sits at position kv_lens[b] - q_len + t and sees keys
  // j >= pos - window_left and j <= pos + window_right (-1: unbounded;
  // with causal, window_right must be -1 or 0). softcap > 0:
  // s <- softcap · tanh(s / softcap) on the scaled score. Pages wholly
  // before every new token's window are not read.
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;

  DType dtype = DType::kBF16;
  Device device = Device::kCpu;
  void* stream = nullptr;

  int num_splits = 0;            // 0: the plan decides; N: force N (CUDA)
  // The tile of chunked prefill (more than 64 (token, q-head) rows per
  // kv-head; decode always runs the one-warp tile). kAuto and v1..v6: the
  // sm80 128-row tile; kHopper: the sm_90a wgmma kernel with its cp.async
  // producer (kUnsupported where prefill_kernel_runnable(kHopper) is false).
  // auto keeps the sm80 tile, which is as fast or faster over pages: TMA
  // cannot gather pages and the Hopper kernel's cp.async producer is the
  // bottleneck (bench/TUNING.md#paged-decode).
  PrefillKernel kernel = PrefillKernel::kAuto;
  void* workspace = nullptr;     // CUDA split-KV scratch, >= plan_paged_attention(p).workspace_bytes
  size_t workspace_bytes = 0;

  // Pages in the pools, 0 = unknown. When set, validate() on the CPU checks
  // that every block-table entry a sequence uses is in [0, num_pages) (it
  // cannot read a device block table).
  int num_pages = 0;
};

// How the KV range is divided: chosen from shapes and the device's SM count.
struct PagedAttentionPlan {
  int num_splits = 1;
  size_t workspace_bytes = 0;  // 0 when num_splits == 1
};

Status validate(const PagedAttentionParams& p);
// The split count and workspace a call with p would use on the current device.
Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams& p);
// Runs it (CPU: reference-quality tiled path; CUDA: asynchronous on p.stream).
Status paged_attention(const PagedAttentionParams& p);

}  // namespace flashscope
