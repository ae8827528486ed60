// The one place that maps a runtime kernel choice to its probed
// instantiation (prefill_probe_*.cu, paged_probe_*.cu), and the tilings the
// capture describes its records with.
#include "kernels/attention/probe_launch.h"

#include "kernels/attention/paged_configs.cuh"
#include "kernels/attention/paged_launch.h"
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

using ProbedPrefillParams = GlobalTimerProbe::Params<PrefillKernelParams>;
using ProbedPagedParams = GlobalTimerProbe::Params<PagedKernelParams>;

cudaError_t launch_prefill_probed_v1_bf16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v2_bf16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v3_bf16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v4_bf16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v5_bf16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v5_fp16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v6_bf16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_probed_v6_fp16(const ProbedPrefillParams&, int, bool, cudaStream_t);
cudaError_t launch_paged_probed_bf16(int, bool, bool, const ProbedPagedParams&, cudaStream_t);
cudaError_t launch_paged_probed_fp16(int, bool, bool, const ProbedPagedParams&, cudaStream_t);

namespace {

template <typename Cfg>
KernelTiling tiling_of() {
  return {Cfg::kBlockQ, Cfg::kBlockKV, Cfg::kWarps};
}
template <template <int> class Version>
KernelTiling version_tiling(int head_dim) {
  return head_dim == 64 ? tiling_of<Version<64>>() : tiling_of<Version<128>>();
}

}  // namespace

KernelTiling prefill_tiling(int version, int head_dim) {
  switch (version) {
    case 1: return version_tiling<PrefillV1>(head_dim);
    case 2: return version_tiling<PrefillV2>(head_dim);
    case 3: return version_tiling<PrefillV3>(head_dim);
    case 4: return version_tiling<PrefillV4>(head_dim);
    case 5: return version_tiling<PrefillV5>(head_dim);
    default: return version_tiling<PrefillV6>(head_dim);
  }
}

KernelTiling paged_tiling(int head_dim, bool decode_tile) {
  return decode_tile ? version_tiling<PagedDecodeConfig>(head_dim) : version_tiling<PagedPrefillConfig>(head_dim);
}

cudaError_t launch_prefill_probed(int version, ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                  const ProbeBuffers& probe, cudaStream_t stream) {
  ProbedPrefillParams k;
  static_cast<PrefillKernelParams&>(k) = p;
  k.probe = probe;
  if (type == ElemType::kFP16) {
    if (version == 5) return launch_prefill_probed_v5_fp16(k, head_dim, causal, stream);
    if (version == 6) return launch_prefill_probed_v6_fp16(k, head_dim, causal, stream);
    return cudaErrorInvalidValue;
  }
  switch (version) {
    case 1: return launch_prefill_probed_v1_bf16(k, head_dim, causal, stream);
    case 2: return launch_prefill_probed_v2_bf16(k, head_dim, causal, stream);
    case 3: return launch_prefill_probed_v3_bf16(k, head_dim, causal, stream);
    case 4: return launch_prefill_probed_v4_bf16(k, head_dim, causal, stream);
    case 5: return launch_prefill_probed_v5_bf16(k, head_dim, causal, stream);
    case 6: return launch_prefill_probed_v6_bf16(k, head_dim, causal, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_paged_probed(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                const ProbeBuffers& probe, cudaStream_t stream) {
  ProbedPagedParams k;
  static_cast<PagedKernelParams&>(k) = p;
  k.probe = probe;
  const bool decode = paged_uses_decode_tile(p.q_len * p.group);
  return type == ElemType::kFP16 ? launch_paged_probed_fp16(head_dim, causal, decode, k, stream)
                                 : launch_paged_probed_bf16(head_dim, causal, decode, k, stream);
}

}  // namespace flashscope::kernels
