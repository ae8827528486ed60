// The Hopper kernel's research variants (hopper_variants.h): their plans
// through the library's plan_prefill_hopper_config, and their tiles
// instantiated here, on the library's one launch path
// (kernels/hopper/hopper_prefill_launch.cuh). sm_90a only.
#include "flashscope_lab/hopper_variants.h"
#include "kernels/hopper/hopper_launch.h"
#include "kernels/hopper/hopper_prefill_launch.cuh"

namespace flashscope::lab {

using kernels::ElemType;
using kernels::HopperConfig;

namespace {

// The configuration of `v` (the production one for kDefault, kCpAsync and
// kOneCtaPerTile, and for variants that do not apply to this head_dim or
// dtype) and whether it runs one CTA per work tile.
HopperConfig variant_config(HopperVariant v, ElemType type, int head_dim, HopperConfig production, bool* one_cta) {
  *one_cta = v == HopperVariant::kOneCtaPerTile;
  if (type != ElemType::kBF16) return production;  // the variants' tiles are bf16 only
  auto variant = [&](HopperConfig c) {
    *one_cta = true;
    return c;
  };
  if (head_dim == 64) {
    switch (v) {
      case HopperVariant::kTwoConsumersPingPong: return variant(HopperConfig::kTwoConsumersPingPong64);
      case HopperVariant::kThreeConsumers: return variant(HopperConfig::kThreeConsumers64);
      default: return production;
    }
  }
  if (head_dim != 128) return production;  // 256: the production tiles only
  switch (v) {
    case HopperVariant::kBlockKV128: return variant(HopperConfig::kBlockKV128);
    case HopperVariant::kStages2: return variant(HopperConfig::kStages2);
    case HopperVariant::kPingPong: return variant(HopperConfig::kPingPong128);
    case HopperVariant::kBlockKV176: return variant(HopperConfig::kBlockKV176);
    case HopperVariant::kBlockKV192: return variant(HopperConfig::kBlockKV192);
    case HopperVariant::kBlockKV176PingPong: return variant(HopperConfig::kDefault128);
    default: return production;
  }
}

}  // namespace

kernels::PrefillLaunchPlan plan_hopper_variant(ElemType type, int head_dim, bool causal,
                                               const kernels::PrefillKernelParams& p,
                                               const kernels::DeviceLaunchFacts& dev, HopperVariant variant) {
  bool one_cta = false;
  const HopperConfig config =
      variant_config(variant, type, head_dim, kernels::production_hopper_config(head_dim, causal, p.q_len, p.kv_len),
                     &one_cta);
  return kernels::plan_prefill_hopper_config(type, head_dim, causal, p, dev, config,
                                             /*tma=*/variant != HopperVariant::kCpAsync, one_cta);
}

cudaError_t launch_hopper_variant(const kernels::PrefillLaunchPlan& plan, const kernels::PrefillKernelParams& p,
                                  cudaStream_t stream) {
  if (kernels::is_production_hopper_config(plan.hopper_config))
    return kernels::launch_prefill_hopper(plan, p, nullptr, stream);
  if (plan.family != kernels::PrefillFamily::kHopper || plan.type != ElemType::kBF16) return cudaErrorInvalidValue;
  return kernels::launch_hopper_typed<__nv_bfloat16, kernels::NoProbe, kernels::HopperConfigs::kVariants>(
      plan, p, nullptr, stream);
}

}  // namespace flashscope::lab
