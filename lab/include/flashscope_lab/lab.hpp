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

#include <vector>

#include "flashscope/attention.hpp"

namespace flashscope::lab {

// The ladder's first steps, by the values the library reserves for them
// (flashscope/attention.hpp); prefill_versions.cuh says what each adds.
inline constexpr PrefillKernel kV1{1};  // mma.m16n8k16 + ldmatrix + cp.async, no overlap of loads and math
inline constexpr PrefillKernel kV2{2};  // + XOR-swizzled shared memory (no bank conflicts on ldmatrix)
inline constexpr PrefillKernel kV3{3};  // + 2-stage pipeline of K and V tiles
inline constexpr PrefillKernel kV4{4};  // + ldmatrix.x4 for K and V (half the ldmatrix instructions)

// The whole ladder in order, v1..v6 (v5 and v6 are the library's sm80 kernels).
inline std::vector<PrefillKernel> ladder_kernels() {
  return {kV1, kV2, kV3, kV4, PrefillKernel::kV5, PrefillKernel::kV6};
}

// Whether the ladder's kernels are in this process: a CUDA build of the lab,
// linked in.
bool ladder_available();

}  // namespace flashscope::lab
