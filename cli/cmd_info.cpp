// `flashscope-cli info`: what the GPU is and its speed of light, with the
// arithmetic, so a reader can check every SOL percentage the tools print;
// with -m, the sampling the model's makers recommend, and where that came from.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/device.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/sampling_defaults.hpp"
#include "json_line.hpp"

namespace flashscope::cli {
namespace {

// The model's recommended sampling; false (error printed) when the file cannot be read.
bool print_model_sampling(const std::string& path, bool json) {
  auto file = GgufFile::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "flashscope-cli info: %s: %s\n", path.c_str(), file.status().to_string().c_str());
    return false;
  }
  const SamplingDefaults d = sampling_defaults(file.value());
  const SamplingParams& p = d.params;
  auto has = [&](const char* f) { return std::find(d.fields.begin(), d.fields.end(), f) != d.fields.end(); };
  if (json) {
    JsonLine line = {{"model", path}, {"sampling_source", d.source.empty() ? "none" : d.source}};
    if (has("temperature")) line["temperature"] = rounded(p.temperature, 4);
    if (has("top_k")) line["top_k"] = p.top_k;
    if (has("top_p")) line["top_p"] = rounded(p.top_p, 4);
    if (has("min_p")) line["min_p"] = rounded(p.min_p, 4);
    if (has("repetition_penalty")) line["repeat_penalty"] = rounded(p.repetition_penalty, 4);
    if (has("repeat_last_n")) line["repeat_last_n"] = p.repeat_last_n;
    if (!d.ignored.empty()) line["ignored_keys"] = d.ignored;
    print_json_line(line);
    return true;
  }
  std::printf("model %s\n", path.c_str());
  if (d.source.empty()) {
    std::printf("  sampling          no recommendation (no general.sampling.* keys, no known model card)\n");
  } else {
    std::string s;
    auto add = [&](const std::string& item) { s += (s.empty() ? "" : ", ") + item; };
    char buf[64];
    if (has("temperature")) add((std::snprintf(buf, sizeof buf, "temperature %g", p.temperature), buf));
    if (has("top_k")) add("top-k " + std::to_string(p.top_k));
    if (has("top_p")) add((std::snprintf(buf, sizeof buf, "top-p %g", p.top_p), buf));
    if (has("min_p")) add((std::snprintf(buf, sizeof buf, "min-p %g", p.min_p), buf));
    if (has("repetition_penalty")) add((std::snprintf(buf, sizeof buf, "repeat-penalty %g", p.repetition_penalty), buf));
    if (has("repeat_last_n")) add("repeat-last-n " + std::to_string(p.repeat_last_n));
    std::printf("  sampling          %s (from the %s)\n", s.c_str(), d.source.c_str());
  }
  for (const std::string& k : d.ignored) std::printf("  ignored           %s: not a usable value\n", k.c_str());
  return true;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);  // -m
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(), {"device", "model"}, {"json", "help"});
  if (!args.ok() || args.has("help")) {
    std::fprintf(args.ok() ? stdout : stderr, "%s%susage: flashscope-cli info [-m PATH] [--device N] [--json]\n",
                 args.error().c_str(), args.ok() ? "" : "\n");
    return args.ok() ? 0 : 2;
  }
  if (args.has("model") && !print_model_sampling(args.get("model"), args.has("json"))) return 1;
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
