// CUDA backend of prefill(): picks and checks the kernel, plans its launch,
// maps PrefillParams onto the kernels' plain parameters, launches, and turns
// CUDA errors into Status.
#include "attention/cuda/prefill_cuda.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/attention/prefill_head_dims.h"
#include "util/math.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "attention/attention_validate.hpp"
#include "device_facts.hpp"
#include "kernels/attention/prefill_launch.h"
#if FLASHSCOPE_WITH_HOPPER
#include "kernels/hopper/hopper_launch.h"
#endif
#endif

namespace flashscope::cuda {

PrefillKernel sm80_default_kernel(int head_dim) {
  return kernels::sm80_default_version(head_dim) == 6 ? PrefillKernel::kV6 : PrefillKernel::kV5;
}

#if FLASHSCOPE_WITH_CUDA

namespace {

static_assert(std::is_trivially_copyable_v<kernels::PrefillLaunchPlan> &&
                  sizeof(kernels::PrefillLaunchPlan) <= sizeof(PrefillPlan::launch) &&
                  alignof(kernels::PrefillLaunchPlan) <= alignof(PrefillPlan),
              "PrefillPlan::launch holds the kernel-level plan");

// The sm80 family's version of a kernel: v5, v6, or the lab's v1..v4
// (attention.hpp reserves their values), 0 for the others.
int sm80_version(PrefillKernel k) {
  const int value = static_cast<int>(k);
  return value >= 1 && value <= 6 ? value : 0;
}

// What the Hopper kernel runs: its head_dims through either producer (TMA
// for dense tensors, cp.async for varlen), but the head_dim that needs TMA
// (256), windows and the soft-cap through TMA only (dense tensors).
bool hopper_runs(const PrefillParams& p) {
  if (!kernels::hopper_head_dim(p.head_dim)) return false;
  const bool dense = p.cu_seqlens_q == nullptr;
  return dense || (!kernels::hopper_head_dim_needs_tma(p.head_dim) && !needs_mods(p));
}

// What a kernel does not implement: refused by name, never ignored. The
// plan's shape carries the window and the cap, so prefill(p, plan) cannot
// run a plan made without them.
Status check_features(const PrefillParams& p, PrefillKernel kernel) {
  const bool mods = needs_mods(p);
  const char* what = p.softcap > 0.0f ? "logit soft-capping (softcap)" : "sliding window (window_left/window_right)";
  if (kernel == PrefillKernel::kHopper) {
    if (hopper_runs(p)) return {};
    if (!kernels::hopper_head_dim(p.head_dim))
      return unsupported("head_dim " + std::to_string(p.head_dim) +
                         " is not supported by the CUDA prefill kernel hopper (64, 128, 256); auto runs it");
    return unsupported((kernels::hopper_head_dim_needs_tma(p.head_dim) ? "head_dim " + std::to_string(p.head_dim)
                                                                       : std::string(what)) +
                       " on the hopper kernel needs dense tensors (TMA), not varlen; auto runs it");
  }
  const int version = sm80_version(kernel);
  if (!kernels::prefill_version_instantiated(version, p.head_dim, false))
    return unsupported("head_dim " + std::to_string(p.head_dim) + " is not built for the CUDA prefill kernel " +
                       prefill_kernel_name(kernel) + "; auto runs it (v" +
                       std::to_string(kernels::prefill_default_version(p.head_dim)) + ")");
  if (mods && !kernels::prefill_version_instantiated(version, p.head_dim, true))
    return unsupported(std::string(what) + " is not supported by the CUDA prefill kernel " + prefill_kernel_name(kernel) +
                       " at head_dim " + std::to_string(p.head_dim) + "; auto runs it (v" +
                       std::to_string(kernels::prefill_default_version(p.head_dim)) + ")");
  return {};
}

}  // namespace

bool prefill_kernel_runnable(PrefillKernel kernel) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return false;
  }
  if (kernel == PrefillKernel::kHopper) {
    auto facts = device_facts();
    return facts.ok() && facts->hopper;
  }
  const int version = sm80_version(kernel);
  return version == 0 || kernels::prefill_version_built(version, kernels::ElemType::kBF16);
}

PrefillKernel choose_prefill_kernel(const PrefillParams& p) {
  // The Hopper kernel on an H100/H200 where its producer uses TMA (dense
  // tensors; packed varlen ones go through its slower cp.async producer)
  // and it runs the call; elsewhere v6 at head_dim 80, 96 and 128, v5 at 32,
  // 64 and 256 (bench/TUNING.md#hopper-prefill, #sm80-prefill). The Hopper
  // kernel cuts head_dim into 64-element column blocks (its TMA boxes and
  // wgmma descriptors in the 128-byte swizzle, hopper_layout.cuh): 32, 80
  // and 96 are not whole blocks, so they run on the sm80 family there too.
  if (p.cu_seqlens_q == nullptr && hopper_runs(p)) {
    auto facts = device_facts();
    if (facts.ok() && facts->hopper) return PrefillKernel::kHopper;
  }
  return sm80_default_kernel(p.head_dim);
}

kernels::PrefillKernelParams prefill_kernel_params(const PrefillParams& p) {
  kernels::PrefillKernelParams k{};
  k.q = p.q.data;
  k.k = p.k.data;
  k.v = p.v.data;
  k.o = p.o.data;
  k.lse = p.lse;
  k.q_batch_stride = p.q.batch_stride;
  k.q_seq_stride = p.q.seq_stride;
  k.q_head_stride = p.q.head_stride;
  k.k_batch_stride = p.k.batch_stride;
  k.k_seq_stride = p.k.seq_stride;
  k.k_head_stride = p.k.head_stride;
  k.v_batch_stride = p.v.batch_stride;
  k.v_seq_stride = p.v.seq_stride;
  k.v_head_stride = p.v.head_stride;
  k.o_batch_stride = p.o.batch_stride;
  k.o_seq_stride = p.o.seq_stride;
  k.o_head_stride = p.o.head_stride;
  k.batch = p.batch;
  k.q_heads = p.q_heads;
  k.kv_heads = p.kv_heads;
  k.group = p.q_heads / p.kv_heads;
  k.q_len = p.q_len;
  k.kv_len = p.kv_len;
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  k.workspace = p.workspace;
  k.workspace_bytes = p.workspace_bytes;
  set_scale_and_mods(p, k);
  return k;
}

kernels::HopperExtras hopper_extras_of(const PrefillParams& p) {
  kernels::HopperExtras x;
  x.window_left = p.window_left;
  x.window_right = p.window_right;
  x.softcap = p.softcap;
  return x;
}

kernels::PrefillLaunchPlan launch_plan(const PrefillPlan& plan) {
  kernels::PrefillLaunchPlan lp;
  std::memcpy(&lp, plan.launch, sizeof(lp));
  return lp;
}

Result<PrefillPlan> plan_prefill(const PrefillParams& p) {
  const PrefillKernel kernel = p.kernel == PrefillKernel::kAuto ? choose_prefill_kernel(p) : p.kernel;
  const int version = sm80_version(kernel);
  const auto type = elem_type(p.dtype);
  if (version == 0 && kernel != PrefillKernel::kHopper)
    return invalid_argument("prefill kernel must be v1..v6, hopper or auto on CUDA");
  auto facts = device_facts();
  if (!facts.ok()) return facts.status();
  if (kernel == PrefillKernel::kHopper && !facts->hopper)
    return unsupported("the hopper kernel needs an sm_90 GPU (H100/H200) and a library built with its sm_90a code");
  if (version != 0 && !kernels::prefill_version_built(version, kernels::ElemType::kBF16))
    return unsupported(std::string(prefill_kernel_name(kernel)) +
                       " is a step of the teaching ladder, which lives in the kernel lab: link the flashscope_lab "
                       "target (lab/) to run it");
  if (version != 0 && !kernels::prefill_version_built(version, type))
    return unsupported(std::string("fp16 is built for the production kernels (v5, v6, hopper, auto) only, not ") +
                       prefill_kernel_name(kernel));
  FLASHSCOPE_RETURN_IF_ERROR(check_features(p, kernel));
  // Grid limits: heads on y and sequences on z are capped at 65535.
  if (p.q_heads > 65535 || p.batch > 65535) return unsupported("q_heads and batch must each be <= 65535 on CUDA");

  const kernels::PrefillKernelParams k = prefill_kernel_params(p);
  const kernels::DeviceLaunchFacts dev{facts->sm_count, facts->l2_bytes};
  kernels::PrefillLaunchPlan lp;
#if FLASHSCOPE_WITH_HOPPER
  if (kernel == PrefillKernel::kHopper)
    lp = kernels::plan_prefill_hopper(type, p.head_dim, p.causal, k, dev, hopper_extras_of(p));
#endif
  if (version != 0) lp = kernels::plan_prefill_sm80(version, type, p.head_dim, p.causal, k, dev);

  PrefillPlan plan;
  plan.kernel = kernel;
  plan.block_q = lp.tiling.block_q;
  plan.block_kv = lp.tiling.block_kv;
  plan.warps = lp.tiling.warps;
  plan.workspace_bytes = lp.workspace_bytes;
  plan.persistent_ctas = lp.persistent.ctas;
  plan.longest_first_group = lp.persistent.ctas > 0 ? lp.persistent.longest_first_group : lp.longest_first_group;
  plan.split_tiles = lp.persistent.split.split_tiles;
  plan.shape.device_ordinal = facts->ordinal;
  std::memcpy(plan.launch, &lp, sizeof(lp));
  return plan;
}

cudaError_t launch_prefill(const PrefillPlan& plan, const kernels::PrefillKernelParams& k,
                           const kernels::ProbeBuffers* probe, cudaStream_t stream,
                           [[maybe_unused]] const kernels::HopperExtras& extras) {  // Hopper builds only
  const kernels::PrefillLaunchPlan lp = launch_plan(plan);
#if FLASHSCOPE_WITH_HOPPER
  if (lp.family == kernels::PrefillFamily::kHopper)
    return kernels::launch_prefill_hopper(lp, k, probe, stream, extras);
#endif
  if (lp.family == kernels::PrefillFamily::kSm80) return kernels::launch_prefill(lp, k, probe, stream);
  return cudaErrorInvalidValue;
}

Status prefill(const PrefillParams& p, const PrefillPlan& plan, bool check_device) {
  if (check_device) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
      cudaGetLastError();
      return device_error("cannot read the current CUDA device");
    }
    if (device != plan.shape.device_ordinal)
      return invalid_argument("prefill: the plan was made on CUDA device " + std::to_string(plan.shape.device_ordinal) +
                              ", the current device is " + std::to_string(device));
  }
  const cudaError_t err =
      launch_prefill(plan, prefill_kernel_params(p), nullptr, static_cast<cudaStream_t>(p.stream), hopper_extras_of(p));
  if (err != cudaSuccess)
    return device_error(std::string("prefill ") + prefill_kernel_name(plan.kernel) + " launch failed: " +
                        cudaGetErrorString(err));
  return {};
}

#else  // built without CUDA

bool prefill_kernel_runnable(PrefillKernel) { return false; }

PrefillKernel choose_prefill_kernel(const PrefillParams& p) { return sm80_default_kernel(p.head_dim); }

Result<PrefillPlan> plan_prefill(const PrefillParams&) {
  return unsupported("this build of flashscope has no CUDA backend (configure with FLASHSCOPE_CUDA=ON); use Device::kCpu");
}

Status prefill(const PrefillParams&, const PrefillPlan&, bool) {
  return unsupported("this build of flashscope has no CUDA backend (configure with FLASHSCOPE_CUDA=ON); use Device::kCpu");
}

#endif

}  // namespace flashscope::cuda
