// `flashscope-cli bench e2e`: the engine end to end on a model — prompt
// tokens/s, time to first token and decode tokens/s — at batch 1 and at
// batch N (N sessions decoded together by BatchGenerator: one batched
// forward pass per step).
//
// One run at batch N: N sessions, each with its own random prompt of
// prompt-len tokens (ids drawn from the vocabulary past the special tokens,
// a fixed seed per session), greedy, no stop token, gen-len tokens each.
//   step 1       prefills every prompt (one forward pass each, one after the
//                other), samples each first token, runs the first decode step
//   steps 2..    one batched decode step each
// Reported (median over --runs runs, after one warm-up run that loads
// kernels, cuBLAS choices and CUDA graphs):
//   prefill ms / prompt tokens/s   one prompt's forward pass (median over the sessions)
//   ttft ms                        from the start of the run to a session's first token: the
//                                  median and the last session's (it waits for every prefill)
//   decode tokens/s                tokens of steps 2.. over their time, all sessions together;
//                                  per sequence it is that / N (steps/s)
// --prompt-len 512: a long first prompt, the prefill case people wait on.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/device.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/model.hpp"
#include "json_line.hpp"
#include "viz/throughput.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli bench e2e [-m PATH] [--device cpu|cuda] [--batch 1,8,64] [--prompt-len N] [--gen-len N]\n"
    "                                [--runs N] [-t N] [--weights auto|quantized|bf16]\n"
    "                                [--kv-type bf16|q8_0|q4_0] [--json]\n"
    "  -m, --model PATH   GGUF model (default: assets/models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
    "  --device cpu|cuda  where to run (default: cuda when a device is present)\n"
    "  --batch LIST       batch sizes, comma-separated (default 1,8,64)\n"
    "  --prompt-len N     prompt tokens per session (default 512)\n"
    "  --gen-len N        tokens generated per session (default 128)\n"
    "  --runs N           timed runs per batch size, after one warm-up (default 3; medians reported)\n"
    "  -t, --threads N    CPU threads (default: the physical cores not busy elsewhere; info shows them)\n"
    "  --weights auto|quantized|bf16  cuda: weights kept in their GGUF blocks or expanded to bf16; auto\n"
    "                            (default): bf16 for a small model, the blocks for a larger one\n"
    "  --json             one JSON object per batch size\n";

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using viz::median;

bool parse_batches(const std::string& text, std::vector<int>* out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 4096) return false;
    out->push_back(static_cast<int>(v));
  }
  return !out->empty();
}

struct RunResult {
  double prefill_ms = 0;      // median over the sessions
  double ttft_ms = 0;         // median over the sessions
  double ttft_max_ms = 0;     // the last session's
  double decode_tokens_per_s = 0;
  double decode_steps_per_s = 0;
  double decode_cpu_ms_per_token = 0;  // process CPU time (every thread) of the decode steps, per token
  double total_ms = 0;
};

// One run of `batch` sessions; the sessions are reset first.
Result<RunResult> run_once(std::vector<Session>& sessions, int batch, int prompt_len, int gen_len, int vocab) {
  GenerateParams gp;
  gp.max_tokens = gen_len;
  gp.stop_tokens = {-1};  // never sampled: every session generates gen_len tokens
  long long tokens = 0;
  BatchGenerator gen;
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < batch; ++i) {
    Session& s = sessions[static_cast<size_t>(i)];
    s.reset();
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(i));
    std::uniform_int_distribution<int32_t> id(3, vocab - 1);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int32_t& t : prompt) t = id(rng);
    auto added = gen.add(s, prompt, gp, [&tokens](const TokenEvent& e) {
      tokens += e.token >= 0;
      return true;
    });
    if (!added.ok()) return added.status();
  }
  FLASHSCOPE_RETURN_IF_ERROR(gen.step());  // every prefill, every first token, the first decode step
  const Clock::time_point t1 = Clock::now();
  const std::clock_t cpu1 = std::clock();
  const long long tokens_at_t1 = tokens;
  int steps = 0;
  while (!gen.done()) {
    FLASHSCOPE_RETURN_IF_ERROR(gen.step());
    ++steps;
  }
  const Clock::time_point t2 = Clock::now();
  const std::clock_t cpu2 = std::clock();

  RunResult r;
  std::vector<double> prefill, ttft;
  for (int i = 0; i < batch; ++i) {
    auto st = gen.result(i);
    if (!st.ok()) return st.status();
    prefill.push_back(st->prefill_ms);
    ttft.push_back(st->ttft_ms);
    r.ttft_max_ms = std::max(r.ttft_max_ms, st->ttft_ms);
  }
  r.prefill_ms = median(prefill);
  r.ttft_ms = median(ttft);
  const double decode_ms = ms_between(t1, t2);
  if (steps > 0 && decode_ms > 0) {
    r.decode_tokens_per_s = 1000.0 * static_cast<double>(tokens - tokens_at_t1) / decode_ms;
    r.decode_steps_per_s = 1000.0 * steps / decode_ms;
    if (tokens > tokens_at_t1 && cpu1 != static_cast<std::clock_t>(-1))
      r.decode_cpu_ms_per_token = 1000.0 * static_cast<double>(cpu2 - cpu1) / CLOCKS_PER_SEC /
                                  static_cast<double>(tokens - tokens_at_t1);
  }
  r.total_ms = ms_between(t0, t2);
  return r;
}

}  // namespace

int cmd_bench_e2e(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "device", "batch", "prompt-len", "gen-len", "runs", "threads", "weights", "kv-type"}, {"json", "help"});
  if (args.has("help")) {
    std::printf("%s%s", kUsage, kKvTypeUsage);
    return 0;
  }
  const int prompt_len = static_cast<int>(args.get_int("prompt-len", 512));
  const int gen_len = static_cast<int>(args.get_int("gen-len", 128));
  const int runs = static_cast<int>(args.get_int("runs", 3));
  const int threads = parse_threads(args, "bench e2e");
  const std::string device = args.get("device", cuda_available() ? "cuda" : "cpu");
  const WeightFormat weights = parse_weights(args);
  const KvType kv_type = parse_kv_type_flag(args);
  std::vector<int> batches;
  if (!args.ok() || !args.positional().empty() || !parse_batches(args.get("batch", "1,8,64"), &batches) ||
      prompt_len < 1 || gen_len < 1 || runs < 1 || threads < 0 || (device != "cpu" && device != "cuda")) {
    std::fprintf(stderr, "flashscope-cli bench e2e: %s\n%s", args.ok() ? "bad option value" : args.error().c_str(),
                 kUsage);
    return 2;
  }
  ModelOptions mo;
  mo.device = device == "cuda" ? Device::kCuda : Device::kCpu;
  mo.threads = threads;
  mo.weights = weights;
  mo.kv_type = kv_type;
  std::string path;
  auto model = load_model_or_print(args, mo, "bench e2e", &path);
  if (!model) return 1;
  const ModelConfig& c = model->config();
  const std::string name = c.name.empty() ? path : c.name;
  const std::string device_name = device_display_name(mo.device);
  std::string weights_name = "file blocks";
  if (mo.device == Device::kCuda) {
    weights_name = std::string(weight_format_name(model->weight_format())) + ", " +
                   std::to_string(static_cast<long long>(model->device_weight_bytes() / 1000000)) + " MB on the device";
  }
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  std::vector<Session> sessions;
  for (int i = 0; i < max_batch; ++i) {
    auto s = Session::create(*model, SessionOptions{prompt_len + gen_len + 1});
    if (!s.ok()) {
      std::fprintf(stderr, "flashscope-cli bench e2e: session %d: %s\n", i, s.status().to_string().c_str());
      return 1;
    }
    sessions.push_back(std::move(s).value());
  }
  const bool json = args.has("json");
  if (!json) {
    std::printf("e2e  %s (%d layers, %.1f MB of weights; %s) on %s; prompt %d tokens, %d generated per session,\n"
                "     greedy; median of %d runs after a warm-up; KV cache %s\n",
                name.c_str(), c.n_layers, model->weight_bytes() / 1e6, weights_name.c_str(), device_name.c_str(),
                prompt_len, gen_len, runs, kv_type_name(kv_type));
    std::printf("  %6s %11s %12s %10s %13s %14s %13s\n", "batch", "prefill ms", "prompt tok/s", "ttft ms",
                "ttft last ms", "decode tok/s", "per seq tok/s");
  }
  for (int batch : batches) {
    std::vector<double> prefill, ttft, ttft_max, decode, steps, total, cpu;
    for (int r = 0; r <= runs; ++r) {
      auto res = run_once(sessions, batch, prompt_len, gen_len, c.vocab);
      if (!res.ok()) {
        std::fprintf(stderr, "flashscope-cli bench e2e: batch %d: %s\n", batch, res.status().to_string().c_str());
        return 1;
      }
      if (r == 0) continue;  // warm-up
      prefill.push_back(res->prefill_ms);
      ttft.push_back(res->ttft_ms);
      ttft_max.push_back(res->ttft_max_ms);
      decode.push_back(res->decode_tokens_per_s);
      steps.push_back(res->decode_steps_per_s);
      cpu.push_back(res->decode_cpu_ms_per_token);
      total.push_back(res->total_ms);
    }
    const double prefill_ms = median(prefill);
    const double prompt_tps = prefill_ms > 0 ? 1000.0 * prompt_len / prefill_ms : 0.0;
    if (json) {
      print_json_line({{"kind", "e2e"},
                       {"model", name},
                       {"device", device_name},
                       {"weights",
                        mo.device == Device::kCuda ? weight_format_name(model->weight_format()) : "file blocks"},
                       {"device_weight_bytes", static_cast<long long>(model->device_weight_bytes())},
                       {"kv_type", kv_type_name(kv_type)},
                       {"batch", batch},
                       {"prompt_len", prompt_len},
                       {"gen_len", gen_len},
                       {"runs", runs},
                       {"prefill_ms", rounded(prefill_ms, 3)},
                       {"prompt_tokens_per_s", rounded(prompt_tps, 1)},
                       {"ttft_ms", rounded(median(ttft), 3)},
                       {"ttft_last_ms", rounded(median(ttft_max), 3)},
                       {"decode_tokens_per_s", rounded(median(decode), 1)},
                       {"decode_tokens_per_s_per_seq", rounded(median(steps), 1)},
                       {"decode_cpu_ms_per_token", rounded(median(cpu), 3)},
                       {"run_ms", rounded(median(total), 1)}});
    } else {
      std::printf("  %6d %11.2f %12.0f %10.2f %13.2f %14.1f %13.1f\n", batch, prefill_ms, prompt_tps, median(ttft),
                  median(ttft_max), median(decode), median(steps));
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace flashscope::cli
