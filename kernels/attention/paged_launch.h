// Host entry to attention over the paged KV cache and to the split-KV
// combine; the runtime validates and plans before calling these.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_plan.h"
#include "kernels/common/probe_records.h"

namespace flashscope::kernels {

// Two tile shapes: a one-warp CTA of 16 rows for decode (the q-heads of a
// kv-head times q_len rarely exceed 64 rows, and decode is bound by reading
// pages, not by math), and the 128-row prefill tile for chunked prefill.
bool paged_uses_decode_tile(int rows_per_kv_head);

// The most KV splits one call may use (the combine holds a row's lse values
// in one warp, four per lane). 128 splits give each one-warp decode CTA a
// single 32-key tile of a 4096-key cache at head_dim 128.
inline constexpr int kMaxPagedSplits = 128;
int paged_block_q(int rows_per_kv_head);

// programmatic: launch with programmatic stream serialization (sm_90 PDL):
// the grid is scheduled while the kernel before it on the stream finishes and
// waits for it on the GPU before reading q, the pages or the tables; only
// where paged_combine_waits_on_producer() said yes (the same code targets).
// probe: null for the production kernels; else the probed instantiation
// (FLASHSCOPE_KERNEL_PROBES builds; else cudaErrorNotSupported) records into
// it, computing the same bits. Grid: (ceil(q_len·group / block_q) ·
// num_splits, kv_heads, batch); with num_splits > 1 it writes the partials.
cudaError_t launch_paged_attention(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                   cudaStream_t stream, bool programmatic = false,
                                   const ProbeBuffers* probe = nullptr);

// The tile of the paged kernel (decode_tile: paged_uses_decode_tile).
KernelTiling paged_tiling(int head_dim, bool decode_tile);

// Merges p.num_splits (1..kMaxPagedSplits) partial results into p.o (and
// p.lse); launched after launch_paged_attention on the same stream.
// programmatic: launch it with programmatic stream serialization (sm_90 PDL),
// so it is scheduled while the attention grid still runs and waits for it on
// the GPU; only where paged_combine_waits_on_producer() said yes.
cudaError_t launch_paged_combine(ElemType type, int head_dim, const PagedKernelParams& p, cudaStream_t stream,
                                 bool programmatic = false);

// Whether the combine's code on the current device waits for its producer
// grid (griddepcontrol.wait): its code was compiled for sm_90 or later. Code
// JIT-compiled from sm_80 PTX has no wait, and must not be launched
// programmatically even on an sm_90 device.
cudaError_t paged_combine_waits_on_producer(bool* waits);

}  // namespace flashscope::kernels
