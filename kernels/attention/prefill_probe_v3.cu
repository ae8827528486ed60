// Instantiates prefill v3 with probes (GlobalTimerProbe: trace capture only;
// bf16; head_dim 64/128; causal on/off).
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

cudaError_t launch_prefill_probed_v3_bf16(const GlobalTimerProbe::Params<PrefillKernelParams>& p, int head_dim,
                                          bool causal, cudaStream_t s) {
  return launch_version<PrefillV3, __nv_bfloat16, GlobalTimerProbe>(p, head_dim, causal, s);
}

}  // namespace flashscope::kernels
