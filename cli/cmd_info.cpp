// `flashscope-cli info`: what the GPU is and its speed of light, with the
// arithmetic, so a reader can check every SOL percentage the tools print.
#include <cstdio>

#include "args.hpp"
#include "commands.hpp"
#include "flashscope/device.hpp"

namespace flashscope::cli {

int cmd_info(int argc, char** argv) {
  Args args(argc, argv, {"device"}, {"json", "help"});
  if (!args.ok() || args.has("help")) {
    std::fprintf(args.ok() ? stdout : stderr, "%s%susage: flashscope-cli info [--device N] [--json]\n",
                 args.error().c_str(), args.ok() ? "" : "\n");
    return args.ok() ? 0 : 2;
  }
  const int n = cuda_device_count();
  if (n == 0) {
    if (args.has("json")) std::printf("{\"devices\":0,\"backend\":\"cpu\"}\n");
    else std::printf("no CUDA device (or no CUDA in this build): the CPU backend runs everything\n");
    return 0;
  }
  const int ordinal = static_cast<int>(args.get_int("device", 0));
  auto info = query_device(ordinal);
  if (!info.ok()) {
    std::fprintf(stderr, "flashscope-cli info: %s\n", info.status().to_string().c_str());
    return 1;
  }
  const DeviceInfo& d = info.value();
  if (args.has("json")) {
    std::printf(
        "{\"device\":\"%s\",\"ordinal\":%d,\"cc\":\"%d.%d\",\"sms\":%d,\"sm_clock_ghz\":%.3f,\"mem_clock_ghz\":%.3f,"
        "\"bus_bits\":%d,\"memory_gib\":%.1f,\"l2_mib\":%d,\"smem_per_sm_kib\":%d,\"tensor_flops_per_clk_per_sm\":%.0f,"
        "\"sol_tflops\":%.1f,\"sol_dram_gbps\":%.0f}\n",
        d.name.c_str(), d.ordinal, d.cc_major, d.cc_minor, d.sm_count, d.sm_clock_ghz, d.mem_clock_ghz,
        d.mem_bus_bits, d.global_mem_gib, d.l2_mib, d.smem_per_sm_kib, d.tensor_flops_per_clk_per_sm, d.sol_tflops,
        d.sol_dram_gbps);
    return 0;
  }
  std::printf("device %d of %d: %s\n", d.ordinal, n, d.name.c_str());
  std::printf("  architecture      sm_%d%d (compute capability %d.%d)\n", d.cc_major, d.cc_minor, d.cc_major,
              d.cc_minor);
  std::printf("  SMs               %d\n", d.sm_count);
  std::printf("  SM clock (max)    %.3f GHz\n", d.sm_clock_ghz);
  std::printf("  memory            %.1f GiB, %d-bit bus at %.3f GHz\n", d.global_mem_gib, d.mem_bus_bits,
              d.mem_clock_ghz);
  std::printf("  L2 / smem per SM  %d MiB / %d KiB (%d KiB per block opt-in)\n", d.l2_mib, d.smem_per_sm_kib,
              d.smem_per_block_optin_kib);
  std::printf("  SOL tensor        %.1f TFLOPS (BF16 dense, FP32 accumulate)\n", d.sol_tflops);
  std::printf("  SOL DRAM          %.0f GB/s\n", d.sol_dram_gbps);
  std::printf("  how               %s\n", d.sol_formula.c_str());
  return 0;
}

}  // namespace flashscope::cli
