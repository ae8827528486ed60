// The few-row decode kernel's instantiations and launch (paged_decode_kernel.cuh):
// head_dim 32, 64, 128 and 256, both dtypes, up to 4 or 8 rows, plain
// (causal or not), windowed and windowed with a soft-cap.
#include "kernels/attention/paged_decode_kernel.cuh"
#include "kernels/attention/paged_launch.h"

namespace flashscope::kernels {
namespace {

template <typename T, int D, int kRows, bool kCausal, int kMods>
cudaError_t launch_rows(const PagedKernelParams& p, cudaStream_t stream, bool programmatic) {
  return launch_maybe_programmatic(paged_decode_kernel<T, D, kRows, kCausal, kMods>,
                                   dim3(p.num_splits, p.kv_heads, p.batch), dim3(paged_decode::kThreads), 0, stream,
                                   programmatic, p);
}

template <typename T, int D, bool kCausal, int kMods>
cudaError_t launch_mods(const PagedKernelParams& p, cudaStream_t stream, bool programmatic) {
  return p.q_len * p.group <= 4 ? launch_rows<T, D, 4, kCausal, kMods>(p, stream, programmatic)
                                : launch_rows<T, D, kPagedDecodeFewRows, kCausal, kMods>(p, stream, programmatic);
}

template <typename T, int D>
cudaError_t launch_dim(bool causal, int mods, const PagedKernelParams& p, cudaStream_t stream, bool programmatic) {
  switch (mods) {
    case kModNone:
      return causal ? launch_mods<T, D, true, kModNone>(p, stream, programmatic)
                    : launch_mods<T, D, false, kModNone>(p, stream, programmatic);
    case kModWindow: return launch_mods<T, D, false, kModWindow>(p, stream, programmatic);
    case kModWindow | kModSoftcap: return launch_mods<T, D, false, kModWindow | kModSoftcap>(p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_typed(int head_dim, bool causal, int mods, const PagedKernelParams& p, cudaStream_t stream,
                         bool programmatic) {
  switch (head_dim) {
    case 32: return launch_dim<T, 32>(causal, mods, p, stream, programmatic);
    case 64: return launch_dim<T, 64>(causal, mods, p, stream, programmatic);
    case 128: return launch_dim<T, 128>(causal, mods, p, stream, programmatic);
    case 256: return launch_dim<T, 256>(causal, mods, p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool paged_decode_takes(int head_dim, int rows_per_kv_head) {
  const bool dim = head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
  return dim && rows_per_kv_head >= 1 && rows_per_kv_head <= kPagedDecodeFewRows;
}

cudaError_t launch_paged_decode(ElemType type, int head_dim, bool causal, int mods, const PagedKernelParams& p,
                                cudaStream_t stream, bool programmatic) {
  if (!paged_decode_takes(head_dim, p.q_len * p.group)) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? launch_typed<__half>(head_dim, causal, mods, p, stream, programmatic)
                                 : launch_typed<__nv_bfloat16>(head_dim, causal, mods, p, stream, programmatic);
}

}  // namespace flashscope::kernels
