// The kernel lab, apart from the embeddable library (libflashscope holds the
// production kernels: auto, v5, v6 and Hopper's). The lab holds the teaching
// ladder's first steps, v1..v4 of the sm80 family (prefill_versions.cuh says
// what each step adds), and the Hopper kernel's research variants
// (hopper_variants.h). Programs that link the flashscope_lab target (the
// app, the CLI, the tests) run v1..v4 through the ordinary API: prefill(),
// plan_prefill() and the GPU trace capture, by their PrefillKernel values;
// elsewhere those answer kUnsupported. The lab's objects install the ladder
// with the runtime when the program starts, so link the target itself into
// the executable (its objects, not through another static library).
#pragma once

namespace flashscope::lab {

// Whether the ladder's kernels are in this process: a CUDA build of the lab,
// linked in.
bool ladder_available();

}  // namespace flashscope::lab
