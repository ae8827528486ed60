// Host entry to the sm80 prefill kernels (prefill_versions.cuh), with no CUDA
// headers beyond the runtime API: the runtime calls these after validating
// the parameters.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_plan.h"
#include "kernels/common/probe_records.h"

namespace flashscope::kernels {

// Whether `version` (1..6) runs for `type` in this process: the production
// kernels v5 and v6 for bf16 and fp16, the teaching ladder's v1..v4 for bf16
// where the kernel lab installed them.
bool prefill_version_built(int version, ElemType type);

// Whether `version` has kernels at head_dim, with a sliding window or a
// soft-cap where `mods` (prefill_versions.cuh, sm80_instantiated: v5 and v6
// at 64 and 128, auto's choice alone at 32, 80, 96 and 256 and for mods; the
// ladder's v1..v4 at 64 and 128 without mods).
bool prefill_version_instantiated(int version, int head_dim, bool mods);
// The version auto runs at head_dim on a device without the Hopper kernel.
int prefill_default_version(int head_dim);

// The kernel lab (lab/src/ladder.cu) holds v1..v4, outside this library; its
// objects install their launcher here when the program starts. Called with
// plans of versions 1..4, as launch_prefill is.
using Sm80LadderLauncher = cudaError_t (*)(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                           const ProbeBuffers* probe, cudaStream_t stream);
void install_sm80_ladder(Sm80LadderLauncher launcher);

// The plan of version 1..6 for p on a device with `dev`'s facts (the caller
// checked prefill_version_built).
PrefillLaunchPlan plan_prefill_sm80(int version, ElemType type, int head_dim, bool causal,
                                    const PrefillKernelParams& p, const DeviceLaunchFacts& dev);

// Runs plan (family kSm80) on p. probe: null for the production kernels;
// else the probed instantiation (FLASHSCOPE_KERNEL_PROBES builds; else
// cudaErrorNotSupported) records into it, computing the same bits. Grid:
// (ceil(q_len / block_q), q_heads, batch).
cudaError_t launch_prefill(const PrefillLaunchPlan& plan, const PrefillKernelParams& p, const ProbeBuffers* probe,
                           cudaStream_t stream);

// Dynamic shared memory one CTA of `version` needs at head_dim (for reports).
int prefill_smem_bytes(int version, int head_dim);

}  // namespace flashscope::kernels
