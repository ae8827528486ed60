// Instantiates attention over the paged KV cache (bf16; head_dim 64/128;
// causal on/off; decode and prefill tiles).
#include "kernels/attention/paged_configs.cuh"

namespace flashscope::kernels {

cudaError_t launch_paged_bf16(int head_dim, bool causal, bool decode, const PagedKernelParams& p, cudaStream_t s,
                             bool programmatic) {
  return launch_paged_typed<__nv_bfloat16>(head_dim, causal, decode, p, s, programmatic);
}

}  // namespace flashscope::kernels
