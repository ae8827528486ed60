// cuda_capture_layer: the CUDA engine's attention of one layer run again
// with its probes. Not yet built: a CUDA model answers kUnsupported, and
// the CPU engine captures (backends/cpu/capture_cpu.cpp).
#include "backends/capture_backend.hpp"

namespace flashscope::model {

Status cuda_capture_layer(const Model::Impl&, Sequence::State&, const LayerCaptureJob&, LayerCaptureOut*) {
  return {StatusCode::kUnsupported,
          "capture_attention: the CUDA engine's capture is not built yet; load the model on the CPU to capture"};
}

}  // namespace flashscope::model
