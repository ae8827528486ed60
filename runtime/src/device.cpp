// Device properties and speed of light (see flashscope/device.hpp).
#include "flashscope/device.hpp"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/numeric.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashscope {

double tensor_flops_per_clk_per_sm(int cc_major, int cc_minor, const std::string& name) {
  // Dense BF16 FLOPs per SM per clock with FP32 accumulate (an FMA is 2 FLOPs),
  // from NVIDIA's architecture whitepapers:
  //   A100 (8.0) 1024 FMA;  H100/H200 (9.0) 2048 FMA;  B200 (10.x) 4096 FMA;
  //   Ampere/Ada/Blackwell workstation parts 512 FMA, their GeForce siblings
  //   256 (FP32-accumulate runs at half rate on GeForce).
  const bool geforce = name.find("GeForce") != std::string::npos;
  const int cc = cc_major * 10 + cc_minor;
  if (cc == 80) return 2048;
  if (cc >= 90 && cc < 100) return 4096;
  if (cc >= 100 && cc < 110) return 8192;
  if (cc >= 86) return geforce ? 512 : 1024;  // 8.6, 8.7, 8.9, 11.x, 12.x
  if (cc >= 70) return geforce ? 256 : 512;   // Volta/Turing: not targeted, shown for completeness
  return 0;
}

#if FLASHSCOPE_WITH_CUDA

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver"/"no device" error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

Result<DeviceInfo> query_device(int ordinal) {
  const int count = cuda_device_count();
  if (count == 0) return Status(StatusCode::kUnsupported, "no CUDA device is present (or no driver)");
  if (ordinal < 0 || ordinal >= count)
    return invalid_argument("device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) +
                            " present)");
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) return device_error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err));
  int clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, ordinal);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, ordinal);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, ordinal);

  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.sm_clock_ghz = clock_khz * 1e-6;
  d.mem_clock_ghz = mem_clock_khz * 1e-6;
  d.mem_bus_bits = bus_bits;
  d.global_mem_gib = double(prop.totalGlobalMem) / double(1ull << 30);
  d.smem_per_sm_kib = int(prop.sharedMemPerMultiprocessor / 1024);
  d.smem_per_block_optin_kib = int(prop.sharedMemPerBlockOptin / 1024);
  d.l2_mib = int(prop.l2CacheSize / (1024 * 1024));
  d.tensor_flops_per_clk_per_sm = tensor_flops_per_clk_per_sm(d.cc_major, d.cc_minor, d.name);
  d.sol_tflops = d.sm_count * d.sm_clock_ghz * d.tensor_flops_per_clk_per_sm * 1e-3;
  d.sol_dram_gbps = d.mem_clock_ghz * 2.0 * d.mem_bus_bits / 8.0;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "tensor: %d SMs x %.3f GHz x %.0f FLOP/clk/SM (BF16 dense, FP32 acc) = %.1f TFLOPS; "
                "DRAM: %.3f GHz x 2 (DDR) x %d bit / 8 = %.0f GB/s",
                d.sm_count, d.sm_clock_ghz, d.tensor_flops_per_clk_per_sm, d.sol_tflops, d.mem_clock_ghz,
                d.mem_bus_bits, d.sol_dram_gbps);
  d.sol_formula = buf;
  return d;
}

Result<double> measure_copy_gbps(size_t bytes, int iters) {
  if (bytes < 2 || iters < 1) return invalid_argument("measure_copy_gbps: bytes >= 2 and iters >= 1");
  if (!cuda_available()) return Status(StatusCode::kUnsupported, "no CUDA device is present (or no driver)");
  const size_t half = bytes / 2;
  void* buf = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto fail = [&](const char* what, cudaError_t e) -> Status {
    cudaGetLastError();
    return device_error(std::string(what) + ": " + cudaGetErrorString(e));
  };
  std::vector<double> gbps;
  Status status;
  cudaError_t e = cudaMalloc(&buf, 2 * half);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kOutOfMemory, "measure_copy_gbps: cannot allocate " + std::to_string(2 * half) + " bytes");
  }
  char* src = static_cast<char*>(buf);
  if ((e = cudaEventCreate(&start)) != cudaSuccess || (e = cudaEventCreate(&stop)) != cudaSuccess) {
    status = fail("cudaEventCreate", e);
  } else if ((e = cudaMemset(buf, 1, 2 * half)) != cudaSuccess) {
    status = fail("cudaMemset", e);
  } else {
    for (int i = 0; i <= iters && status.ok(); ++i) {
      float ms = 0;
      if ((e = cudaEventRecord(start)) != cudaSuccess || (e = cudaMemcpyAsync(src + half, src, half, cudaMemcpyDeviceToDevice)) != cudaSuccess ||
          (e = cudaEventRecord(stop)) != cudaSuccess || (e = cudaEventSynchronize(stop)) != cudaSuccess ||
          (e = cudaEventElapsedTime(&ms, start, stop)) != cudaSuccess) {
        status = fail("copy", e);
      } else if (i > 0 && ms > 0) {
        gbps.push_back(2.0 * double(half) / (double(ms) * 1e-3) / 1e9);
      }
    }
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(buf);
  if (!status.ok()) return status;
  if (gbps.empty()) return device_error("measure_copy_gbps: no copy was timed");
  return median(std::move(gbps));
}

#else

Result<double> measure_copy_gbps(size_t, int) {
  return Status(StatusCode::kUnsupported, "this build of flashscope has no CUDA backend");
}

int cuda_device_count() { return 0; }
bool cuda_available() { return false; }
Result<DeviceInfo> query_device(int) {
  return Status(StatusCode::kUnsupported, "this build of flashscope has no CUDA backend");
}

#endif

}  // namespace flashscope
