// device_facts(): a lock-free table per device ordinal (see the header).
#include "device_facts.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/attention/paged_launch.h"
#include "kernels/model/model_ops.h"
#if FLASHSCOPE_WITH_HOPPER
#include "kernels/hopper/hopper_launch.h"
#endif
#endif

namespace flashscope::cuda {

#if FLASHSCOPE_WITH_CUDA

namespace {

// 0 = not read yet, else kKnown | flags | L2 bytes << 16 | SM count. Two
// threads that miss together both read the same values; the stores agree.
constexpr int kCachedDevices = 64;
constexpr uint64_t kKnown = 1ull << 63, kPdl = 1ull << 62, kHopper = 1ull << 61;
constexpr uint64_t kSmMask = 0xffff, kL2Shift = 16, kL2Mask = 0xffffffffull;
std::atomic<uint64_t> g_device_facts[kCachedDevices];

uint64_t pack(const DeviceFacts& f) {
  return kKnown | (f.programmatic ? kPdl : 0) | (f.hopper ? kHopper : 0) |
         ((uint64_t(uint32_t(f.l2_bytes)) & kL2Mask) << kL2Shift) | (uint64_t(f.sm_count) & kSmMask);
}
DeviceFacts unpack(uint64_t v, int device) {
  DeviceFacts f;
  f.ordinal = device;
  f.sm_count = int(v & kSmMask);
  f.l2_bytes = int((v >> kL2Shift) & kL2Mask);
  f.programmatic = (v & kPdl) != 0;
  f.hopper = (v & kHopper) != 0;
  return f;
}

Result<DeviceFacts> read_device_facts(int device) {
  DeviceFacts f;
  f.ordinal = device;
  int cc_major = 0;
  if (cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return device_error("cannot read the SM count and compute capability of device " + std::to_string(device));
  }
  if (cudaDeviceGetAttribute(&f.l2_bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess || f.l2_bytes <= 0) {
    cudaGetLastError();
    f.l2_bytes = 50 << 20;  // where the runtime cannot say: an H100's
  }
#if FLASHSCOPE_WITH_HOPPER
  f.hopper = kernels::hopper_kernels_runnable();
#endif
  // Programmatic launches exist from sm_90 on; elsewhere the attribute is not
  // set at all. Every kernel launched programmatically must wait: the split-KV
  // combine and the decode step's GEMMs are asked (the decode step's other
  // kernels, kernels/model/, are built for the GEMM's targets; a kernel with
  // no code for this device says so at its launch, with the launch's own error).
  bool combine_waits = false, gemm_waits = false;
  if (cc_major >= 9 && (kernels::paged_combine_waits_on_producer(&combine_waits) != cudaSuccess ||
                        kernels::skinny_gemm_waits_on_producer(&gemm_waits) != cudaSuccess)) {
    cudaGetLastError();
    combine_waits = gemm_waits = false;
  }
  f.programmatic = cc_major >= 9 && combine_waits && gemm_waits;
  return f;
}

// -1: not read from the environment yet; else 0 or 1.
std::atomic<int> g_programmatic_allowed{-1};

}  // namespace

bool programmatic_allowed() {
  int v = g_programmatic_allowed.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("FLASHSCOPE_CUDA_PDL");
    v = env != nullptr && std::strcmp(env, "0") == 0 ? 0 : 1;
    int expected = -1;  // allow_programmatic() may have set it meanwhile: that wins
    if (!g_programmatic_allowed.compare_exchange_strong(expected, v, std::memory_order_relaxed)) v = expected;
  }
  return v != 0;
}

void allow_programmatic(bool on) { g_programmatic_allowed.store(on ? 1 : 0, std::memory_order_relaxed); }

Result<DeviceFacts> device_facts() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return device_error("cannot read the current CUDA device");
  }
  const bool cacheable = device >= 0 && device < kCachedDevices;
  Result<DeviceFacts> f = [&]() -> Result<DeviceFacts> {
    if (cacheable) {
      const uint64_t v = g_device_facts[device].load(std::memory_order_relaxed);
      if (v & kKnown) return unpack(v, device);
    }
    auto read = read_device_facts(device);
    if (read.ok() && cacheable) g_device_facts[device].store(pack(read.value()), std::memory_order_relaxed);
    return read;
  }();
  if (f.ok() && !programmatic_allowed()) f.value().programmatic = false;
  return f;
}

#else

Result<DeviceFacts> device_facts() { return unsupported("this build of flashscope has no CUDA backend"); }
bool programmatic_allowed() { return false; }
void allow_programmatic(bool) {}

#endif

}  // namespace flashscope::cuda
