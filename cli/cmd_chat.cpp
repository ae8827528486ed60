// `flashscope-cli chat`: a terminal chat with the model, in the model's own
// chat template (ChatFormat). Each turn prefills only its new tokens: the
// session's KV cache keeps the conversation, so a long chat costs what its
// new messages cost. A model without a template (a base model) continues the
// text instead. Commands: /reset, /system TEXT, /stats, /help, /quit (or end
// of input).
//
// Like a shell: on a terminal, lines are read with libedit (editing, arrow
// keys, history) where it was built in, else with std::getline (pipes, tests).
// Ctrl-C while an answer streams stops it: the partial answer stays in the
// conversation as the assistant's turn, so the session's tokens and the
// message history agree and the next turn continues. Ctrl-C at the prompt
// prints a hint; a second one in a row exits, as does Ctrl-D.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#if FLASHSCOPE_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

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
    "                           [--presence-penalty P] [--frequency-penalty F] [--dry-multiplier D]\n"
    "                           [--device cpu|cuda]\n"
    "                           [--weights auto|quantized|bf16] [--kv-type bf16|q8_0|q4_0]\n"
    "  -n N                 tokens per reply at most (default 512)\n"
    "  --system TEXT        system prompt (default: the one in the model's chat template)\n"
    "  --chat-template FILE a Jinja chat template to use instead of the model's\n"
    "  other options as for `flashscope-cli generate`\n"
    "in the chat: /reset  /system TEXT  /stats  /help  /quit; Ctrl-C stops an answer, twice at the prompt quits\n";

constexpr const char* kHelp = "commands: /reset (forget the conversation), /system TEXT (new system prompt, resets),\n"
                              "          /stats (context use), /quit (or Ctrl-D, or Ctrl-C twice at the prompt);\n"
                              "          Ctrl-C during an answer stops it and keeps it in the conversation\n";

// Set by SIGINT; the handler does nothing else but ask the streaming
// session (if any) to stop, which is one more atomic store.
std::atomic<bool> g_interrupted{false};
std::atomic<Session*> g_streaming{nullptr};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<Session*>::is_always_lock_free,
              "the SIGINT handler may only touch lock-free atomics");

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  if (Session* s = g_streaming.load()) s->cancel();
}

// Installs on_sigint for the chat's lifetime and puts the previous handler
// back (the tests run the command in-process). No SA_RESTART: a read blocked
// at the prompt returns, so Ctrl-C there is seen at once.
class SigintGuard {
 public:
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
    g_interrupted.store(false);
  }
  ~SigintGuard() {
    g_streaming.store(nullptr);
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

enum class Input { kLine, kEnd, kInterrupted };

// One line of input, with the prompt. libedit on a terminal; std::getline
// otherwise.
Input read_line(bool edit, std::string* line) {
  g_interrupted.store(false);
#if FLASHSCOPE_HAVE_LIBEDIT
  if (edit) {
    char* text = readline("> ");
    if (text == nullptr) return g_interrupted.load() ? Input::kInterrupted : Input::kEnd;
    *line = text;
    std::free(text);
    if (g_interrupted.load()) return Input::kInterrupted;
    if (line->find_first_not_of(" \t\r\n") != std::string::npos) add_history(line->c_str());
    return Input::kLine;
  }
#else
  (void)edit;
#endif
  std::fputs("> ", stdout);
  std::fflush(stdout);
  if (std::getline(std::cin, *line)) return Input::kLine;
  if (!g_interrupted.load()) return Input::kEnd;
  std::cin.clear();
  return Input::kInterrupted;
}

// The text without leading and trailing whitespace.
std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n\v\f");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n\v\f") - b + 1);
}

// Tests raise SIGINT from the token callback at this token index, so a
// Ctrl-C during an answer is checked deterministically; -1 (unset): never.
int sigint_test_token() {
  const char* v = std::getenv("FLASHSCOPE_CHAT_TEST_SIGINT_AT");
  return v && *v ? std::atoi(v) : -1;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "system", "chat-template", "n-predict", "temp", "top-k", "top-p", "min-p", "repeat-penalty",
             "presence-penalty", "frequency-penalty", "dry-multiplier", "seed", "ctx", "threads", "device", "weights",
             "kv-type"},
            {"help"});
  if (!args.ok() || args.has("help") || !args.positional().empty()) {
    const bool bad = !args.ok() || !args.positional().empty();
    std::fprintf(bad ? stderr : stdout, "%s%s%s", args.error().c_str(), args.error().empty() ? "" : "\n", kUsage);
    return bad ? 2 : 0;
  }
  GenerateParams gp;
  gp.max_tokens = parse_n_predict(args, 512);
  gp.sampling = parse_sampling(args);
  SessionOptions so;
  so.max_tokens = parse_ctx(args);
  ModelOptions mo;
  mo.threads = parse_threads(args, "chat");
  mo.weights = parse_weights(args);
  mo.kv_type = parse_kv_type_flag(args);
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
  apply_model_sampling(args, *model, &gp.sampling);
  if (!check_ctx_fits(so.max_tokens, *model, "chat")) return 2;
  auto session = Session::create(*model, so);
  if (!session.ok()) {
    std::fprintf(stderr, "flashscope-cli chat: %s\n", session.status().to_string().c_str());
    return 1;
  }
  ChatFormat format;
  if (!chat_format_from_args(args, *model, "chat", &format)) return 1;
  const bool completion = format.kind() == ChatFormatKind::kCompletion;
  for (std::string& s : format.stop_strings()) gp.stop_strings.push_back(std::move(s));  // a base model's transcript
  std::string system = args.get("system");
  std::vector<ChatMessage> messages;  // the conversation the session holds

  const ModelConfig& c = model->config();
  std::fprintf(stderr, "%s — %d layers, %.0f MB, context %d tokens, %s, %s. /help for commands.\n",
               c.name.empty() ? path.c_str() : c.name.c_str(), c.n_layers, model->weight_bytes() / 1e6,
               session->capacity(), device == "cuda" ? "CUDA" : "CPU",
               completion ? "plain text completion (each line continues the text)"
               : format.kind() == ChatFormatKind::kTemplate   ? "the model's chat template"
               : format.kind() == ChatFormatKind::kTranscript ? "a question-and-answer transcript (a base model)"
                                                              : "built-in ChatML");
  const bool edit = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
  const int sigint_at = sigint_test_token();
  SigintGuard sigint_guard;
  // The meter: what the session holds, never more than its capacity. A reply
  // stopped by a full cache leaves its last sampled token pending with no
  // slot to run in; it is dropped so the conversation is what the cache holds.
  auto fit_context = [&session] {
    if (session->n_tokens() > session->capacity()) (void)session->truncate(session->capacity());
  };
  bool interrupted_at_prompt = false;
  std::string raw;
  while (true) {
    std::fputc('\n', stdout);
    const Input got = read_line(edit, &raw);
    if (got == Input::kEnd) break;
    if (got == Input::kInterrupted) {
      if (interrupted_at_prompt) break;
      interrupted_at_prompt = true;
      std::fputs("\n(Ctrl-C again or Ctrl-D to quit; /help for commands)\n", stdout);
      continue;
    }
    interrupted_at_prompt = false;
    const std::string line = trimmed(raw);
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
    g_interrupted.store(false);
    g_streaming.store(&*session);
    auto stats = session->generate(turn->keep, turn->feed, gp, [&reply, sigint_at](const TokenEvent& e) {
      reply.append(e.text.data(), e.text.size());
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
      if (e.index == sigint_at) std::raise(SIGINT);
      return !g_interrupted.load();
    });
    g_streaming.store(nullptr);
    const bool stopped = g_interrupted.exchange(false);
    if (!stats.ok()) {
      // The conversation is unchanged: the user can /reset or ask something shorter.
      std::fprintf(stderr, "\n[%s — /reset to start over]\n", stats.status().message().c_str());
      continue;
    }
    fit_context();
    next.push_back({"assistant", reply});
    messages = std::move(next);
    std::fprintf(stderr, "\n[%s%d tokens, %.1f tokens/s, first token after %.0f ms; context %d of %d]\n",
                 stopped ? "stopped (kept in the conversation); " : "", stats->generated_tokens,
                 stats->decode_tokens_per_s, stats->ttft_ms, session->n_tokens(), session->capacity());
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace flashscope::cli
