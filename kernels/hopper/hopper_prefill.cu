// Instantiates the Hopper attention kernel: bf16 and fp16, head_dim 64 and
// 128, causal on/off; dense tensors through TMA, varlen and the paged cache
// through the cp.async producer. Compiled for sm_90a only.
#include "kernels/hopper/hopper_launch.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <type_traits>

#include "kernels/hopper/hopper_prefill_kernel.cuh"

namespace flashscope::kernels {
namespace {

// From bench/hopper_variants.cu on an H200 (results in bench/results/):
//   128: two consumer warpgroups, three stages (32 KiB per K or V tile: Q +
//        6 tiles = 224 KiB); the third stage is worth 40-50% over two (the
//        producer stays two tiles ahead); ping-pong and split P·V gain nothing.
//   64:  three consumer warpgroups (192-row q-tiles) taking turns at the
//        tensor cores, four stages: 500 TFLOPS against 358 for two
//        warpgroups without turns, since at 64 the softmax is twice the
//        share of the work and needs other warpgroups' GEMMs to hide under.
template <int DIM>
using DefaultConfig =
    std::conditional_t<DIM == 64, HopperPrefillConfig<64, 4, false, 3, true>, HopperPrefillConfig<128, 3>>;

// cuTensorMapEncodeTiled from the driver, found through the runtime so the
// library links no libcuda. Null when the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// A 4-D map of one tensor [batch, seq, heads, D] (any strides, D contiguous)
// read in boxes of `rows` x 64 elements with the 128-byte swizzle. Strides of
// dimensions of size 1 are never used; TMA still wants them 16-byte multiples.
bool encode_map(CUtensorMap* map, ElemType type, const void* base, int head_dim, int seq, int heads, int batch,
                int64_t seq_stride, int64_t head_stride, int64_t batch_stride, int rows) {
  auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  auto stride_bytes = [](int64_t elements, int extent) -> cuuint64_t {
    return extent > 1 ? cuuint64_t(elements) * 2 : 16;
  };
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(seq), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {stride_bytes(seq_stride, seq), stride_bytes(head_stride, heads),
                                 stride_bytes(batch_stride, batch)};
  for (cuuint64_t s : strides)
    if (s % 16 != 0 || s >= (cuuint64_t(1) << 40)) return false;
  const cuuint32_t box[4] = {64, cuuint32_t(rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, type == ElemType::kFP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            4, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// The cp.async producer needs more registers than TMA's; three consumer
// warpgroups would then get 152 each, too few to keep their wgmmas in flight
// (ptxas serializes them, C7512), so the cp.async paths (varlen, paged) run
// two consumer warpgroups.
template <typename Cfg>
using CpAsyncConfig = HopperPrefillConfig<Cfg::kDim, Cfg::kStages, Cfg::kSplitPV, 2, Cfg::kPingPong>;

template <typename Cfg, typename Kernel>
cudaError_t prepare(Kernel kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
}

template <typename Cfg, typename T, bool kCausal>
cudaError_t launch_dense(ElemType type, const PrefillKernelParams& p, cudaStream_t stream, bool allow_tma) {
  HopperParams<PrefillKernelParams> hp{};
  hp.view = p;
  // TMA needs whole tensors it can describe: dense (not packed varlen).
  bool tma = allow_tma && p.cu_seqlens_q == nullptr;
  tma = tma && encode_map(&hp.q_map, type, p.q, Cfg::kDim, p.q_len, p.q_heads, p.batch, p.q_seq_stride,
                          p.q_head_stride, p.q_batch_stride, Cfg::kBlockQ);
  tma = tma && encode_map(&hp.k_map, type, p.k, Cfg::kDim, p.kv_len, p.kv_heads, p.batch, p.k_seq_stride,
                          p.k_head_stride, p.k_batch_stride, Cfg::kBlockKV);
  tma = tma && encode_map(&hp.v_map, type, p.v, Cfg::kDim, p.kv_len, p.kv_heads, p.batch, p.v_seq_stride,
                          p.v_head_stride, p.v_batch_stride, Cfg::kBlockKV);
  const dim3 grid((p.q_len + Cfg::kBlockQ - 1) / Cfg::kBlockQ, p.q_heads, p.batch);
  if (tma) {
    auto kernel = hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, true>;
    if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(hp);
  } else {
    using Cp = CpAsyncConfig<Cfg>;
    auto kernel = hopper_attention_kernel<Cp, T, kCausal, DenseView<T, Cp::kBlockQ, kCausal>, false>;
    if (cudaError_t err = prepare<Cp>(kernel); err != cudaSuccess) return err;
    const dim3 cp_grid((p.q_len + Cp::kBlockQ - 1) / Cp::kBlockQ, p.q_heads, p.batch);
    kernel<<<cp_grid, Cp::kThreads, Cp::kSmemBytes, stream>>>(hp);
  }
  return cudaGetLastError();
}

template <typename Tile, typename T, bool kCausal>
cudaError_t launch_paged(const PagedKernelParams& p, cudaStream_t stream) {
  using Cfg = CpAsyncConfig<Tile>;
  auto kernel = hopper_attention_kernel<Cfg, T, kCausal,
                                        PagedView<T, Cfg::kDim, Cfg::kBlockQ, Cfg::kBlockKV, kCausal>, false>;
  if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
  HopperParams<PagedKernelParams> hp{};
  hp.view = p;
  const int q_tiles = (p.q_len * p.group + Cfg::kBlockQ - 1) / Cfg::kBlockQ;
  const dim3 grid(q_tiles * p.num_splits, p.kv_heads, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(hp);
  return cudaGetLastError();
}

template <typename T, bool kCausal>
cudaError_t dense_variant(ElemType type, int head_dim, const PrefillKernelParams& p, cudaStream_t s,
                          HopperVariant v) {
  if constexpr (std::is_same_v<T, __half>) v = v == HopperVariant::kCpAsync ? v : HopperVariant::kDefault;
  const bool tma = v != HopperVariant::kCpAsync;
  if (head_dim == 64) {
    switch (v) {
      case HopperVariant::kTwoConsumers:
        return launch_dense<HopperPrefillConfig<64, 4, false, 2, false>, T, kCausal>(type, p, s, tma);
      case HopperVariant::kTwoConsumersPingPong:
        return launch_dense<HopperPrefillConfig<64, 4, false, 2, true>, T, kCausal>(type, p, s, tma);
      case HopperVariant::kThreeConsumers:
        return launch_dense<HopperPrefillConfig<64, 4, false, 3, false>, T, kCausal>(type, p, s, tma);
      default: return launch_dense<DefaultConfig<64>, T, kCausal>(type, p, s, tma);
    }
  }
  switch (v) {
    case HopperVariant::kSplitPV: return launch_dense<HopperPrefillConfig<128, 3, true>, T, kCausal>(type, p, s, tma);
    case HopperVariant::kStages2: return launch_dense<HopperPrefillConfig<128, 2>, T, kCausal>(type, p, s, tma);
    case HopperVariant::kPingPong:
      return launch_dense<HopperPrefillConfig<128, 3, false, 2, true>, T, kCausal>(type, p, s, tma);
    default: return launch_dense<DefaultConfig<128>, T, kCausal>(type, p, s, tma);
  }
}

template <typename T>
cudaError_t dense_typed(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p, cudaStream_t s,
                        HopperVariant v) {
  return causal ? dense_variant<T, true>(type, head_dim, p, s, v) : dense_variant<T, false>(type, head_dim, p, s, v);
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

cudaError_t launch_prefill_hopper(ElemType type, int head_dim, bool causal, const PrefillKernelParams& p,
                                  cudaStream_t stream, HopperVariant variant) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? dense_typed<__half>(type, head_dim, causal, p, stream, variant)
                                 : dense_typed<__nv_bfloat16>(type, head_dim, causal, p, stream, variant);
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
