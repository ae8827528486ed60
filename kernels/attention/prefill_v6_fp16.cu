// Instantiates prefill v6, the look-ahead pipeline (fp16; head_dim 64/128;
// causal on/off).
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

cudaError_t launch_prefill_v6_fp16(const PrefillKernelParams& p, int head_dim, bool causal, cudaStream_t s) {
  return launch_version<PrefillV6, __half>(p, head_dim, causal, s);
}

}  // namespace flashscope::kernels
