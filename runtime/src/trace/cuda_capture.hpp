// The GPU trace capture with its storage limits exposed, for the tests that
// fill a warp's span storage on purpose (flashscope/trace.hpp has the public
// entry points, which use the defaults).
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashscope/trace.hpp"

namespace flashscope::trace_internal {

struct CudaCaptureLimits {
  // Span records each traced warp may store; 0: enough for every phase of
  // every KV tile it can visit. Spans past it are counted in meta.dropped_spans.
  int32_t spans_per_warp = 0;
  // Largest span buffer the capture allocates (the per-warp capacity shrinks
  // to fit, and the spans that do not fit are dropped and counted).
  size_t max_span_bytes = size_t{256} << 20;
};

Status capture_cuda_prefill_trace(const PrefillParams& p, const TraceOptions& opt, const CudaCaptureLimits& limits,
                                  Trace* out);
Status capture_cuda_paged_trace(const PagedAttentionParams& p, const TraceOptions& opt,
                                const CudaCaptureLimits& limits, Trace* out);

}  // namespace flashscope::trace_internal
