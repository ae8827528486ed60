// Host entry to the Hopper (sm_90a) attention kernels. The kernels are
// compiled for sm_90a alone (kernels/CMakeLists.txt), so callers ask
// hopper_kernels_runnable() before launching on the current device.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_head_dims.h"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_plan.h"
#include "kernels/common/probe_records.h"
#include "kernels/hopper/hopper_extras.h"

namespace flashscope::kernels {

// True when this process carries sm_90a code and the current device runs it.
bool hopper_kernels_runnable();

// The plan for dense or varlen prefill of p (PrefillKernelParams as for
// launch_prefill): the production configuration for the shape
// (hopper_config.cuh); the persistent deal, the L2 groups and the split tail
// on a device with `dev`'s facts; the workspace with which the launch splits
// its last wave across all SMs (0 where it would not split: causal, varlen,
// windows, one wave, or a last round already nearly full). x: the window
// (its L2 groups hold fewer keys per pair) and soft-cap.
PrefillLaunchPlan plan_prefill_hopper(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                      const DeviceLaunchFacts& dev, const HopperExtras& x = {});
// The same for a given configuration (the lab's research variants):
// tma = false runs the cp.async producer even for dense tensors, one_cta one
// CTA per work tile even past one wave.
PrefillLaunchPlan plan_prefill_hopper_config(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                             const DeviceLaunchFacts& dev, HopperConfig config, bool tma,
                                             bool one_cta, const HopperExtras& x = {});

// Runs plan (family kHopper, a production configuration: the lab runs the
// variants' own) on p. probe: null for the production kernels;
// else the probed instantiation (FLASHSCOPE_KERNEL_PROBES builds; else
// cudaErrorNotSupported) records into it,
// computing the same bits: the plan's tiles, one CTA per work tile (the
// probe's span buffers are indexed by blockIdx.x), no split tail.
// With a window or soft-cap (x.any) their own kernels run: dense tensors
// through TMA, not probed (else cudaErrorNotSupported).
cudaError_t launch_prefill_hopper(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                  const ProbeBuffers* probe, cudaStream_t stream, const HopperExtras& x = {});

// Attention over the paged cache with the Hopper tile: rows are (token,
// q-head) pairs of one kv-head, 128 per CTA; the grid and the split-KV
// partials are those of launch_paged_attention.
cudaError_t launch_paged_hopper(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                cudaStream_t stream);

}  // namespace flashscope::kernels
