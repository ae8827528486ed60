// The CUDA side of prefill(): the plan (the kernel, checked once against the
// device and the dtype, and its launch configuration), the kernels' plain
// parameter struct, and the one launch path. In a build without CUDA these
// report kUnsupported.
#pragma once

#include "flashscope/attention.hpp"

namespace flashscope::cuda {

// Chooses the kernel for p on the current device (never kAuto).
PrefillKernel choose_prefill_kernel(const PrefillParams& p);

// Whether kernel can run on the current device in this build.
bool prefill_kernel_runnable(PrefillKernel kernel);

// The sm80 family's kernel auto runs at head_dim where the Hopper kernel
// does not (v5 or v6, kernels::sm80_default_version).
PrefillKernel sm80_default_kernel(int head_dim);

// The plan of p (shapes only: p's pointers are not read) on the current
// device: every refusal a CUDA prefill makes (no CUDA, a kernel the device
// cannot run, a dtype the kernel is not built for, grid limits) is made
// here. Fills all but plan.shape, of which only device_ordinal.
Result<PrefillPlan> plan_prefill(const PrefillParams& p);

// p has passed validate() and has the shape plan was made for.
// check_device: refuse a plan made on another device than the current one.
Status prefill(const PrefillParams& p, const PrefillPlan& plan, bool check_device);

}  // namespace flashscope::cuda

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "attention/attention_validate.hpp"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_plan.h"
#include "kernels/common/math.h"
#include "kernels/common/probe_records.h"
#include "kernels/hopper/hopper_extras.h"

namespace flashscope::cuda {

// The kernels' element type of a public dtype (validate() admits bf16 and fp16).
inline kernels::ElemType elem_type(DType t) {
  return t == DType::kFP16 ? kernels::ElemType::kFP16 : kernels::ElemType::kBF16;
}

// The scale in log2 units, and the window and the cap for the kernels built
// for them (which take causal as window_right = 0: prefill_config.cuh), set
// on a prefill's or a paged call's kernel parameters alike.
template <typename Params, typename KernelParams>
void set_scale_and_mods(const Params& p, KernelParams& k) {
  const float scale = effective_softmax_scale(p);
  k.scale_log2 = scale * kernels::kLog2e;
  if (needs_mods(p)) {
    k.window_left = p.window_left;
    k.window_right = p.causal ? 0 : p.window_right;
    if (p.softcap > 0.0f) k.softcap = {2.0f * kernels::kLog2e * scale / p.softcap, p.softcap / scale};
  }
}

// The kernels' plain parameters for p (validated): pointers, strides, the
// scale in log2 units. prefill() launches on them; so does the GPU trace
// capture (its probed kernels).
kernels::PrefillKernelParams prefill_kernel_params(const PrefillParams& p);

// The kernel-level plan a PrefillPlan carries.
kernels::PrefillLaunchPlan launch_plan(const PrefillPlan& plan);

// The one launch path of both families: plan's kernel on k, with probes
// when `probe` is set (the trace capture), the production kernels otherwise.
// extras: p's window and soft-cap (hopper_extras_of), which only the Hopper
// kernel runs (plan_prefill refuses them elsewhere).
cudaError_t launch_prefill(const PrefillPlan& plan, const kernels::PrefillKernelParams& k,
                           const kernels::ProbeBuffers* probe, cudaStream_t stream,
                           const kernels::HopperExtras& extras = {});
kernels::HopperExtras hopper_extras_of(const PrefillParams& p);

}  // namespace flashscope::cuda
#endif
