// The Hopper kernel's research variants, kept selectable for the benchmarks
// and the tile sweep (bench/hopper_variants.cu); the runtime runs the
// production configuration (kernels/hopper/hopper_config.cuh). Kernel-level,
// like kernels/hopper/hopper_launch.h: plain parameters, no validation.
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_plan.h"

namespace flashscope::lab {

// All but kDefault and kCpAsync run one CTA per work tile.
// (bf16 only, but for kCpAsync and kOneCtaPerTile: fp16 runs kDefault otherwise).
enum class HopperVariant {
  kDefault,   // the production launch: 128: 176-key tiles (192 from 4096 keys), 2 stages, the 2 consumer
              // warpgroups taking turns; 64: 3 warpgroups taking turns, 4 stages (2 taking turns for causal
              // problems of at most 1024 queries); persistent CTAs past one wave
  kBlockKV128,  // head_dim 128: 128-key tiles, 3 stages, no turns (the default before the 176-key tiles)
  kStages2,     // head_dim 128: 128-key tiles, 2 stages
  kPingPong,    // head_dim 128: 128-key tiles, 3 stages, taking turns
  kBlockKV176,  // head_dim 128: 176-key tiles, 2 stages, no turns
  kBlockKV176PingPong,  // head_dim 128: 176-key tiles, 2 stages, taking turns, whatever the key count
  kBlockKV192,  // head_dim 128: 192-key tiles, 2 stages, taking turns
  kCpAsync,   // the cp.async producer even where TMA applies (dense, non-varlen)
  kTwoConsumersPingPong,  // head_dim 64: two, taking turns
  kThreeConsumers,        // head_dim 64: three, without turns
  kOneCtaPerTile,         // the default tiles, one CTA per work tile (kDefault runs persistent CTAs
                          // where there are more work tiles than SMs)
};

// The plan of `variant` for p on a device with `dev`'s facts.
kernels::PrefillLaunchPlan plan_hopper_variant(kernels::ElemType type, int head_dim, bool causal,
                                               const kernels::PrefillKernelParams& p,
                                               const kernels::DeviceLaunchFacts& dev, HopperVariant variant);

// Runs a plan of plan_hopper_variant (the production configurations through
// the library's launch path, the variants' tiles through the lab's).
cudaError_t launch_hopper_variant(const kernels::PrefillLaunchPlan& plan, const kernels::PrefillKernelParams& p,
                                  cudaStream_t stream);

}  // namespace flashscope::lab
