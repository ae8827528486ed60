// Instantiates the Hopper attention kernel: bf16 and fp16, head_dim 64 and
// 128, causal on/off; dense tensors through TMA, varlen and the paged cache
// through the cp.async producer. Compiled for sm_90a only.
#include "kernels/hopper/hopper_config.cuh"
#include "kernels/hopper/split_tail_workspace.h"

namespace flashscope::kernels {
namespace {

template <typename Cfg, typename Kernel>
cudaError_t prepare(Kernel kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
}

// The split tail of a persistent non-causal launch of Cfg on `sms` CTAs
// (split_tiles = 0 where whole tiles deal as well) and the workspace it needs.
template <typename Cfg>
SplitTail split_tail_of(const PrefillKernelParams& p, int sms) {
  const int q_tiles = (p.q_len + Cfg::kBlockQ - 1) / Cfg::kBlockQ;
  const int64_t work_tiles = int64_t(q_tiles) * p.q_heads * p.batch;
  if (work_tiles >= (int64_t(1) << 31)) return SplitTail{0, 0, 1, sms};
  return plan_split_tail(int(work_tiles), (p.kv_len + Cfg::kBlockKV - 1) / Cfg::kBlockKV, sms);
}
template <typename Cfg>
size_t split_workspace_bytes(int sms) {
  return split_tail_workspace_bytes(sms, Cfg::kConsumerWarps, Cfg::kDim);
}

// TMA launches are programmatic (launch_maybe_programmatic, ptx.cuh): the
// next call's launch and barrier setup overlap the previous kernel's last
// CTAs instead of following them; the kernel waits for that one (pdl_wait)
// before reading or writing anything it could touch. Back to back on the
// H200 against plain launches (results/nvidia-h200-2026-11-22-session8.txt):
// seed shape +1.0%, 8k² +0.5-1.6%, SmolLM2's 16 x 9/3 x 1024² +2.2%,
// 8 x 9/3 x 512² +8%, one wave of 1 x 9/3 x 300² +22%; each call alone, level.
constexpr bool kProgrammaticTma = true;

// TMA (dense tensors): persistent CTAs, one per SM walking the work tiles
// (hopper_config.cuh says why) where there are more tiles than SMs, else (or
// with kOneCtaPerTile) one CTA per work tile; otherwise the cp.async
// producer, one CTA per work tile.
template <typename Cfg, typename T, bool kCausal, bool kOneCtaPerTile = false>
cudaError_t launch_dense(ElemType type, const PrefillKernelParams& p, cudaStream_t stream, bool allow_tma) {
  HopperParams<PrefillKernelParams> hp{};
  hp.view = p;
  // TMA needs whole tensors it can describe: dense (not packed varlen).
  const bool tma = allow_tma && encode_dense_maps<Cfg>(type, p, &hp);
  const dim3 grid((p.q_len + Cfg::kBlockQ - 1) / Cfg::kBlockQ, p.q_heads, p.batch);
  if (tma) {
    auto one_cta_per_tile = [&] {
      auto kernel = hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, true>;
      if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
      return launch_maybe_programmatic(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, kProgrammaticTma,
                                       hp);
    };
    if constexpr (kOneCtaPerTile) {
      return one_cta_per_tile();
    } else {
      // One round of work tiles leaves a persistent CTA nothing to overlap:
      // one CTA per tile saves its bookkeeping (3% on 2 x 4 x 1000 x 777).
      const int64_t work_tiles = int64_t(grid.x) * grid.y * grid.z;
      const int sms = current_sm_count();
      if (work_tiles <= sms) return one_cta_per_tile();
      auto kernel =
          hopper_attention_kernel<Cfg, T, kCausal, DenseView<T, Cfg::kBlockQ, kCausal>, true, NoProbe, true>;
      if (cudaError_t err = prepare<Cfg>(kernel); err != cudaSuccess) return err;
      if (kCausal)
        hp.view.longest_first_group =
            persistent_longest_first_group(p.q_heads * p.batch, grid.x, sms, hp.view.longest_first_group);
      // Non-causal: the last two rounds split by key tiles when the caller
      // gave the scratch for it (the kernel's counters and partials).
      if (!kCausal && p.workspace != nullptr && p.workspace_bytes >= split_workspace_bytes<Cfg>(sms)) {
        hp.split = split_tail_of<Cfg>(p, sms);
        hp.split_arrivals = static_cast<int*>(p.workspace);
        hp.split_partials = reinterpret_cast<float*>(static_cast<char*>(p.workspace) +
                                                     split_tail_arrivals_bytes(sms, Cfg::kConsumerWarps));
      }
      // The deal and the list's order, their divisors as FastDivmods: the
      // kernel looks up each work tile with multiplies instead of divisions.
      hp.tiles = WorkTileList(int(grid.x), p.q_heads, p.batch, hp.view.longest_first_group, kCausal, p.group);
      const int whole = hp.split.split_tiles > 0 ? hp.split.whole_tiles : int(work_tiles);
      hp.deal = PersistentDeal(whole, hp.split.split_tiles > 0 ? whole : hp.tiles.per_group * hp.tiles.q_tiles, sms);
      return launch_maybe_programmatic(kernel, dim3(sms), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream,
                                       kProgrammaticTma, hp);
    }
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

// Calls fn(Cfg{}) with the production tiles for the shape (hopper_config.cuh):
// the one choice both the launch and its workspace size follow.
template <typename Fn>
auto with_default_config(int head_dim, bool causal, const PrefillKernelParams& p, Fn&& fn) {
  if (head_dim == 64)
    return use_short_causal_config(64, causal, p.q_len) ? fn(ShortCausalConfig64{}) : fn(DefaultConfig<64>{});
  return use_long_kv_config(128, p.kv_len) ? fn(LongKvConfig128{}) : fn(DefaultConfig<128>{});
}

// The production tiles; kOneCtaPerTile launches them one CTA per work tile
// instead of persistent.
template <typename T, bool kCausal>
cudaError_t launch_default(ElemType type, int head_dim, const PrefillKernelParams& p, cudaStream_t s, bool tma,
                           HopperVariant v) {
  return with_default_config(head_dim, kCausal, p, [&](auto config) {
    using Cfg = decltype(config);
    return v == HopperVariant::kOneCtaPerTile ? launch_dense<Cfg, T, kCausal, true>(type, p, s, tma)
                                              : launch_dense<Cfg, T, kCausal>(type, p, s, tma);
  });
}

// The workspace the production launch of p asks for (0: it splits nothing).
size_t default_workspace_bytes(int head_dim, bool causal, const PrefillKernelParams& p) {
  if (causal || p.cu_seqlens_q != nullptr) return 0;
  const int sms = current_sm_count();
  return with_default_config(head_dim, causal, p, [&](auto config) -> size_t {
    using Cfg = decltype(config);
    return split_tail_of<Cfg>(p, sms).split_tiles > 0 ? split_workspace_bytes<Cfg>(sms) : 0;
  });
}

// The variants (bf16 only; one CTA per work tile, to compare tiles with tiles).
template <typename T, bool kCausal>
cudaError_t bf16_variant(ElemType type, int head_dim, const PrefillKernelParams& p, cudaStream_t s, HopperVariant v,
                         bool tma) {
  if (head_dim == 64) {
    switch (v) {
      case HopperVariant::kTwoConsumersPingPong:
        return launch_dense<HopperPrefillConfig<64, 4, 2, true>, T, kCausal, true>(type, p, s, tma);
      case HopperVariant::kThreeConsumers:
        return launch_dense<HopperPrefillConfig<64, 4, 3, false>, T, kCausal, true>(type, p, s, tma);
      default:
        return launch_default<T, kCausal>(type, 64, p, s, tma, v);
    }
  }
  switch (v) {
    case HopperVariant::kBlockKV128:
      return launch_dense<HopperPrefillConfig<128, 3>, T, kCausal, true>(type, p, s, tma);
    case HopperVariant::kStages2:
      return launch_dense<HopperPrefillConfig<128, 2>, T, kCausal, true>(type, p, s, tma);
    case HopperVariant::kPingPong:
      return launch_dense<HopperPrefillConfig<128, 3, 2, true>, T, kCausal, true>(type, p, s, tma);
    case HopperVariant::kBlockKV176:
      return launch_dense<HopperPrefillConfig<128, 2, 2, false, 176>, T, kCausal, true>(type, p, s, tma);
    case HopperVariant::kBlockKV192:
      return launch_dense<HopperPrefillConfig<128, 2, 2, true, 192>, T, kCausal, true>(type, p, s, tma);
    case HopperVariant::kBlockKV176PingPong:
      return launch_dense<DefaultConfig<128>, T, kCausal, true>(type, p, s, tma);
    default:
      return launch_default<T, kCausal>(type, 128, p, s, tma, v);
  }
}

template <typename T, bool kCausal>
cudaError_t dense_variant(ElemType type, int head_dim, const PrefillKernelParams& p, cudaStream_t s, HopperVariant v) {
  const bool tma = v != HopperVariant::kCpAsync;
  // fp16 runs the default tiles (the other tile variants are bf16 only: not instantiated).
  if constexpr (std::is_same_v<T, __half>) {
    return launch_default<T, kCausal>(type, head_dim, p, s, tma, v);
  } else {
    return bf16_variant<T, kCausal>(type, head_dim, p, s, v, tma);
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

cudaError_t launch_prefill_hopper(ElemType type, int head_dim, bool causal, const PrefillKernelParams& params,
                                  cudaStream_t stream, HopperVariant variant) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  const PrefillKernelParams p = with_longest_first_group(params, head_dim, causal);
  return type == ElemType::kFP16 ? dense_typed<__half>(type, head_dim, causal, p, stream, variant)
                                 : dense_typed<__nv_bfloat16>(type, head_dim, causal, p, stream, variant);
}

size_t hopper_prefill_workspace_bytes(int head_dim, bool causal, const PrefillKernelParams& p) {
  if (head_dim != 64 && head_dim != 128) return 0;
  return default_workspace_bytes(head_dim, causal, p);
}

cudaError_t launch_paged_hopper(ElemType type, int head_dim, bool causal, const PagedKernelParams& p,
                                cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? paged_typed<__half>(head_dim, causal, p, stream)
                                 : paged_typed<__nv_bfloat16>(head_dim, causal, p, stream);
}

}  // namespace flashscope::kernels
