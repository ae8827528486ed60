// The sm80 family's plan and its one launch path, production and probed
// (the instantiations: prefill_versions.cuh), and the door through which the
// kernel lab (lab/) adds the teaching ladder's v1..v4.
#include "kernels/attention/prefill_launch.h"

#include <atomic>
#include <cstdint>

#include "kernels/attention/persistent_deal.h"
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

namespace {
// Written once, when the lab's objects start (before main), read by launches.
std::atomic<Sm80LadderLauncher> g_ladder{nullptr};
}  // namespace

void install_sm80_ladder(Sm80LadderLauncher launcher) { g_ladder.store(launcher, std::memory_order_release); }

bool prefill_version_built(int version, ElemType type) {
  if (version == 5 || version == 6) return true;
  return type == ElemType::kBF16 && version >= 1 && version <= 4 &&
         g_ladder.load(std::memory_order_acquire) != nullptr;
}

bool prefill_version_instantiated(int version, int head_dim, bool mods) {
  if (version >= 1 && version <= 4) return !mods && (head_dim == 64 || head_dim == 128);
  return sm80_instantiated(version, head_dim, mods ? kModWindow : kModNone);
}

int prefill_default_version(int head_dim) { return sm80_default_version(head_dim); }

namespace {

template <typename Cfg>
KernelTiling tiling_of() {
  return {Cfg::kBlockQ, Cfg::kBlockKV, Cfg::kWarps};
}
// A configuration type costs nothing to name; only its kernels are
// instantiated (sm80_instantiated).
template <template <int> class Version>
KernelTiling version_tiling(int head_dim) {
  switch (head_dim) {
    case 32: return tiling_of<Version<32>>();
    case 64: return tiling_of<Version<64>>();
    case 80: return tiling_of<Version<80>>();
    case 96: return tiling_of<Version<96>>();
    case 256: return tiling_of<Version<256>>();
    default: return tiling_of<Version<128>>();
  }
}
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

}  // namespace

PrefillLaunchPlan plan_prefill_sm80(int version, ElemType type, int head_dim, bool causal,
                                    const PrefillKernelParams& p, const DeviceLaunchFacts& dev) {
  PrefillLaunchPlan plan;
  plan.family = PrefillFamily::kSm80;
  plan.version = version;
  plan.type = type;
  plan.head_dim = head_dim;
  plan.causal = causal;
  plan.tiling = prefill_tiling(version, head_dim);
  plan.longest_first_group = p.longest_first_group;
  if (causal && plan.longest_first_group == 0)
    plan.longest_first_group = causal_longest_first_group(p, head_dim, dev.l2_bytes);
  return plan;
}

cudaError_t launch_prefill(const PrefillLaunchPlan& plan, const PrefillKernelParams& params, const ProbeBuffers* probe,
                           cudaStream_t stream) {
  if (plan.family != PrefillFamily::kSm80) return cudaErrorInvalidValue;
  if (plan.version < 5) {
    const Sm80LadderLauncher ladder = g_ladder.load(std::memory_order_acquire);
    return ladder != nullptr ? ladder(plan, params, probe, stream) : cudaErrorNotSupported;
  }
  if (probe != nullptr) {
#if FLASHSCOPE_KERNEL_PROBES
    GlobalTimerProbe::Params<PrefillKernelParams> p;
    static_cast<PrefillKernelParams&>(p) = params;
    p.longest_first_group = plan.longest_first_group;
    p.probe = *probe;
    return launch_sm80_production<GlobalTimerProbe>(plan.version, plan.type, plan.head_dim, plan.causal,
                                                    attn_mods(params), p, stream);
#else
    return cudaErrorNotSupported;
#endif
  }
  // The mods come from the call's parameters, not the plan: a plan is made
  // for a shape, and the window and the cap are not part of it.
  PrefillKernelParams p = params;
  p.longest_first_group = plan.longest_first_group;
  return launch_sm80_production<NoProbe>(plan.version, plan.type, plan.head_dim, plan.causal, attn_mods(params), p,
                                         stream);
}

namespace {
template <template <int> class Version>
int smem_for(int head_dim) {
  switch (head_dim) {
    case 32: return Version<32>::kSmemBytes;
    case 64: return Version<64>::kSmemBytes;
    case 80: return Version<80>::kSmemBytes;
    case 96: return Version<96>::kSmemBytes;
    case 256: return Version<256>::kSmemBytes;
    default: return Version<128>::kSmemBytes;
  }
}
}  // namespace

int prefill_smem_bytes(int version, int head_dim) {
  switch (version) {
    case 1: return smem_for<PrefillV1>(head_dim);
    case 2: return smem_for<PrefillV2>(head_dim);
    case 3: return smem_for<PrefillV3>(head_dim);
    case 4: return smem_for<PrefillV4>(head_dim);
    case 5: return smem_for<PrefillV5>(head_dim);
    default: return smem_for<PrefillV6>(head_dim);
  }
}

}  // namespace flashscope::kernels
