// GPU trace capture: placeholder until the probe instantiations land; every
// build answers kUnsupported so callers (CLI, app) can already handle it.
#include "flashscope/trace.hpp"

namespace flashscope {

Status capture_cuda_prefill_trace(const PrefillParams&, const TraceOptions&, Trace*) {
  return unsupported("GPU trace capture: this build has no kernel probes");
}

Status capture_cuda_paged_trace(const PagedAttentionParams&, const TraceOptions&, Trace*) {
  return unsupported("GPU trace capture: this build has no kernel probes");
}

}  // namespace flashscope
