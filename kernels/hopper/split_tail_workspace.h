// The split tail's scratch (hopper_prefill_kernel.cuh, persistent_deal.h's
// SplitTail) inside the caller's workspace: first the arrival counters, one
// int per (split tile, consumer warp), for fewer than 2·G split tiles; then
// every CTA's two slots of partial results, (DIM/2 + 4) · 32 floats per
// consumer warp (its O fragment, m and l, lane-minor).
#pragma once

#include <cstddef>

namespace flashscope::kernels {

inline size_t split_tail_arrivals_bytes(int ctas, int consumer_warps) {
  const size_t bytes = size_t(2) * ctas * consumer_warps * sizeof(int);
  return (bytes + 255) / 256 * 256;  // the partials start on a 256-byte boundary
}

inline size_t split_tail_workspace_bytes(int ctas, int consumer_warps, int dim) {
  const size_t partial_floats = size_t(dim / 2 + 4) * 32;
  return split_tail_arrivals_bytes(ctas, consumer_warps) +
         size_t(ctas) * 2 * consumer_warps * partial_floats * sizeof(float);
}

}  // namespace flashscope::kernels
