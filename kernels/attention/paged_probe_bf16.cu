// Instantiates attention over the paged KV cache with probes
// (GlobalTimerProbe: trace capture only; bf16; head_dim 64/128; causal on/off;
// decode and prefill tiles).
#include "kernels/attention/paged_configs.cuh"

namespace flashscope::kernels {

cudaError_t launch_paged_probed_bf16(int head_dim, bool causal, bool decode,
                                   const GlobalTimerProbe::Params<PagedKernelParams>& p, cudaStream_t s) {
  return launch_paged_typed<__nv_bfloat16, GlobalTimerProbe>(head_dim, causal, decode, p, s);
}

}  // namespace flashscope::kernels
