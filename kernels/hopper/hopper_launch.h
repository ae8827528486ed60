// Host entry to the Hopper (sm_90a) attention kernels. The kernels are
// compiled for sm_90a alone (kernels/hopper/CMakeLists.txt), so callers ask
// hopper_kernels_runnable() before launching on the current device.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/probe_launch.h"

namespace flashscope::kernels {

// Variants kept selectable for the benchmarks and the tile sweep; the runtime
// uses kDefault. All but kDefault and kCpAsync run one CTA per work tile.
// (bf16 only, but for kCpAsync and kOneCtaPerTile: fp16 runs kDefault otherwise).
enum class HopperVariant {
  kDefault,   // 128: 176-key tiles (192 from 4096 keys), 2 stages, the 2 consumer warpgroups taking turns;
              // 64: 3 warpgroups taking turns, 4 stages (2 taking turns for causal
              // problems of at most 1024 queries); persistent CTAs past one wave
  kBlockKV128,  // head_dim 128: 128-key tiles, 3 stages, no turns (the default until 2026-11-22)
  kStages2,     // head_dim 128: 128-key tiles, 2 stages
  kPingPong,    // head_dim 128: 128-key tiles, 3 stages, taking turns
  kBlockKV176,  // head_dim 128: 176-key tiles, 2 stages, no turns
  kBlockKV176PingPong,  // head_dim 128: 176-key tiles, 2 stages, taking turns, whatever the key count
  kBlockKV192,  // head_dim 128: 192-key tiles, 2 stages, taking turns
  kCpAsync,   // the cp.async producer even where TMA applies (dense, non-varlen)
  kTwoConsumersPingPong,  // head_dim 64: two, taking turns
  kThreeConsumers,        // head_dim 64: three, without turns
  kOneCtaPerTile,         // the default tiles, one CTA per work tile (kDefault runs persistent CTAs
                          // where there are more work tiles than SMs)
};

// True when this process carries sm_90a code and the current device runs it.
bool hopper_kernels_runnable();

// Dense or varlen prefill (PrefillKernelParams as for launch_prefill).
cudaError_t launch_prefill_hopper(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                  cudaStream_t stream, HopperVariant variant = HopperVariant::kDefault);

// The workspace (PrefillKernelParams::workspace) with which the default
// launch of p splits its last wave across all SMs; 0 where it would not
// split (causal, varlen, one wave, or a last round already nearly full).
size_t hopper_prefill_workspace_bytes(int head_dim, bool causal, const PrefillKernelParams& p);

// Attention over the paged cache with the Hopper tile: rows are (token,
// q-head) pairs of one kv-head, 128 per CTA; the grid and the split-KV
// partials are those of launch_paged_attention.
cudaError_t launch_paged_hopper(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                cudaStream_t stream);

// The probed build (FLASHSCOPE_KERNEL_PROBES) for the trace capture: the
// production configuration with GlobalTimerProbe, and its tiling (it depends
// on varlen, which runs the cp.async configuration, at head_dim 64 on
// causal and q_len: short causal problems run 128-row q-tiles, and at 128 on
// kv_len: long key ranges run 192-key tiles).
KernelTiling hopper_prefill_tiling(int head_dim, bool varlen, bool causal, int q_len, int kv_len);
cudaError_t launch_prefill_hopper_probed(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                         const ProbeBuffers& probe, cudaStream_t stream);

}  // namespace flashscope::kernels
