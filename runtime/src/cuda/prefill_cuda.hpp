// The CUDA side of prefill(): turns validated PrefillParams into the kernels'
// plain parameter struct and launches the chosen configuration. In a build
// without CUDA these report kUnsupported.
#pragma once

#include "flashscope/attention.hpp"

namespace flashscope::cuda {

// Chooses the kernel for p on the current device (never kAuto).
PrefillKernel choose_prefill_kernel(const PrefillParams& p);

// Whether kernel can run on the current device in this build.
bool prefill_kernel_runnable(PrefillKernel kernel);

// p has passed validate(); kernel is not kAuto.
Status prefill(const PrefillParams& p, PrefillKernel kernel);

// The workspace `kernel` uses for p (0: none).
size_t prefill_workspace_bytes(const PrefillParams& p, PrefillKernel kernel);

}  // namespace flashscope::cuda

#if FLASHSCOPE_WITH_CUDA
#include "kernels/attention/prefill_params.h"

namespace flashscope::cuda {

// The kernels' plain parameters for p (validated): pointers, strides, the
// scale in log2 units. prefill() launches on them; so does the GPU trace
// capture (its probed kernels).
kernels::PrefillKernelParams prefill_kernel_params(const PrefillParams& p);

}  // namespace flashscope::cuda
#endif
