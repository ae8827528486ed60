// device_facts(): a lock-free table per device ordinal (see the header).
#include "cuda/device_facts.hpp"

#include <atomic>
#include <cstdint>
#include <string>

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/attention/paged_launch.h"
#include "kernels/model/model_ops.h"
#endif

namespace flashscope::cuda {

#if FLASHSCOPE_WITH_CUDA

namespace {

// 0 = not read yet, else kKnown | pdl bit | SM count. Two threads that miss
// together both read the same values; the stores agree.
constexpr int kCachedDevices = 64;
constexpr uint32_t kKnown = 1u << 31, kPdl = 1u << 30, kSmMask = kPdl - 1;
std::atomic<uint32_t> g_device_facts[kCachedDevices];

Result<DeviceFacts> read_device_facts(int device) {
  DeviceFacts f;
  int cc_major = 0;
  if (cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return device_error("cannot read the SM count and compute capability of device " + std::to_string(device));
  }
  // Programmatic launches exist from sm_90 on; elsewhere the attribute is not
  // set at all. Every kernel launched programmatically must wait: the split-KV
  // combine and the decode step's GEMMs are asked (a kernel with no code for
  // this device says so at its launch, with the launch's own error).
  bool combine_waits = false, gemm_waits = false;
  if (cc_major >= 9 && (kernels::paged_combine_waits_on_producer(&combine_waits) != cudaSuccess ||
                        kernels::skinny_gemm_waits_on_producer(&gemm_waits) != cudaSuccess)) {
    cudaGetLastError();
    combine_waits = gemm_waits = false;
  }
  f.programmatic = cc_major >= 9 && combine_waits && gemm_waits;
  return f;
}

}  // namespace

Result<DeviceFacts> device_facts() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return device_error("cannot read the current CUDA device");
  }
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable) {
    const uint32_t v = g_device_facts[device].load(std::memory_order_relaxed);
    if (v & kKnown) return DeviceFacts{int(v & kSmMask), (v & kPdl) != 0};
  }
  auto f = read_device_facts(device);
  if (f.ok() && cacheable)
    g_device_facts[device].store(kKnown | (f->programmatic ? kPdl : 0u) | (uint32_t(f->sm_count) & kSmMask),
                                 std::memory_order_relaxed);
  return f;
}

#else

Result<DeviceFacts> device_facts() { return unsupported("this build of flashscope has no CUDA backend"); }

#endif

}  // namespace flashscope::cuda
