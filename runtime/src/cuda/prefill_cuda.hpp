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

}  // namespace flashscope::cuda
