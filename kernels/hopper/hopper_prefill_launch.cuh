// The Hopper prefill's one launch path, templated on the probe: NoProbe in
// hopper_prefill.cu (production) and the lab's variants
// (lab/src/hopper_variants.cu), GlobalTimerProbe in hopper_prefill_probed.cu
// (the trace capture). Everything it decides comes from the plan
// (plan_prefill_hopper); what it adds per call is what depends on the
// tensors' addresses: the TMA maps and the caller's workspace.
#pragma once

#include "kernels/attention/prefill_launch.h"
#include "kernels/common/math.h"
#include "kernels/hopper/hopper_config.cuh"
#include "kernels/hopper/split_tail_workspace.h"

namespace flashscope::kernels {

// The probed launch (hopper_prefill_probed.cu; cudaErrorNotSupported
// without FLASHSCOPE_KERNEL_PROBES).
cudaError_t launch_prefill_hopper_probed(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                         const ProbeBuffers& probe, cudaStream_t stream);
// The launch with a sliding window or a soft-cap (hopper_plan.h's
// hopper_extras; hopper_prefill_extras.cu, its own kernels): dense tensors
// through TMA only, else cudaErrorNotSupported.
cudaError_t launch_prefill_hopper_extras(const PrefillLaunchPlan& plan, const PrefillKernelParams& p,
                                         const HopperExtras& x, cudaStream_t stream);

namespace {

template <typename Cfg, typename Kernel>
cudaError_t prepare(Kernel kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
}

// TMA launches are programmatic (launch_maybe_programmatic, ptx.cuh): the
// next call's launch and barrier setup overlap the previous kernel's last
// CTAs instead of following them; the kernel waits for that one (pdl_wait)
// before reading or writing anything it could touch
// (bench/TUNING.md#hopper-prefill). Probed launches are plain.
constexpr bool kProgrammaticTma = true;

// TMA (dense tensors, where the maps encode): the plan's persistent CTAs,
// or one CTA per work tile; otherwise the cp.async producer, one CTA per
// work tile. Probed launches run one CTA per work tile: the probe's span
// buffers are indexed by blockIdx.x (probe.cuh), and the kernel reads such
// a grid in blockIdx order.
// kExtras: the window and soft-cap instantiations (TMA only, no probes).
template <typename Cfg, bool kMayPersist, typename T, bool kCausal, typename Probe, bool kExtras = false>
cudaError_t launch_dense(const PrefillLaunchPlan& plan, const PrefillKernelParams& p, const ProbeBuffers* probe,
                         cudaStream_t stream, const HopperExtras& x = {}) {
  constexpr bool kProbed = Probe::kEnabled;
  static_assert(!kExtras || !kProbed, "windows and soft-cap are not probed");
  typename Probe::template Params<HopperParams<PrefillKernelParams>> hp{};
  hp.view = p;
  hp.view.longest_first_group = plan.longest_first_group;
  if constexpr (kProbed) hp.probe = *probe;
  if constexpr (kExtras) {
    hp.extras = x;
    if (x.softcap > 0.0f) {
      hp.softcap_c1 = 2.0f * p.scale_log2 / x.softcap;
      hp.softcap_c2 = x.softcap * kLog2e / p.scale_log2;
    }
  }
  if (plan.tma && encode_dense_maps<Cfg>(plan.type, p, &hp)) {
    const dim3 grid(ceil_div(p.q_len, Cfg::kBlockQ), p.q_heads, p.batch);
    if constexpr (kMayPersist && !kProbed) {
      if (plan.persistent.ctas > 0) {
        auto kernel = hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, true, NoProbe,
                                              true, kExtras>;
        if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
        const int sms = plan.persistent.ctas;
        hp.view.longest_first_group = plan.persistent.longest_first_group;
        // Non-causal: the last two rounds split by key tiles when the caller
        // gave the scratch for it (the kernel's counters and partials).
        // Not with a window (a plan made without one may meet p with one).
        if (!kCausal && !x.windowed(kCausal) && p.workspace != nullptr &&
            p.workspace_bytes >= plan.persistent.split_workspace_bytes) {
          hp.split = plan.persistent.split;
          hp.split_arrivals = static_cast<int*>(p.workspace);
          hp.split_partials = reinterpret_cast<float*>(static_cast<char*>(p.workspace) +
                                                       split_tail_arrivals_bytes(sms, Cfg::kConsumerWarps));
        }
        // The deal and the list's order, their divisors as FastDivmods: the
        // kernel looks up each work tile with multiplies instead of divisions.
        const int64_t work_tiles = int64_t(grid.x) * grid.y * grid.z;
        hp.tiles = WorkTileList(int(grid.x), p.q_heads, p.batch, hp.view.longest_first_group, kCausal, p.group);
        const int whole = hp.split.split_tiles > 0 ? hp.split.whole_tiles : int(work_tiles);
        hp.deal = PersistentDeal(whole, hp.split.split_tiles > 0 ? whole : hp.tiles.per_group * hp.tiles.q_tiles, sms);
        return launch_maybe_programmatic(kernel, dim3(sms), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream,
                                         kProgrammaticTma, hp);
      }
    }
    auto kernel =
        hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, true, Probe, false, kExtras>;
    if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
    return launch_maybe_programmatic(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream,
                                     kProgrammaticTma && !kProbed, hp);
  }
  if constexpr (kHasCpAsync<Cfg> && !kExtras) {
    using Cp = CpAsyncConfig<Cfg>;
    auto kernel = hopper_attention_kernel<Cp, T, kCausal, DenseView<T, Cp::kBlockQ, kCausal>, false, Probe>;
    if (cudaError_t err = prepare<Cp>(kernel); err != cudaSuccess) return err;
    const dim3 cp_grid(ceil_div(p.q_len, Cp::kBlockQ), p.q_heads, p.batch);
    kernel<<<cp_grid, Cp::kThreads, Cp::kSmemBytes, stream>>>(hp);
    return cudaGetLastError();
  } else {
    return cudaErrorNotSupported;  // TMA only at this head_dim (hopper_config.cuh), or with extras
  }
}

// The plan's configuration as template constants, of the set kSet:
// hopper_prefill.cu instantiates the production ones (with and without
// probes), hopper_prefill_extras.cu their window and soft-cap kernels, the
// lab the research variants' (bf16, no probes).
template <typename T, typename Probe, HopperConfigs kSet, bool kExtras = false>
cudaError_t launch_hopper_typed(const PrefillLaunchPlan& plan, const PrefillKernelParams& p, const ProbeBuffers* probe,
                                cudaStream_t stream, const HopperExtras& x = {}) {
  return visit_hopper_config<kSet>(plan.hopper_config, [&](auto config, auto production) {
    using Cfg = decltype(config);
    constexpr bool kMayPersist = decltype(production)::value;
    if constexpr (kExtrasOnlyConfig<Cfg> && !kExtras) {
      return cudaErrorInvalidValue;  // never planned without a window
    } else {
      return plan.causal ? launch_dense<Cfg, kMayPersist, T, true, Probe, kExtras>(plan, p, probe, stream, x)
                         : launch_dense<Cfg, kMayPersist, T, false, Probe, kExtras>(plan, p, probe, stream, x);
    }
  });
}

}  // namespace
}  // namespace flashscope::kernels
