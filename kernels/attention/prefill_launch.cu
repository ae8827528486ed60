// The one place that maps a runtime kernel choice to its instantiation.
#include "kernels/attention/prefill_launch.h"

#include <atomic>
#include <cstdint>

#include "kernels/attention/persistent_deal.h"
#include "kernels/attention/prefill_versions.cuh"

namespace flashscope::kernels {

cudaError_t launch_prefill_v1_bf16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v2_bf16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v3_bf16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v4_bf16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v5_bf16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v5_fp16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v6_bf16(const PrefillKernelParams&, int, bool, cudaStream_t);
cudaError_t launch_prefill_v6_fp16(const PrefillKernelParams&, int, bool, cudaStream_t);

namespace {
constexpr int kCachedDevices = 64;

// One attribute of the current device, asked once per device (launches are
// a hot path); `fallback` where the runtime cannot say.
int cached_attribute(cudaDeviceAttr attr, int fallback, std::atomic<int> (&cache)[kCachedDevices]) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return fallback;
  }
  if (device >= 0 && device < kCachedDevices)
    if (const int known = cache[device].load(std::memory_order_relaxed); known > 0) return known;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess || value <= 0) {
    cudaGetLastError();
    value = fallback;
  }
  if (device >= 0 && device < kCachedDevices) cache[device].store(value, std::memory_order_relaxed);
  return value;
}

int current_l2_bytes() {
  static std::atomic<int> cache[kCachedDevices] = {};
  return cached_attribute(cudaDevAttrL2CacheSize, 50 << 20 /* an H100's */, cache);
}
}  // namespace

int causal_longest_first_group(const PrefillKernelParams& p, int head_dim) {
  const int l2_bytes = current_l2_bytes();
  // K and V of one kv-head (bf16/fp16), shared by `group` q-heads.
  const double bytes_per_pair = 4.0 * double(p.kv_len) * head_dim / (p.group > 0 ? p.group : 1);
  const double fit = 0.5 * l2_bytes / (bytes_per_pair > 0 ? bytes_per_pair : 1.0);
  const int64_t pairs = int64_t(p.q_heads) * p.batch;
  if (pairs <= 1 || fit >= double(pairs)) return int(pairs < 1 ? 1 : pairs > (1 << 30) ? (1 << 30) : pairs);
  // Groups of equal size: a smaller last group would run its longest
  // q-tiles alone at the end, the tail this ordering is there to avoid
  // (7 pairs per group of 16 measured like no grouping at all). The largest
  // divisor not above `fit`.
  long long best = 1;
  visit_divisors_ascending(pairs, [&](long long d) {
    if (d > fit) return true;
    best = d;
    return false;
  });
  return int(best);
}

int current_sm_count() {
  static std::atomic<int> cache[kCachedDevices] = {};
  return cached_attribute(cudaDevAttrMultiProcessorCount, 132, cache);
}

PrefillKernelParams with_longest_first_group(const PrefillKernelParams& p, int head_dim, bool causal) {
  PrefillKernelParams out = p;
  if (causal && out.longest_first_group == 0) out.longest_first_group = causal_longest_first_group(out, head_dim);
  return out;
}

cudaError_t launch_prefill(int version, ElemType type, int head_dim, bool causal, const PrefillKernelParams& params,
                           cudaStream_t stream) {
  const PrefillKernelParams p = with_longest_first_group(params, head_dim, causal);
  if (type == ElemType::kFP16) {
    if (version == 5) return launch_prefill_v5_fp16(p, head_dim, causal, stream);
    if (version == 6) return launch_prefill_v6_fp16(p, head_dim, causal, stream);
    return cudaErrorInvalidValue;
  }
  switch (version) {
    case 1: return launch_prefill_v1_bf16(p, head_dim, causal, stream);
    case 2: return launch_prefill_v2_bf16(p, head_dim, causal, stream);
    case 3: return launch_prefill_v3_bf16(p, head_dim, causal, stream);
    case 4: return launch_prefill_v4_bf16(p, head_dim, causal, stream);
    case 5: return launch_prefill_v5_bf16(p, head_dim, causal, stream);
    case 6: return launch_prefill_v6_bf16(p, head_dim, causal, stream);
    default: return cudaErrorInvalidValue;
  }
}

namespace {
template <template <int> class Version>
int smem_for(int head_dim) {
  return head_dim == 64 ? Version<64>::kSmemBytes : Version<128>::kSmemBytes;
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
