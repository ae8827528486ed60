// `flashscope-cli chat`: a terminal chat with the model, in the model's own
// chat template (ChatFormat). Each turn prefills only its new tokens: the
// session's KV cache keeps the conversation, so a long chat costs what its
// new messages cost. A model without a template (a base model) continues the
// text instead. Commands: /reset, /system TEXT, /stats, /help, /quit (or end
// of input).
#include <cstdio>
#include <iostream>
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
    "usage: flashscope-cli chat [-m PATH] [--system TEXT] [--chat-template FILE] [-n N] [--temp T] [--top-k K]\n"
    "                           [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--ctx N] [-t N]\n"
    "                           [--device cpu|cuda]\n"
    "  -n N                 tokens per reply at most (default 512)\n"
    "  --system TEXT        system prompt (default: the one in the model's chat template)\n"
    "  --chat-template FILE a Jinja chat template to use instead of the model's\n"
    "  other options as for `flashscope-cli generate`\n"
    "in the chat: /reset  /system TEXT  /stats  /help  /quit\n";

constexpr const char* kHelp = "commands: /reset (forget the conversation), /system TEXT (new system prompt, resets),\n"
                              "          /stats (context use), /quit (or Ctrl-D)\n";

}  // namespace

int cmd_chat(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "system", "chat-template", "n-predict", "temp", "top-k", "top-p", "min-p", "repeat-penalty", "seed", "ctx",
             "threads", "device"},
            {"help"});
  if (!args.ok() || args.has("help") || !args.positional().empty()) {
    const bool bad = !args.ok() || !args.positional().empty();
    std::fprintf(bad ? stderr : stdout, "%s%s%s", args.error().c_str(), args.error().empty() ? "" : "\n", kUsage);
    return bad ? 2 : 0;
  }
  GenerateParams gp;
  gp.max_tokens = static_cast<int>(args.get_int("n-predict", 512));
  gp.sampling = parse_sampling(args);
  SessionOptions so;
  so.max_tokens = static_cast<int>(args.get_int("ctx", 0));
  ModelOptions mo;
  mo.threads = static_cast<int>(args.get_int_in("threads", 0, 0, kMaxThreads));
  const std::string device = args.get("device", cuda_available() ? "cuda" : "cpu");
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n%s", args.error().c_str(), kUsage);
    return 2;
  }
  if (device == "cpu") {
    mo.device = Device::kCpu;
  } else if (device == "cuda") {
    mo.device = Device::kCuda;
  } else {
    std::fprintf(stderr, "flashscope-cli chat: --device must be cpu or cuda, not '%s'\n", device.c_str());
    return 2;
  }
  const std::string path = resolve_model_path(args);
  if (path.empty()) {
    std::fputs(missing_model_message("chat").c_str(), stderr);
    return 1;
  }
  auto model = Model::load(path, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "flashscope-cli chat: cannot load %s: %s\n", path.c_str(), model.status().to_string().c_str());
    return 1;
  }
  auto session = Session::create(*model, so);
  if (!session.ok()) {
    std::fprintf(stderr, "flashscope-cli chat: %s\n", session.status().to_string().c_str());
    return 1;
  }
  ChatFormat format;
  if (!chat_format_from_args(args, *model, "chat", &format)) return 1;
  const bool completion = format.kind() == ChatFormatKind::kCompletion;
  std::string system = args.get("system");
  std::vector<ChatMessage> messages;  // the conversation the session holds

  const ModelConfig& c = model->config();
  std::fprintf(stderr, "%s — %d layers, %.0f MB, context %d tokens, %s, %s. /help for commands.\n",
               c.name.empty() ? path.c_str() : c.name.c_str(), c.n_layers, model->weight_bytes() / 1e6,
               session->capacity(), device == "cuda" ? "CUDA" : "CPU",
               completion ? "plain text completion (each line continues the text)"
               : format.kind() == ChatFormatKind::kTemplate ? "the model's chat template"
                                                             : "built-in ChatML");
  std::string line;
  while (true) {
    std::fputs("\n> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/help") {
      std::fputs(kHelp, stdout);
      continue;
    }
    if (line == "/reset" || line.rfind("/system", 0) == 0) {
      if (line.rfind("/system", 0) == 0) system = line.size() > 8 ? line.substr(8) : "";
      session->reset();
      messages.clear();
      std::fputs(line == "/reset" ? "(conversation cleared)\n" : "(system prompt set; conversation cleared)\n",
                 stdout);
      continue;
    }
    if (line == "/stats") {
      std::printf("context: %d of %d tokens\n", session->n_tokens(), session->capacity());
      continue;
    }
    if (line[0] == '/') {
      std::printf("unknown command %s\n%s", line.c_str(), kHelp);
      continue;
    }
    std::vector<ChatMessage> next = messages;
    if (next.empty() && !system.empty() && !completion) next.push_back({"system", system});
    next.push_back({"user", line});
    auto turn = format.next_turn(session->tokens(), next);
    if (!turn.ok()) {
      std::fprintf(stderr, "\n[%s]\n", turn.status().message().c_str());
      continue;
    }
    std::string reply;
    auto stats = session->generate(turn->keep, turn->feed, gp, [&reply](const TokenEvent& e) {
      reply.append(e.text.data(), e.text.size());
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    if (!stats.ok()) {
      // The conversation is unchanged: the user can /reset or ask something shorter.
      std::fprintf(stderr, "\n[%s — /reset to start over]\n", stats.status().message().c_str());
      continue;
    }
    next.push_back({"assistant", reply});
    messages = std::move(next);
    std::fprintf(stderr, "\n[%d tokens, %.1f tokens/s, first token after %.0f ms; context %d of %d]\n",
                 stats->generated_tokens, stats->decode_tokens_per_s, stats->ttft_ms, session->n_tokens(),
                 session->capacity());
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace flashscope::cli
