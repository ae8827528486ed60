// CUDA backend of paged_attention(): plans the KV splits from shapes and the
// SM count, fills the kernels' plain parameters, launches the attention
// kernel and, when split, the combine kernel, all on p.stream.
//
// A decode call is a few microseconds of GPU work, so the host path counts:
// what the device says about itself (SM count, whether the kernels may be
// launched programmatically) comes from device_facts.hpp's table, and a call
// costs one cudaGetDevice, an atomic load and the two launches.
#include "attention/cuda/paged_attention_cuda.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "device_facts.hpp"
#include "util/math.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "attention/attention_validate.hpp"
#include "attention/cuda/prefill_cuda.hpp"
#include "kernels/attention/paged_launch.h"
#include "kernels/attention/prefill_head_dims.h"
#if FLASHSCOPE_WITH_HOPPER
#include "kernels/hopper/hopper_launch.h"
#endif
#endif

namespace flashscope::cuda {

#if FLASHSCOPE_WITH_CUDA

namespace {

constexpr int kMaxSplits = kernels::kMaxPagedSplits;
// Decode CTAs are one warp with 24 KiB of shared memory: nine fit on an SM.
// Aim for about eight per SM so every SM streams pages with many loads in
// flight (one decode CTA alone is bound by memory latency, not bandwidth).
constexpr int kDecodeCtasPerSm = 8;
constexpr int kMinKeysPerSplit = 64;  // see plan_for

// What the Hopper paged tile does not implement: refused by name.
Status check_hopper(const PagedAttentionParams& p) {
  if (needs_mods(p))
    return unsupported(std::string(p.softcap > 0.0f ? "logit soft-capping (softcap)"
                                                     : "sliding window (window_left/window_right)") +
                       " is not supported by the hopper paged attention kernel yet; auto runs it");
  // A paged cache goes through the cp.async producer: not at the head_dim that needs TMA.
  if (!kernels::hopper_head_dim(p.head_dim) || kernels::hopper_head_dim_needs_tma(p.head_dim))
    return unsupported("head_dim " + std::to_string(p.head_dim) +
                       " is not supported by the hopper paged attention kernel (64, 128); auto runs it");
  return {};
}

int log2_exact(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  return l;
}

// The plan for p on a device of `sms` SMs (read only when the plan chooses
// the split count).
PagedAttentionPlan plan_for(const PagedAttentionParams& p, int sms) {
  const int group = p.q_heads / p.kv_heads;
  const int rows = p.q_len * group;
  const int q_tiles = ceil_div(rows, kernels::paged_block_q(rows));
  const int64_t ctas = int64_t(p.batch) * p.kv_heads * q_tiles;
  PagedAttentionPlan plan;
  if (p.num_splits > 0) {
    plan.num_splits = std::min(p.num_splits, kMaxSplits);
  } else {
    const int64_t target = int64_t(kDecodeCtasPerSm) * sms;
    const int by_occupancy = int(std::max<int64_t>(1, target / std::max<int64_t>(ctas, 1)));
    // At least 64 keys per split: one tile of the D64 decode tile and of the
    // prefill tile, two of the D128 decode tile. Shorter splits are slower:
    // the combine's share grows faster than the CTAs' chains shrink
    // (bench/TUNING.md#paged-decode). An explicit num_splits may ask for up
    // to kMaxPagedSplits (128).
    // With a window the splits share the keys of the window (the kernel
    // reads no page before it): the window and the new tokens, plus a tile
    // for the window's start rounded down to a whole tile.
    int keys = p.max_kv_len;
    if (p.window_left >= 0) keys = int(std::min<int64_t>(keys, int64_t(p.window_left) + p.q_len + kMinKeysPerSplit));
    const int by_length = std::max(1, keys / kMinKeysPerSplit);
    int splits = std::min(by_occupancy, by_length);
    // Unless 64-key splits leave SMs without a CTA (one sequence and one
    // kv-head, as Gemma 3's decode at a few hundred keys): then one key tile
    // a split. An idle SM costs more there than the combine's longer merge,
    // and a split of two tiles where others have one is as slow as all two
    // (bench/TUNING.md#paged-decode).
    if (ctas * splits < sms) {
      const int tile = kernels::paged_tiling(p.head_dim, kernels::paged_uses_decode_tile(rows)).block_kv;
      splits = std::max(splits, std::min(by_occupancy, keys / std::max(tile, 1)));
    }
    plan.num_splits = std::clamp(splits, 1, kMaxSplits);
  }
  if (plan.num_splits > 1) {
    const size_t rows_total = size_t(p.batch) * p.q_heads * p.q_len;
    plan.workspace_bytes = size_t(plan.num_splits) * rows_total * (size_t(p.head_dim) + 1) * sizeof(float);
  }
  return plan;
}

}  // namespace

Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams& p) {
  int sms = 0;
  if (p.num_splits <= 0) {
    auto facts = device_facts();
    if (!facts.ok()) return facts.status();
    sms = facts->sm_count;
  }
  return plan_for(p, sms);
}

kernels::PagedKernelParams paged_kernel_params(const PagedAttentionParams& p, int num_splits, void* workspace) {
  kernels::PagedKernelParams k{};
  k.q = p.q.data;
  k.o = p.o.data;
  k.lse = p.lse;
  k.q_batch_stride = p.q.batch_stride;
  k.q_seq_stride = p.q.seq_stride;
  k.q_head_stride = p.q.head_stride;
  k.o_batch_stride = p.o.batch_stride;
  k.o_seq_stride = p.o.seq_stride;
  k.o_head_stride = p.o.head_stride;
  k.k_pages = p.k_pages;
  k.v_pages = p.v_pages;
  k.block_tables = p.block_tables;
  k.block_table_stride = p.block_table_stride;
  k.kv_lens = p.kv_lens;
  k.batch = p.batch;
  k.q_heads = p.q_heads;
  k.kv_heads = p.kv_heads;
  k.group = p.q_heads / p.kv_heads;
  k.group_div = kernels::FastDivmod(uint32_t(k.group));
  k.q_len = p.q_len;
  k.page_size_log2 = log2_exact(p.page_size);
  set_scale_and_mods(p, k);
  k.num_splits = num_splits;
  if (k.num_splits > 1) {
    const size_t rows_total = size_t(p.batch) * p.q_heads * p.q_len;
    k.o_partial = static_cast<float*>(workspace);
    k.lse_partial = k.o_partial + size_t(k.num_splits) * rows_total * p.head_dim;
  }
  return k;
}

namespace {

// The launches of paged_attention(): a call of up to max_unmerged splits
// leaves its partials in the workspace for the caller
// (paged_attention_unmerged); more splits, the combine kernel merges them.
Status launch(const PagedAttentionParams& p, int max_unmerged, UnmergedOutput* out) {
  auto facts = device_facts();
  if (!facts.ok()) return facts.status();
  const PagedAttentionPlan plan = plan_for(p, facts->sm_count);
  if (plan.num_splits > 1 && (p.workspace == nullptr || p.workspace_bytes < plan.workspace_bytes))
    return invalid_argument("split-KV needs a workspace of " + std::to_string(plan.workspace_bytes) +
                            " bytes (plan_paged_attention); got " + std::to_string(p.workspace_bytes));

  const kernels::PagedKernelParams k = paged_kernel_params(p, plan.num_splits, p.workspace);
  const int rows = p.q_len * k.group;
  const int q_tiles = ceil_div(rows, kernels::paged_block_q(rows));
  if (int64_t(q_tiles) * k.num_splits > 0x7fffffff || p.kv_heads > 65535 || p.batch > 65535)
    return unsupported("grid too large: batch and kv_heads must be <= 65535");

  // The Hopper tile has the prefill tile's 128 rows, so the plan (splits,
  // workspace) is the same for both.
  const bool hopper = p.kernel == PrefillKernel::kHopper && !kernels::paged_uses_decode_tile(rows);
  if (hopper && !cuda::prefill_kernel_runnable(PrefillKernel::kHopper))
    return unsupported("the hopper kernel needs an sm_90 GPU (H100/H200) and a library built with its sm_90a code");
  if (hopper) FLASHSCOPE_RETURN_IF_ERROR(check_hopper(p));

  const auto type = elem_type(p.dtype);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  cudaError_t err = cudaErrorInvalidValue;
#if FLASHSCOPE_WITH_HOPPER
  if (hopper) err = kernels::launch_paged_hopper(type, p.head_dim, p.causal, k, stream);
#endif
  if (!hopper) err = kernels::launch_paged_attention(type, p.head_dim, p.causal, k, stream, facts->programmatic);
  // Programmatic on sm_90: the combine grid is scheduled while the attention
  // grid runs and waits for its completion on the GPU (captured into a CUDA
  // graph, the same launch becomes a programmatic edge). The Hopper tile
  // never signals early; the combine then starts at its completion, as a
  // plain launch would.
  const bool merge = k.num_splits > std::max(1, max_unmerged);
  if (err == cudaSuccess && merge)
    err = kernels::launch_paged_combine(type, p.head_dim, k, stream, facts->programmatic);
  if (err != cudaSuccess) return device_error(std::string("paged attention launch failed: ") + cudaGetErrorString(err));
  if (out != nullptr) {
    out->num_splits = merge ? 1 : k.num_splits;
    out->o_partial = k.o_partial;
    out->lse_partial = k.lse_partial;
    out->partial_rows = int64_t(p.batch) * p.q_heads * p.q_len;
  }
  return {};
}

}  // namespace

Status paged_attention(const PagedAttentionParams& p) { return launch(p, 0, nullptr); }

Status paged_attention_unmerged(const PagedAttentionParams& p, int max_unmerged_splits, UnmergedOutput* out) {
  return launch(p, max_unmerged_splits, out);
}

#else  // built without CUDA

Result<PagedAttentionPlan> plan_paged_attention(const PagedAttentionParams&) {
  return unsupported("this build of flashscope has no CUDA backend");
}
Status paged_attention(const PagedAttentionParams&) {
  return unsupported("this build of flashscope has no CUDA backend; use Device::kCpu");
}
Status paged_attention_unmerged(const PagedAttentionParams&, int, UnmergedOutput*) {
  return unsupported("this build of flashscope has no CUDA backend; use Device::kCpu");
}

#endif

}  // namespace flashscope::cuda
