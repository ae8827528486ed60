// `flashscope-cli bench capture`: what the model's own attention capture
// (flashscope/attention_capture.hpp) costs a chat's decode, measured in one
// process so the variants share the device, its clocks and the load:
//
//   never      a session never armed: the forward as if capture did not exist
//   disarmed   a session armed (every layer) and disarmed before each turn:
//              capture off, the engine's capture code present and once used
//   armed      a session armed at every layer through the turn (what the app
//              does): every step keeps each layer's query rows
//
// Each round runs one turn of each variant (the same prompt, greedy, no stop
// token, each session reset first), their order rotated from round to round
// so drift (clocks, heat, other processes) falls on each alike. Decode
// tokens/s is GenerateStats::decode_tokens_per_s (the one-token forward
// passes after the first token: Session::generate as the app and `chat` run
// it). Reported: each variant's median over the rounds, and the median over
// rounds of the paired ratios disarmed / never and armed / never; "capture
// off costs" is 1 − disarmed / never. One warm-up round (kernels, cuBLAS
// choices, graphs) is not counted.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/attention_capture.hpp"
#include "flashscope/device.hpp"
#include "flashscope/model.hpp"
#include "flashscope/session.hpp"
#include "json_line.hpp"
#include "viz/throughput.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli bench capture [-m PATH] [--device cpu|cuda] [--prompt-len N] [--gen-len N] [--runs N]\n"
    "                                    [-t N] [--weights auto|quantized|bf16] [--json]\n"
    "  decode tokens/s of a session never armed for attention capture, one armed and disarmed before\n"
    "  each turn, and one armed at every layer, interleaved in one process; medians and paired ratios\n"
    "  -m, --model PATH   GGUF model (default: assets/models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
    "  --device cpu|cuda  where to run (default: cuda when a device is present)\n"
    "  --prompt-len N     prompt tokens per turn (default 128)\n"
    "  --gen-len N        tokens generated per turn (default 256)\n"
    "  --runs N           rounds, after one warm-up round (default 9)\n"
    "  -t, --threads N    CPU threads (default: the physical cores not busy elsewhere)\n"
    "  --weights auto|quantized|bf16  cuda: how the device keeps the weights (default auto)\n"
    "  --json             one JSON object\n";

constexpr int kVariants = 3;
constexpr const char* kNames[kVariants] = {"never", "disarmed", "armed"};

using viz::median;

// One turn of variant v on session s; its decode tokens/s.
Result<double> turn(Session& s, int v, const std::vector<int32_t>& prompt, const GenerateParams& gp) {
  s.reset();
  if (v == 1) {
    FLASHSCOPE_RETURN_IF_ERROR(arm_attention_capture(s, -1));
    disarm_attention_capture(s);
  }
  if (v == 2) FLASHSCOPE_RETURN_IF_ERROR(arm_attention_capture(s, -1));
  auto st = s.generate(prompt, gp, {});
  if (v == 2) disarm_attention_capture(s);  // the kept rows go; the next round arms again
  if (!st.ok()) return st.status();
  return st->decode_tokens_per_s;
}

}  // namespace

int cmd_bench_capture(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "device", "prompt-len", "gen-len", "runs", "threads", "weights"}, {"json", "help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  const int prompt_len = static_cast<int>(args.get_int("prompt-len", 128));
  const int gen_len = static_cast<int>(args.get_int("gen-len", 256));
  const int runs = static_cast<int>(args.get_int("runs", 9));
  const int threads = parse_threads(args, "bench capture");
  const std::string device = args.get("device", cuda_available() ? "cuda" : "cpu");
  const WeightFormat weights = parse_weights(args);
  if (!args.ok() || !args.positional().empty() || prompt_len < 1 || gen_len < 2 || runs < 1 || threads < 0 ||
      (device != "cpu" && device != "cuda")) {
    std::fprintf(stderr, "flashscope-cli bench capture: %s\n%s", args.ok() ? "bad option value" : args.error().c_str(),
                 kUsage);
    return 2;
  }
  ModelOptions mo;
  mo.device = device == "cuda" ? Device::kCuda : Device::kCpu;
  mo.threads = threads;
  mo.weights = weights;
  std::string path;
  auto model = load_model_or_print(args, mo, "bench capture", &path);
  if (!model) return 1;
  const ModelConfig& c = model->config();
  const std::string name = c.name.empty() ? path : c.name;
  const std::string device_name = device_display_name(mo.device);
  std::vector<Session> sessions;
  for (int v = 0; v < kVariants; ++v) {
    auto s = Session::create(*model, SessionOptions{prompt_len + gen_len + 1});
    if (!s.ok()) {
      std::fprintf(stderr, "flashscope-cli bench capture: session: %s\n", s.status().to_string().c_str());
      return 1;
    }
    sessions.push_back(std::move(s).value());
  }
  // Ids past the special tokens, fixed: every variant decodes the same tokens.
  std::mt19937_64 rng(2023);
  std::uniform_int_distribution<int32_t> id(3, c.vocab - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int32_t& t : prompt) t = id(rng);
  GenerateParams gp;
  gp.max_tokens = gen_len;
  gp.sampling.temperature = 0.0f;
  gp.stop_tokens = {-1};  // never sampled: every turn generates gen_len tokens

  const bool json = args.has("json");
  if (!json)
    std::printf("capture A/B  %s (%d layers) on %s; prompt %d tokens, %d generated, greedy;\n"
                "             %d rounds after a warm-up, variants interleaved (order rotated each round)\n",
                name.c_str(), c.n_layers, device_name.c_str(), prompt_len, gen_len, runs);
  std::vector<double> tps[kVariants], ratio_disarmed, ratio_armed;
  for (int r = 0; r <= runs; ++r) {
    double round[kVariants] = {};
    for (int i = 0; i < kVariants; ++i) {
      const int v = (i + r) % kVariants;
      auto t = turn(sessions[static_cast<size_t>(v)], v, prompt, gp);
      if (!t.ok()) {
        std::fprintf(stderr, "flashscope-cli bench capture: %s: %s\n", kNames[v], t.status().to_string().c_str());
        return 1;
      }
      round[v] = t.value();
    }
    if (r == 0) continue;  // warm-up
    for (int v = 0; v < kVariants; ++v) tps[v].push_back(round[v]);
    ratio_disarmed.push_back(round[1] / round[0]);
    ratio_armed.push_back(round[2] / round[0]);
    if (!json)
      std::printf("  round %2d  never %9.1f  disarmed %9.1f  armed %9.1f   disarmed/never %.4f\n", r, round[0],
                  round[1], round[2], round[1] / round[0]);
  }
  const double off = median(ratio_disarmed), armed = median(ratio_armed);
  const auto [lo, hi] = std::minmax_element(ratio_disarmed.begin(), ratio_disarmed.end());
  if (json) {
    print_json_line({{"kind", "capture_ab"},
                     {"model", name},
                     {"device", device_name},
                     {"prompt_len", prompt_len},
                     {"gen_len", gen_len},
                     {"runs", runs},
                     {"never_decode_tokens_per_s", rounded(median(tps[0]), 1)},
                     {"disarmed_decode_tokens_per_s", rounded(median(tps[1]), 1)},
                     {"armed_decode_tokens_per_s", rounded(median(tps[2]), 1)},
                     {"disarmed_over_never", rounded(off, 4)},
                     {"disarmed_over_never_min", rounded(*lo, 4)},
                     {"disarmed_over_never_max", rounded(*hi, 4)},
                     {"armed_over_never", rounded(armed, 4)}});
  } else {
    std::printf("  median    never %9.1f  disarmed %9.1f  armed %9.1f   tokens/s\n", median(tps[0]), median(tps[1]),
                median(tps[2]));
    std::printf("  paired ratios (median of rounds): disarmed/never %.4f (rounds %.4f..%.4f), armed/never %.4f\n", off,
                *lo, *hi, armed);
    std::printf("  capture off costs %+.2f%% of decode tokens/s; armed at every layer %+.2f%%\n", 100.0 * (1.0 - off),
                100.0 * (1.0 - armed));
  }
  return 0;
}

}  // namespace flashscope::cli
