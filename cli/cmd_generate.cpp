// `flashscope-cli generate`: runs a GGUF model on a prompt and streams the
// completion to stdout; timing (prefill and decode tokens/s, time to first
// token) goes to stderr so stdout is only the model's text.
//
// Without -m the default model is found as engine_args.hpp describes.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/device.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/model.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli generate [-m PATH] -p TEXT [--chat] [--system TEXT] [--chat-template FILE] [-n N]\n"
    "                               [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
    "                               [--presence-penalty P] [--frequency-penalty F] [--dry-multiplier D] [--seed S]\n"
    "                               [--ctx N] [-t N]\n"
    "                               [--device cpu|cuda] [--weights auto|quantized|bf16] [--kv-type bf16|q8_0|q4_0]\n"
    "  -m, --model PATH      GGUF model (default: assets/models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
    "  -p, --prompt TEXT     the prompt; with --chat, the user's message\n"
    "  --chat                render the prompt with the model's chat template and answer it\n"
    "                        (built-in ChatML when the template cannot be used; plain text without one)\n"
    "  --system TEXT         system prompt for --chat (default: the one in the model's template)\n"
    "  --chat-template FILE  a Jinja chat template to use instead of the model's (implies --chat)\n"
    "  -n, --n-predict N     tokens to generate at most (default 256)\n"
    "  --temp T              temperature; 0 is greedy (default 0.7)\n"
    "  --top-k K             (default 40; 0 disables)   --top-p P   (default 0.95; 1 disables)\n"
    "                        where the model recommends values (`flashscope-cli info -m`), those are the defaults\n"
    "  --min-p P             (default 0.05; 0 disables) --repeat-penalty R (default 1.0: off)\n"
    "  --presence-penalty P  subtract P from the logit of every token the reply has used (-2..2; default 0)\n"
    "  --frequency-penalty F subtract F x its count so far (-2..2; default 0); both as OpenAI's API\n"
    "  --dry-multiplier D    DRY: a token that would repeat a run of 2+ earlier tokens loses D x 1.75^(run - 2)\n"
    "                        from its logit; ends degenerate loops (default 0.8; 0 disables)\n"
    "  --seed S              sampling seed (default: from the clock, printed with the stats)\n"
    "  --ctx N               KV cache size in tokens (default: the model's context length)\n"
    "  -t, --threads N       CPU threads (default: OMP_NUM_THREADS, else the physical cores, at most 32,\n"
    "                        fewer while other programs keep them busy; info shows them)\n"
    "  --device cpu|cuda     where to run (default: cuda when a device is present; cuda: CUDA graphs)\n"
    "  --weights auto|quantized|bf16  cuda: weights kept in their GGUF blocks or expanded to bf16; auto\n"
    "                            (default): bf16 for a small model, the blocks for a larger one\n"
    "  --kv-type bf16|q8_0|q4_0  cpu: KV cache elements in bf16 (default), q8_0 (int8 blocks of 32 with a\n"
    "                        scale: about half the bytes a long context's decode step reads) or q4_0\n"
    "                        (4-bit codes: a quarter, at some cost in agreement with bf16)\n";

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "prompt", "system", "chat-template", "n-predict", "temp", "top-k", "top-p", "min-p", "repeat-penalty",
             "presence-penalty", "frequency-penalty", "dry-multiplier", "seed", "ctx", "device", "threads", "weights",
             "kv-type"},
            {"chat", "help"});
  if (!args.ok() || args.has("help")) {
    const bool usage_error = !args.ok();
    std::fprintf(usage_error ? stderr : stdout, "%s%s%s", args.error().c_str(), args.error().empty() ? "" : "\n",
                 kUsage);
    return usage_error ? 2 : 0;
  }
  if (!args.has("prompt")) {
    std::fprintf(stderr, "flashscope-cli generate: -p TEXT (the prompt) is required\n%s", kUsage);
    return 2;
  }
  if (!args.positional().empty()) {
    std::fprintf(stderr, "flashscope-cli generate: unexpected argument '%s'\n%s", args.positional()[0].c_str(), kUsage);
    return 2;
  }

  GenerateParams gp;
  gp.max_tokens = parse_n_predict(args, 256);
  gp.sampling = parse_sampling(args);
  const int ctx = parse_ctx(args);
  const int threads = parse_threads(args, "generate");
  const std::string device = args.get("device", cuda_available() ? "cuda" : "cpu");
  const WeightFormat weights = parse_weights(args);
  const KvType kv_type = parse_kv_type_flag(args);
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n%s", args.error().c_str(), kUsage);
    return 2;
  }
  ModelOptions mo;
  mo.threads = threads;
  mo.weights = weights;
  mo.kv_type = kv_type;
  if (device == "cpu") {
    mo.device = Device::kCpu;
  } else if (device == "cuda") {
    mo.device = Device::kCuda;
  } else {
    std::fprintf(stderr, "flashscope-cli generate: --device must be cpu or cuda, not '%s'\n", device.c_str());
    return 2;
  }

  const std::string path = resolve_model_path(args);
  if (path.empty()) {
    std::fputs(missing_model_message("generate").c_str(), stderr);
    return 1;
  }
  auto model = Model::load(path, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "flashscope-cli generate: cannot load %s: %s\n", path.c_str(),
                 model.status().to_string().c_str());
    return 1;
  }
  apply_model_sampling(args, *model, &gp.sampling);
  if (!check_ctx_fits(ctx, *model, "generate")) return 2;
  const Tokenizer& tok = model->tokenizer();
  const std::string prompt = args.get("prompt");
  std::vector<int32_t> ids;
  if (args.has("chat") || args.has("chat-template")) {
    ChatFormat format;
    if (!chat_format_from_args(args, *model, "generate", &format)) return 1;
    for (std::string& s : format.stop_strings()) gp.stop_strings.push_back(std::move(s));  // a base model's transcript
    std::string system = args.get("system");
    std::vector<ChatMessage> messages;
    if (!system.empty()) messages.push_back({"system", system});
    messages.push_back({"user", prompt});
    auto encoded = format.encode(messages, /*add_generation_prompt=*/true);
    if (!encoded.ok()) {
      std::fprintf(stderr, "flashscope-cli generate: %s\n", encoded.status().to_string().c_str());
      return 1;
    }
    ids = std::move(encoded).value();
  } else {
    ids = tok.encode(prompt, /*parse_special=*/true);
    if (tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  }
  if (ids.empty()) {
    std::fprintf(stderr, "flashscope-cli generate: the prompt encodes to no tokens\n");
    return 2;
  }

  SessionOptions so;
  so.max_tokens = ctx;
  auto session = Session::create(*model, so);
  if (!session.ok()) {
    std::fprintf(stderr, "flashscope-cli generate: %s\n", session.status().to_string().c_str());
    return 1;
  }
  auto stats = session->generate(ids, gp, [](const TokenEvent& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!stats.ok()) {
    std::fprintf(stderr, "flashscope-cli generate: %s\n", stats.status().to_string().c_str());
    return 1;
  }
  const GenerateStats& s = stats.value();
  const ModelConfig& c = model->config();
  std::fprintf(stderr,
               "\n[%s, %d layers, %.1f MB of weights, device %s]\n"
               "prompt    %d tokens in %.1f ms (%.1f tokens/s)\n"
               "decode    %d tokens, %.1f tokens/s\n"
               "ttft      %.1f ms\n"
               "stop      %s; seed %llu; temp %.2f top-k %d top-p %.2f min-p %.2f repeat-penalty %.2f last-n %d "
               "presence %.2f frequency %.2f dry %.2f\n",
               c.name.empty() ? c.architecture.c_str() : c.name.c_str(), c.n_layers, model->weight_bytes() / 1e6,
               device.c_str(), s.prompt_tokens, s.prefill_ms, s.prefill_tokens_per_s, s.generated_tokens, s.decode_tokens_per_s,
               s.ttft_ms, stop_reason_name(s.stop_reason), static_cast<unsigned long long>(gp.sampling.seed),
               gp.sampling.temperature, gp.sampling.top_k, gp.sampling.top_p, gp.sampling.min_p,
               gp.sampling.repetition_penalty, gp.sampling.repeat_last_n, gp.sampling.presence_penalty,
               gp.sampling.frequency_penalty, gp.sampling.dry_multiplier);
  return 0;
}

}  // namespace flashscope::cli
