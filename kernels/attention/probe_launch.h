// Host entry to the trace capture's second pass (runtime/src/trace/cuda_capture.cpp).
//
// The probed kernels themselves run through their family's one launch path
// with a ProbeBuffers argument (launch_prefill, launch_prefill_hopper,
// launch_paged_attention): the production kernels instantiated with
// GlobalTimerProbe (kernels/common/probe.cuh), same tiles, same pipeline,
// same results, plus records written into the buffers. They exist only in
// builds with FLASHSCOPE_KERNEL_PROBES (ON by default) and nothing but the
// capture launches them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_plan.h"
#include "kernels/common/probe_records.h"

namespace flashscope::kernels {

// The capture's second pass over one traced (sequence, q-head): the final
// probabilities p_ij = exp(scale·q_i·k_j − lse_i) from the run's lse, summed
// and maximised per (q-tile, kv-tile) block, and written out whole for the
// sampled blocks. Logits are recomputed in float (d ascending), not taken
// from the run: what the block holds, not how the MMA rounded it.
struct TileMassParams {
  const void* q;         // query i at q + i·q_row_stride elements (head_dim contiguous)
  int64_t q_row_stride;
  const void* k;         // dense: key j at k + j·k_row_stride; paged: the K pool
  int64_t k_row_stride;
  const int32_t* block_table;  // paged when set: the sequence's page ids; key j at
                               // k + ((table[j / P]·kv_heads + kv_head)·P + j % P)·head_dim
  int page_size_log2, kv_heads, kv_head;
  const float* lse;      // [q_len], natural log; -inf for a row that sees no key
  int q_len, kv_len, head_dim;  // head_dim <= 256
  bool causal;           // bottom-right: key j visible to query i iff j <= i + kv_len - q_len
  int window_left = -1;  // and iff i + kv_len - q_len - window_left <= j (-1: unbounded)
  int window_right = -1;  // and iff j <= i + kv_len - q_len + window_right (-1: unbounded)
  float scale;           // softmax scale, natural-log units
  float softcap = 0.0f;  // > 0: the logit s = scale·q·k becomes softcap·tanh(s / softcap)
  int block_q, block_kv;  // the trace's tiles; block_kv <= 64
  float* mass_sum;       // [n_q_tiles, n_kv_tiles]: sum of p over the block
  float* max_prob;       // [n_q_tiles, n_kv_tiles]
  const int32_t* sample_slot;  // [n_q_tiles, n_kv_tiles]: sample slot or -1; null: no samples
  float* samples;        // [slots, block_q, block_kv]: p of every (row, key) of a sampled block, 0 masked
};
constexpr int kTileMassMaxBlockKV = 64;
constexpr int kTileMassMaxDim = 256;
cudaError_t launch_tile_mass(ElemType type, const TileMassParams& p, cudaStream_t stream);

}  // namespace flashscope::kernels
