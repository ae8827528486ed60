// Instantiates prefill v5 with probes (GlobalTimerProbe: trace capture only;
// fp16; head_dim 64/128; causal on/off).
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

cudaError_t launch_prefill_probed_v5_fp16(const GlobalTimerProbe::Params<PrefillKernelParams>& p, int head_dim,
                                          bool causal, cudaStream_t s) {
  return launch_version<PrefillV5, __half, GlobalTimerProbe>(p, head_dim, causal, s);
}

}  // namespace flashscope::kernels
