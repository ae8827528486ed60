// Host entry to the prefill kernels, with no CUDA headers beyond the runtime
// API: the runtime calls this after validating the parameters.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_params.h"

namespace flashscope::kernels {

enum class ElemType { kBF16, kFP16 };

// version 1..6 (v1..v5 are seeds/000's steps, v6 goes beyond). fp16 is built
// for the production kernels v5 and v6 only; the runtime says so.
cudaError_t launch_prefill(int version, ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                           cudaStream_t stream);

// How many (q-head, sequence) pairs a causal grid takes longest-first
// together: the largest divisor of their count whose K and V fit in half
// the device's L2, so the CTAs running at once share K/V tiles through it
// and every group is as long as the others.
int causal_longest_first_group(const PrefillKernelParams& p, int head_dim);

// The current device's SM count, asked once per device (for persistent grids).
int current_sm_count();

// p with longest_first_group filled in where the caller left it 0 (causal only).
PrefillKernelParams with_longest_first_group(const PrefillKernelParams& p, int head_dim, bool causal);

// Dynamic shared memory one CTA of `version` needs at head_dim (for reports).
int prefill_smem_bytes(int version, int head_dim);

}  // namespace flashscope::kernels
