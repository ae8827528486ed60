// Instantiates the Hopper attention kernel: bf16 and fp16, head_dim 64 and
// 128, causal on/off, dense (varlen too) and paged views. Compiled for
// sm_90a only.
#include "kernels/hopper/hopper_launch.h"
#include "kernels/hopper/hopper_prefill_kernel.cuh"

namespace flashscope::kernels {
namespace {

// Four stages at 64 (16 KiB per K or V tile), two at 128 (32 KiB): the ring
// plus Q stays under the 227 KiB an SM gives one CTA.
template <int DIM>
using DefaultConfig = HopperPrefillConfig<DIM, DIM == 64 ? 4 : 2>;

template <typename Cfg, typename Kernel>
cudaError_t prepare(Kernel kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
}

template <typename Cfg, typename T, bool kCausal>
cudaError_t launch_dense(const PrefillKernelParams& p, cudaStream_t stream) {
  auto kernel = hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>>;
  if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
  const dim3 grid((p.q_len + Cfg::kBlockQ - 1) / Cfg::kBlockQ, p.q_heads, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename Cfg, typename T, bool kCausal>
cudaError_t launch_paged(const PagedKernelParams& p, cudaStream_t stream) {
  auto kernel =
      hopper_attention_kernel<Cfg, T, kCausal, PagedView<T, Cfg::kDim, Cfg::kBlockQ, Cfg::kBlockKV, kCausal>>;
  if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
  const int q_tiles = (p.q_len * p.group + Cfg::kBlockQ - 1) / Cfg::kBlockQ;
  const dim3 grid(q_tiles * p.num_splits, p.kv_heads, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, bool kCausal>
cudaError_t dense_variant(int head_dim, const PrefillKernelParams& p, cudaStream_t s, HopperVariant v) {
  if (head_dim == 64) return launch_dense<DefaultConfig<64>, T, kCausal>(p, s);
  switch (v) {
    case HopperVariant::kSplitPV: return launch_dense<HopperPrefillConfig<128, 2, true>, T, kCausal>(p, s);
    case HopperVariant::kStages3: return launch_dense<HopperPrefillConfig<128, 3>, T, kCausal>(p, s);
    default: return launch_dense<DefaultConfig<128>, T, kCausal>(p, s);
  }
}

template <typename T>
cudaError_t dense_typed(int head_dim, bool causal, const PrefillKernelParams& p, cudaStream_t s, HopperVariant v) {
  return causal ? dense_variant<T, true>(head_dim, p, s, v) : dense_variant<T, false>(head_dim, p, s, v);
}

template <typename T>
cudaError_t paged_typed(int head_dim, bool causal, const PagedKernelParams& p, cudaStream_t s) {
  if (head_dim == 64)
    return causal ? launch_paged<DefaultConfig<64>, T, true>(p, s) : launch_paged<DefaultConfig<64>, T, false>(p, s);
  return causal ? launch_paged<DefaultConfig<128>, T, true>(p, s) : launch_paged<DefaultConfig<128>, T, false>(p, s);
}

}  // namespace

bool hopper_kernels_runnable() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) return false;
  if (prop.major != 9 || prop.minor != 0) return false;
  // The image for this device must be our sm_90a code (binaryVersion 90),
  // not absent: a build without it reports an error here.
  cudaFuncAttributes attr{};
  const auto kernel = hopper_attention_kernel<DefaultConfig<128>, __nv_bfloat16, false,
                                              DenseView<__nv_bfloat16, 128, false>>;
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls do not see it
    return false;
  }
  return attr.binaryVersion == 90;
}

cudaError_t launch_prefill_hopper(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                  cudaStream_t stream, HopperVariant variant) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? dense_typed<__half>(head_dim, causal, p, stream, variant)
                                 : dense_typed<__nv_bfloat16>(head_dim, causal, p, stream, variant);
}

cudaError_t launch_paged_hopper(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? paged_typed<__half>(head_dim, causal, p, stream)
                                 : paged_typed<__nv_bfloat16>(head_dim, causal, p, stream);
}

int hopper_prefill_smem_bytes(int head_dim) {
  return head_dim == 64 ? DefaultConfig<64>::kSmemBytes : DefaultConfig<128>::kSmemBytes;
}

}  // namespace flashscope::kernels
