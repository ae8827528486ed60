#include "engine_args.hpp"

#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "flashscope/device.hpp"
#include "flashscope/untrusted.hpp"
#include "flashscope/cpu_threads.hpp"
#include "flashscope/model.hpp"
#include "flashscope/sampling_defaults.hpp"

namespace flashscope::cli {

std::string resolve_model_path(const Args& args) {
  const std::string given = args.get("model");
  return given.empty() ? find_default_model() : given;
}

std::string missing_model_message(const char* command) {
  return std::string("flashscope-cli ") + command + ": the default model " + kDefaultModelFile +
         " was not found in assets/models/ (looked in $FLASHSCOPE_MODEL_DIR, the current directory and above the "
         "executable).\nRun scripts/fetch_model.sh to download it, or pass -m PATH.\n";
}

std::optional<Model> load_model_or_print(const Args& args, const ModelOptions& options, const char* command,
                                         std::string* path) {
  *path = resolve_model_path(args);
  if (path->empty()) {
    std::fputs(missing_model_message(command).c_str(), stderr);
    return std::nullopt;
  }
  auto model = Model::load(*path, options);
  if (!model.ok()) {
    std::fprintf(stderr, "flashscope-cli %s: cannot load %s: %s\n", command, path->c_str(),
                 model.status().to_string().c_str());
    return std::nullopt;
  }
  return std::move(model).value();
}

std::string device_display_name(Device device) {
  if (device != Device::kCuda) return "cpu";
  auto info = query_device(0);
  return info.ok() ? info->name : "cuda";
}

bool chat_format_from_args(const Args& args, const Model& model, const char* command, ChatFormat* out) {
  std::string text;
  const std::string file = args.get("chat-template");
  if (!file.empty()) {
    auto read = read_small_file(file);
    if (!read.ok() || read->empty()) {
      std::fprintf(stderr, "flashscope-cli %s: cannot read the chat template: %s\n", command,
                   read.ok() ? (file + " is empty").c_str() : read.status().message().c_str());
      return false;
    }
    text = std::move(read).value();
  }
  *out = ChatFormat::for_model(model, text);
  if (!out->notice().empty()) std::fprintf(stderr, "flashscope-cli %s: note: %s\n", command, out->notice().c_str());
  return true;
}

SamplingParams parse_sampling(Args& args) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // The library's defaults (engine_sampling_defaults), so the CLI answers as
  // the server, the app and the C ABI do for the same request.
  const SamplingParams d = engine_sampling_defaults();
  SamplingParams s = d;
  s.temperature = static_cast<float>(args.get_double_in("temp", d.temperature, 0.0, false, kInf, false));
  s.top_k = static_cast<int>(args.get_int_in("top-k", d.top_k, 0, std::numeric_limits<int>::max()));
  s.top_p = static_cast<float>(args.get_double_in("top-p", d.top_p, 0.0, true, 1.0, false));
  s.min_p = static_cast<float>(args.get_double_in("min-p", d.min_p, 0.0, false, 1.0, false));
  s.repetition_penalty =
      static_cast<float>(args.get_double_in("repeat-penalty", d.repetition_penalty, 0.0, true, kInf, false));
  s.presence_penalty =
      static_cast<float>(args.get_double_in("presence-penalty", d.presence_penalty, -2.0, false, 2.0, false));
  s.frequency_penalty =
      static_cast<float>(args.get_double_in("frequency-penalty", d.frequency_penalty, -2.0, false, 2.0, false));
  s.dry_multiplier = static_cast<float>(args.get_double_in("dry-multiplier", d.dry_multiplier, 0.0, false, 100.0, false));
  const long long clock_seed =
      static_cast<long long>(std::chrono::system_clock::now().time_since_epoch().count() & 0x7fffffff);
  s.seed = static_cast<uint64_t>(args.get_int_in("seed", clock_seed, 0, std::numeric_limits<long long>::max()));
  return s;
}

std::string apply_model_sampling(const Args& args, const Model& model, SamplingParams* s) {
  const SamplingDefaults& d = model.sampling_defaults();
  const SamplingParams base = default_sampling(d);
  bool took = false;
  for (const std::string& f : d.fields) {
    auto take = [&](const char* field, const char* flag, auto member) {
      if (f != field || (flag != nullptr && args.has(flag))) return;
      s->*member = base.*member;
      took = true;
    };
    take("temperature", "temp", &SamplingParams::temperature);
    take("top_k", "top-k", &SamplingParams::top_k);
    take("top_p", "top-p", &SamplingParams::top_p);
    take("min_p", "min-p", &SamplingParams::min_p);
    take("repetition_penalty", "repeat-penalty", &SamplingParams::repetition_penalty);
    take("repeat_last_n", nullptr, &SamplingParams::repeat_last_n);
  }
  return took ? d.source : "";
}

int parse_n_predict(Args& args, int fallback) {
  return static_cast<int>(args.get_int_in("n-predict", fallback, 1, std::numeric_limits<int>::max()));
}

int parse_threads(Args& args, const char* command) {
  const long long threads = args.get_int_in("threads", 0, 0, kMaxThreads);
  const CpuThreads& cpus = cpu_threads();
  if (args.ok() && threads > cpus.allowed) {
    std::fprintf(stderr,
                 "flashscope-cli %s: note: --threads %lld is more than the %d CPUs this process may run on "
                 "(slower, not faster; the default is %d)\n",
                 command, threads, cpus.allowed, cpus.default_threads);
  }
  return static_cast<int>(threads);
}

int parse_ctx(Args& args) { return static_cast<int>(args.get_int_in("ctx", 0, 0, std::numeric_limits<int>::max())); }

WeightFormat parse_weights(Args& args) {
  WeightFormat w = WeightFormat::kAuto;
  const std::string text = args.get("weights", "auto");
  if (!parse_weight_format(text, &w)) args.fail("--weights must be auto, quantized or bf16, not '" + text + "'");
  return w;
}

KvType parse_kv_type_flag(Args& args) {
  KvType t = KvType::kBF16;
  const std::string text = args.get("kv-type", "bf16");
  if (!parse_kv_type(text, &t)) args.fail("--kv-type must be bf16, q8_0 or q4_0, not '" + text + "'");
  return t;
}

bool check_ctx_fits(int ctx, const Model& model, const char* command) {
  const int limit = model.config().context_length;
  if (ctx > 0 && limit > 0 && ctx > limit) {
    std::fprintf(stderr, "flashscope-cli %s: --ctx must be at most the model's context length (%d), got %d\n", command,
                 limit, ctx);
    return false;
  }
  return true;
}

std::vector<std::string> expand_short_flags(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-m") a = "--model";
    else if (a == "-p") a = "--prompt";
    else if (a == "-n") a = "--n-predict";
    else if (a == "-t") a = "--threads";
    else if (a == "-h") a = "--help";
    out.push_back(a);
  }
  return out;
}

}  // namespace flashscope::cli
