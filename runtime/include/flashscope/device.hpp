// What the GPU is and how fast it could possibly go (its speed of light).
//
// SOL is derived from the device's own properties, never a hard-coded name:
//   dense tensor TFLOPS = SMs × max SM clock × tensor FLOPs per clock per SM
//   DRAM GB/s           = memory clock × 2 (double data rate) × bus width / 8
// The per-SM FLOPs/clock come from a small table by architecture (BF16 inputs,
// FP32 accumulate, dense): it is the one number not read off the device.
#pragma once

#include <cstddef>
#include <string>

#include "flashscope/status.hpp"

namespace flashscope {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  double sm_clock_ghz = 0;       // peak (boost) SM clock
  double mem_clock_ghz = 0;      // peak memory clock
  int mem_bus_bits = 0;
  double global_mem_gib = 0;
  int smem_per_sm_kib = 0;
  int smem_per_block_optin_kib = 0;
  int l2_mib = 0;

  double tensor_flops_per_clk_per_sm = 0;  // BF16 dense, FP32 accumulate
  double sol_tflops = 0;
  double sol_dram_gbps = 0;
  std::string sol_formula;  // the arithmetic behind the two SOL numbers, for display
};

// True when the library was built with CUDA and a device is present. Never
// fails: "no" is an answer (no driver, no device, CPU-only build).
bool cuda_available();
int cuda_device_count();

// Properties and SOL of one device; kUnsupported in a CPU-only build.
Result<DeviceInfo> query_device(int ordinal = 0);

// The memory ceiling a kernel can actually reach on the current device: a
// device-to-device copy of `bytes` (cudaMemcpyAsync), counted as bytes read
// plus bytes written per second, median of `iters` copies after one warm-up.
// Decode kernels stream their K/V against this, not against the datasheet
// SOL above, which no copy reaches. kUnsupported in a CPU-only build.
Result<double> measure_copy_gbps(size_t bytes = size_t(1) << 30, int iters = 20);

// Tensor FLOPs per clock per SM for BF16 with FP32 accumulate, dense.
// GeForce parts of Ampere/Ada/Blackwell run FP32-accumulate MMA at half the
// rate of their data-centre siblings, hence the name.
double tensor_flops_per_clk_per_sm(int cc_major, int cc_minor, const std::string& name);

}  // namespace flashscope
