// `flashscope-cli info`: what the GPU is and its speed of light, with the
// arithmetic, so a reader can check every SOL percentage the tools print.
#include <cmath>
#include <cstdio>
#include <string>

#include "args.hpp"
#include "commands.hpp"
#include "flashscope/device.hpp"
#include "json_line.hpp"

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
    if (args.has("json")) print_json_line({{"devices", 0}, {"backend", "cpu"}});
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
    print_json_line({{"device", d.name},
                     {"ordinal", d.ordinal},
                     {"cc", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                     {"sms", d.sm_count},
                     {"sm_clock_ghz", rounded(d.sm_clock_ghz, 3)},
                     {"mem_clock_ghz", rounded(d.mem_clock_ghz, 3)},
                     {"bus_bits", d.mem_bus_bits},
                     {"memory_gib", rounded(d.global_mem_gib, 1)},
                     {"l2_mib", d.l2_mib},
                     {"smem_per_sm_kib", d.smem_per_sm_kib},
                     {"tensor_flops_per_clk_per_sm", std::llround(d.tensor_flops_per_clk_per_sm)},
                     {"sol_tflops", rounded(d.sol_tflops, 1)},
                     {"sol_dram_gbps", std::llround(d.sol_dram_gbps)}});
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
