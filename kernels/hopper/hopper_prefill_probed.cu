// The Hopper kernel with its probe hooks compiled in (GlobalTimerProbe), for
// the GPU trace capture (runtime/src/trace/cuda_capture.cpp): the production
// configuration of hopper_prefill.cu, dense (TMA) and varlen (cp.async),
// bf16 and fp16. Built with FLASHSCOPE_KERNEL_PROBES; sm_90a only.
#include "kernels/hopper/hopper_config.cuh"
#include "kernels/hopper/hopper_launch.h"

namespace flashscope::kernels {
namespace {

template <typename Cfg, typename T, bool kCausal>
cudaError_t launch_probed(ElemType type, const PrefillKernelParams& p, const ProbeBuffers& probe, cudaStream_t stream) {
  typename GlobalTimerProbe::template Params<HopperParams<PrefillKernelParams>> hp{};
  hp.view = p;
  hp.probe = probe;
  if (encode_dense_maps<Cfg>(type, p, &hp)) {
    auto kernel = hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, true, GlobalTimerProbe>;
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
        err != cudaSuccess)
      return err;
    const dim3 grid((p.q_len + Cfg::kBlockQ - 1) / Cfg::kBlockQ, p.q_heads, p.batch);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(hp);
  } else {
    using Cp = CpAsyncConfig<Cfg>;
    auto kernel = hopper_attention_kernel<Cp, T, kCausal, DenseView<T, Cp::kBlockQ, kCausal>, false, GlobalTimerProbe>;
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cp::kSmemBytes);
        err != cudaSuccess)
      return err;
    const dim3 grid((p.q_len + Cp::kBlockQ - 1) / Cp::kBlockQ, p.q_heads, p.batch);
    kernel<<<grid, Cp::kThreads, Cp::kSmemBytes, stream>>>(hp);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t probed_typed(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                         const ProbeBuffers& probe, cudaStream_t s) {
  if (head_dim == 64) {
    if (use_short_causal_config(64, causal, p.q_len)) return launch_probed<ShortCausalConfig64, T, true>(type, p, probe, s);
    return causal ? launch_probed<DefaultConfig<64>, T, true>(type, p, probe, s)
                  : launch_probed<DefaultConfig<64>, T, false>(type, p, probe, s);
  }
  if (use_long_kv_config(128, p.kv_len))
    return causal ? launch_probed<LongKvConfig128, T, true>(type, p, probe, s)
                  : launch_probed<LongKvConfig128, T, false>(type, p, probe, s);
  return causal ? launch_probed<DefaultConfig<128>, T, true>(type, p, probe, s)
                : launch_probed<DefaultConfig<128>, T, false>(type, p, probe, s);
}

}  // namespace

KernelTiling hopper_prefill_tiling(int head_dim, bool varlen, bool causal, int q_len, int kv_len) {
  auto tiling = [](auto cfg) { return KernelTiling{decltype(cfg)::kBlockQ, decltype(cfg)::kBlockKV, decltype(cfg)::kThreads / 32}; };
  if (head_dim == 64) {
    if (varlen) return tiling(CpAsyncConfig<DefaultConfig<64>>{});
    return use_short_causal_config(64, causal, q_len) ? tiling(ShortCausalConfig64{}) : tiling(DefaultConfig<64>{});
  }
  if (varlen) return tiling(CpAsyncConfig<DefaultConfig<128>>{});
  return use_long_kv_config(128, kv_len) ? tiling(LongKvConfig128{}) : tiling(DefaultConfig<128>{});
}

cudaError_t launch_prefill_hopper_probed(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                         const ProbeBuffers& probe, cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? probed_typed<__half>(type, head_dim, causal, p, probe, stream)
                                 : probed_typed<__nv_bfloat16>(type, head_dim, causal, p, probe, stream);
}

}  // namespace flashscope::kernels
