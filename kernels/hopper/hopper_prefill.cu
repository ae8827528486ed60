// The Hopper attention kernel's plan and its one launch path: bf16 and fp16,
// head_dim 64, 128 and 256, causal on/off; dense tensors through TMA, varlen
// and the paged cache through the cp.async producer (64 and 128 only). This file instantiates the
// production kernels; hopper_prefill_probed.cu the same launch path with
// probes; the lab (lab/src/hopper_variants.cu) the research variants' tiles.
// sm_90a only.
#include "kernels/hopper/hopper_plan.h"
#include "kernels/hopper/hopper_prefill_launch.cuh"

namespace flashscope::kernels {
namespace {

template <typename Cfg>
KernelTiling tiling_of() {
  return {Cfg::kBlockQ, Cfg::kBlockKV, Cfg::kThreads / 32};
}

}  // namespace

PrefillLaunchPlan plan_prefill_hopper_config(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                             const DeviceLaunchFacts& dev, HopperConfig config, bool tma,
                                             bool one_cta, const HopperExtras& x) {
  PrefillLaunchPlan plan;
  plan.family = PrefillFamily::kHopper;
  plan.type = type;
  plan.head_dim = head_dim;
  plan.causal = causal;
  // TMA needs whole tensors it can describe: dense (not packed varlen).
  plan.tma = tma && p.cu_seqlens_q == nullptr;
  plan.hopper_config = config;
  plan.longest_first_group = p.longest_first_group;
  visit_hopper_config<HopperConfigs::kAll>(config, [&](auto cfg, auto) {
    using Cfg = decltype(cfg);
    const HopperTileShape shape{Cfg::kBlockQ, Cfg::kBlockKV, Cfg::kConsumerWarps, Cfg::kDim};
    if (causal && plan.longest_first_group == 0) {
      PrefillKernelParams keys = p;  // with a window, the keys a q-tile reads
      keys.kv_len = hopper_keys_per_q_tile(p, x, shape, causal);
      plan.longest_first_group = causal_longest_first_group(keys, head_dim, dev.l2_bytes);
    }
    if constexpr (kHasCpAsync<Cfg>) {
      plan.tiling = plan.tma ? tiling_of<Cfg>() : tiling_of<CpAsyncConfig<Cfg>>();
    } else {
      plan.tiling = tiling_of<Cfg>();  // no cp.async tiles: such a launch is refused (launch_dense)
    }
    plan_hopper_deal(&plan, p, shape, one_cta, dev.sm_count, x);
    return cudaSuccess;
  });
  return plan;
}

PrefillLaunchPlan plan_prefill_hopper(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                      const DeviceLaunchFacts& dev, const HopperExtras& x) {
  return plan_prefill_hopper_config(type, head_dim, causal, p, dev,
                                    production_hopper_config(head_dim, causal, p.q_len, p.kv_len, x), /*tma=*/true,
                                    /*one_cta=*/false, x);
}

cudaError_t launch_prefill_hopper(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                  const ProbeBuffers* probe, cudaStream_t stream, const HopperExtras& x) {
  if (plan.family != PrefillFamily::kHopper || !hopper_head_dim(plan.head_dim)) return cudaErrorInvalidValue;
  if (x.any(plan.causal)) return probe != nullptr ? cudaErrorNotSupported : launch_prefill_hopper_extras(plan, p, x, stream);
  if (probe != nullptr) return launch_prefill_hopper_probed(plan, p, *probe, stream);
  constexpr HopperConfigs kSet = HopperConfigs::kProduction;
  return plan.type == ElemType::kFP16 ? launch_hopper_typed<__half, NoProbe, kSet>(plan, p, nullptr, stream)
                                      : launch_hopper_typed<__nv_bfloat16, NoProbe, kSet>(plan, p, nullptr, stream);
}

#if !FLASHSCOPE_KERNEL_PROBES
cudaError_t launch_prefill_hopper_probed(const PrefillLaunchPlan&, const PrefillKernelParams&, const ProbeBuffers&,
                                         cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

bool hopper_kernels_runnable() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (prop.major != 9 || prop.minor != 0) return false;
  // The image for this device must be our sm_90a code (binaryVersion 90).
  cudaFuncAttributes attr{};
  const auto kernel = hopper_attention_kernel<DefaultConfig<128>, __nv_bfloat16, false,
                                              DenseView<__nv_bfloat16, 128, false>, true>;
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so later calls do not see it
    return false;
  }
  return attr.binaryVersion == 90;
}

namespace {

template <typename Tile, typename T, bool kCausal>
cudaError_t launch_paged(const PagedKernelParams& p, cudaStream_t stream) {
  using Cfg = CpAsyncConfig<Tile>;
  auto kernel = hopper_attention_kernel<Cfg, T, kCausal,
                                        PagedView<T, Cfg::kDim, Cfg::kBlockQ, Cfg::kBlockKV, kCausal>, false>;
  if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
  HopperParams<PagedKernelParams> hp{};
  hp.view = p;
  const int q_tiles = ceil_div(p.q_len * p.group, Cfg::kBlockQ);
  const dim3 grid(q_tiles * p.num_splits, p.kv_heads, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(hp);
  return cudaGetLastError();
}

template <typename T>
cudaError_t paged_typed(int head_dim, bool causal, const PagedKernelParams& p, cudaStream_t s) {
  if (head_dim == 64)
    return causal ? launch_paged<DefaultConfig<64>, T, true>(p, s) : launch_paged<DefaultConfig<64>, T, false>(p, s);
  return causal ? launch_paged<DefaultConfig<128>, T, true>(p, s) : launch_paged<DefaultConfig<128>, T, false>(p, s);
}

}  // namespace

cudaError_t launch_paged_hopper(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? paged_typed<__half>(head_dim, causal, p, stream)
                                 : paged_typed<__nv_bfloat16>(head_dim, causal, p, stream);
}

}  // namespace flashscope::kernels
