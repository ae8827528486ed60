// CUDA backend of prefill(): maps PrefillParams onto the kernels' plain
// parameters, picks the version, launches, and turns CUDA errors into Status.
#include "cuda/prefill_cuda.hpp"

#include <cmath>
#include <string>

#include "util/math.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "kernels/attention/prefill_launch.h"
#if FLASHSCOPE_WITH_HOPPER
#include "kernels/hopper/hopper_launch.h"
#endif
#endif

namespace flashscope::cuda {

#if FLASHSCOPE_WITH_CUDA

namespace {

// Whether the current device runs the sm_90a kernels, asked once per device
// (the answer needs a function-attribute query; prefill() is called per
// layer). 0 unknown, 1 no, 2 yes.
bool hopper_runnable_here() {
#if FLASHSCOPE_WITH_HOPPER
  static std::array<std::atomic<int>, 64> cache{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  int known = cache[device].load(std::memory_order_relaxed);
  if (known == 0) {
    known = kernels::hopper_kernels_runnable() ? 2 : 1;
    cache[device].store(known, std::memory_order_relaxed);
  }
  return known == 2;
#else
  return false;
#endif
}

}  // namespace

bool prefill_kernel_runnable(PrefillKernel kernel) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return false;
  }
  if (kernel == PrefillKernel::kHopper) return hopper_runnable_here();
  return true;
}

PrefillKernel choose_prefill_kernel(const PrefillParams& p) {
  // On an H100/H200 the wgmma kernel is the fastest on dense tensors, where
  // its producer uses TMA; packed varlen tensors go through its cp.async
  // producer, which is slower than v6 (bench/TUNING.md#hopper-prefill).
  if (p.cu_seqlens_q == nullptr && hopper_runnable_here()) return PrefillKernel::kHopper;
  // At head_dim 128 v6's look-ahead is ahead of v5; at 64 v5, with four
  // 32-row warps per CTA and two CTAs per SM, is ahead of v6
  // (bench/TUNING.md#sm80-prefill).
  return p.head_dim == 128 ? PrefillKernel::kV6 : PrefillKernel::kV5;
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
  const float scale = p.softmax_scale > 0.0f ? p.softmax_scale : 1.0f / std::sqrt(float(p.head_dim));
  k.scale_log2 = scale * kLog2e;
  k.workspace = p.workspace;
  k.workspace_bytes = p.workspace_bytes;
  return k;
}

size_t prefill_workspace_bytes(const PrefillParams& p, PrefillKernel kernel) {
#if FLASHSCOPE_WITH_HOPPER
  if (kernel == PrefillKernel::kHopper && hopper_runnable_here())
    return kernels::hopper_prefill_workspace_bytes(p.head_dim, p.causal, prefill_kernel_params(p));
#endif
  (void)p;
  (void)kernel;
  return 0;
}

Status prefill(const PrefillParams& p, PrefillKernel kernel) {
  const int version = static_cast<int>(kernel);  // kV1 == 1 ... kV6 == 6, kHopper == 7
  if (version < 1 || version > 7) return invalid_argument("prefill kernel must be v1..v6 or hopper on CUDA");
  if (kernel == PrefillKernel::kHopper && !hopper_runnable_here())
    return unsupported("the hopper kernel needs an sm_90 GPU (H100/H200) and a library built with its sm_90a code");
  if (p.dtype == DType::kFP16 && kernel != PrefillKernel::kV5 && kernel != PrefillKernel::kV6 &&
      kernel != PrefillKernel::kHopper)
    return unsupported(std::string("fp16 is built for the production kernels (v5, v6, hopper, auto) only, not ") +
                       prefill_kernel_name(kernel));

  const kernels::PrefillKernelParams k = prefill_kernel_params(p);

  // Grid limits: heads on y and sequences on z are capped at 65535.
  if (p.q_heads > 65535 || p.batch > 65535) return unsupported("q_heads and batch must each be <= 65535 on CUDA");

  const auto type = p.dtype == DType::kFP16 ? kernels::ElemType::kFP16 : kernels::ElemType::kBF16;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  cudaError_t err = cudaErrorInvalidValue;
#if FLASHSCOPE_WITH_HOPPER
  if (kernel == PrefillKernel::kHopper) err = kernels::launch_prefill_hopper(type, p.head_dim, p.causal, k, stream);
#endif
  if (kernel != PrefillKernel::kHopper) err = kernels::launch_prefill(version, type, p.head_dim, p.causal, k, stream);
  if (err != cudaSuccess)
    return device_error(std::string("prefill ") + prefill_kernel_name(kernel) + " launch failed: " +
                        cudaGetErrorString(err));
  return {};
}

#else  // built without CUDA

bool prefill_kernel_runnable(PrefillKernel) { return false; }

PrefillKernel choose_prefill_kernel(const PrefillParams& p) {
  return p.head_dim == 128 ? PrefillKernel::kV6 : PrefillKernel::kV5;
}

size_t prefill_workspace_bytes(const PrefillParams&, PrefillKernel) { return 0; }

Status prefill(const PrefillParams&, PrefillKernel) {
  return unsupported("this build of flashscope has no CUDA backend (configure with FLASHSCOPE_CUDA=ON); use Device::kCpu");
}

#endif

}  // namespace flashscope::cuda
