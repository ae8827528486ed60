// `flashscope-cli info`: what the GPU is and its speed of light, with the
// arithmetic, so a reader can check every SOL percentage the tools print;
// with -m MODEL, the memory the model takes: its weights on the device (as
// --weights keeps them) and its KV cache per token and at full context, and
// the sampling the model's makers recommend, and where that came from. The
// CPU block says how many threads the CPU engine takes by default, and why.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/cpu_kernels.hpp"
#include "flashscope/cpu_threads.hpp"
#include "flashscope/device.hpp"
#include "flashscope/model.hpp"
#include "json_line.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli info [--device N] [-m MODEL [--weights auto|quantized|bf16] [--kv-type bf16|q8_0|q4_0]] [--json]\n"
    "  -m, --model PATH  also load MODEL (on the GPU when there is one) and show its memory:\n"
    "                    weights on the device and the KV cache\n"
    "Also the CPU: its cores as this process sees them, the engine's default thread count and the\n"
    "instruction sets its kernels run (picked at run time).\n";

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// /proc/cpuinfo's first "model name" ("" elsewhere).
std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    const size_t start = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

// The head_dim the kernel line names: the default model's (SmolLM2, 64).
constexpr int kKernelsHeadDim = 64;

// The CPU this process may run on, the engine's default thread count and
// the instruction sets its kernels picked.
void print_cpu(bool json) {
  const CpuThreads& t = cpu_threads();
  const CpuKernels k = cpu_kernels(kKernelsHeadDim);
  const std::string name = cpu_name();
  const char* from = t.from_environment ? "OMP_NUM_THREADS" : "physical cores";
  if (json) {
    print_json_line({{"cpu", name.empty() ? "CPU" : name},
                     {"cpus_online", t.online},
                     {"cpus_allowed", t.allowed},
                     {"physical_cores", t.physical_cores},
                     {"cpu_quota", t.quota_cpus},
                     {"default_threads", t.default_threads},
                     {"default_threads_from", from},
                     {"openmp_wait", t.wait == OpenMpWait::kSleep ? "sleep" : "spin"},
                     {"kernel_matmul", k.matmul},
                     {"kernel_decode_attention", k.decode_attention},
                     {"kernel_decode_attention_q8", k.decode_attention_q8}});
    return;
  }
  std::printf("cpu: %s\n", name.empty() ? "CPU" : name.c_str());
  std::printf("  CPUs              %d online, %d this process may run on, %d physical core%s", t.online, t.allowed,
              t.physical_cores, t.physical_cores == 1 ? "" : "s");
  if (t.quota_cpus > 0) std::printf(", a cgroup quota of %d", t.quota_cpus);
  std::printf("\n");
  const bool sleep = t.wait == OpenMpWait::kSleep;
  // With spinning threads the engine's team shrinks under load; with sleeping ones it keeps its size
  // (forward_cpu.cpp's auto_threads).
  if (t.from_environment) {
    std::printf("  engine threads    %d (OMP_NUM_THREADS)\n", t.default_threads);
  } else {
    std::printf("  engine threads    %d (the physical cores%s, at most %d; -t N or OMP_NUM_THREADS to choose)\n",
                t.default_threads, t.quota_cpus > 0 ? " within the quota" : "", kDefaultThreadsCap);
  }
  if (!sleep) std::printf("                    fewer while other programs keep cores busy\n");
  if (sleep) {
    std::printf("  at barriers       threads sleep (OMP_WAIT_POLICY=passive; the engine keeps its whole team)\n");
  } else {
    std::printf("  at barriers       threads spin, then sleep (libgomp's default; OMP_WAIT_POLICY=passive: sleep)\n");
  }
  std::printf("  kernels           matmuls %s; decode attention %s (bf16 cache), %s (q8_0 and q4_0 caches) at head_dim %d\n",
              k.matmul, k.decode_attention, k.decode_attention_q8, kKernelsHeadDim);
}

// The model's recommended sampling (read at load), under print_model's lines.
void print_model_sampling(const Model& model, const std::string& path, bool json) {
  const SamplingDefaults& d = model.sampling_defaults();
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
    return;
  }
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
}

// The model's memory, then its sampling; 0 when printed, 1 when it does not load.
int print_model(const std::string& path, WeightFormat weights, KvType kv_type, bool json) {
  ModelOptions mo;
  // q8_0 and q4_0 are the CPU engine's caches: show them where they run.
  mo.device = cuda_available() && kv_type == KvType::kBF16 ? Device::kCuda : Device::kCpu;
  mo.kv_type = kv_type;
  mo.weights = weights;
  auto model = Model::load(path, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "flashscope-cli info: cannot load %s: %s\n", path.c_str(), model.status().to_string().c_str());
    return 1;
  }
  const ModelConfig& c = model->config();
  // K and V, every layer (the CUDA pool's pages and the CPU cache alike).
  const uint64_t kv_per_token = kv_bytes_per_token(c, kv_type);
  const uint64_t kv_full = kv_per_token * static_cast<uint64_t>(c.context_length);
  const bool on_gpu = mo.device == Device::kCuda;
  const uint64_t device_weights = model->device_weight_bytes();
  if (json) {
    print_json_line({{"model", c.name.empty() ? path : c.name},
                     {"file_weight_bytes", static_cast<long long>(model->weight_bytes())},
                     {"device", on_gpu ? "cuda" : "cpu"},
                     {"weights", on_gpu ? weight_format_name(model->weight_format()) : "file blocks"},
                     {"device_weight_bytes", static_cast<long long>(device_weights)},
                     {"kv_type", kv_type_name(kv_type)},
                     {"kv_bytes_per_token", static_cast<long long>(kv_per_token)},
                     {"context_length", c.context_length},
                     {"kv_bytes_full_context", static_cast<long long>(kv_full)}});
    print_model_sampling(*model, path, json);
    return 0;
  }
  if (c.name.empty()) std::printf("model %s\n", path.c_str());
  else std::printf("model %s (%s)\n", path.c_str(), c.name.c_str());
  std::printf("  weights (file)    %.1f MiB\n", mib(model->weight_bytes()));
  if (on_gpu) {
    std::printf("  weights (device)  %.1f MiB, %s%s (%.2f× the file's)\n", mib(device_weights),
                weight_format_name(model->weight_format()), weights == WeightFormat::kAuto ? " (auto)" : "",
                model->weight_bytes() ? static_cast<double>(device_weights) / static_cast<double>(model->weight_bytes())
                                      : 0.0);
  } else {
    std::printf("  weights (device)  none: the CPU reads them mapped from the file\n");
  }
  std::printf("  KV cache          %.1f KiB a token (%s K and V, %d layers × %d heads × %d); %.1f MiB at the\n"
              "                    full context of %d tokens, %s\n",
              static_cast<double>(kv_per_token) / 1024.0, kv_type_name(kv_type), c.n_layers, c.n_kv_heads, c.head_dim, mib(kv_full),
              c.context_length, on_gpu ? "in the device's page pool as sequences take it" : "in host memory");
  print_model_sampling(*model, path, json);
  return 0;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(), {"device", "model", "weights", "kv-type"}, {"json", "help"});
  const WeightFormat weights = parse_weights(args);
  const KvType kv_type = parse_kv_type_flag(args);
  if (!args.ok() || args.has("help")) {
    std::fprintf(args.ok() ? stdout : stderr, "%s%s%s", args.error().c_str(), args.ok() ? "" : "\n", kUsage);
    return args.ok() ? 0 : 2;
  }
  const bool json = args.has("json");
  const std::string model_path = args.get("model");
  const int n = cuda_device_count();
  if (n == 0) {
    if (args.has("json")) print_json_line({{"devices", 0}, {"backend", "cpu"}});
    else std::printf("no CUDA device (or no CUDA in this build): the CPU backend runs everything\n");
    print_cpu(json);
    return model_path.empty() ? 0 : print_model(model_path, weights, kv_type, json);
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
    print_cpu(json);
    return model_path.empty() ? 0 : print_model(model_path, weights, kv_type, json);
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
  print_cpu(json);
  return model_path.empty() ? 0 : print_model(model_path, weights, kv_type, json);
}

}  // namespace flashscope::cli
