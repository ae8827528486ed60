// `flashscope-cli chat-template`: renders a conversation with the model's own
// chat template (tokenizer.chat_template) or a template file, and prints the
// prompt exactly (or, with --ids, its token ids), so anyone can compare it
// with Python's jinja2 as transformers runs it. --bench N times the render.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "chat_input_json.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "viz/throughput.hpp"
#include "flashscope/untrusted.hpp"
#include "flashscope/chat_template.hpp"
#include "flashscope/model.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli chat-template [-m MODEL] --messages FILE.json [--no-generation-prompt]\n"
    "                                    [--chat-template FILE] [--now DATE] [--ids] [--bench N]\n"
    "  -m MODEL               GGUF whose tokenizer.chat_template, bos/eos tokens and tokenizer are used\n"
    "                         (default: the default model; not needed with --chat-template and no --ids)\n"
    "  --messages FILE.json   a list of {\"role\", \"content\", ...} messages, or an object with \"messages\"\n"
    "                         and further variables (\"tools\", \"enable_thinking\", \"add_generation_prompt\", ...)\n"
    "  --no-generation-prompt render without the assistant's opening (add_generation_prompt=false)\n"
    "  --chat-template FILE   a Jinja template file instead of the model's\n"
    "  --now DATE             strftime_now's clock, \"YYYY-MM-DD[ HH:MM:SS]\" (default: local time now)\n"
    "  --ids                  print the prompt's token ids (special tokens parsed, no BOS added)\n"
    "  --bench N              render N times and print the median time per render and per message\n";

}  // namespace

int cmd_chat_template(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(), {"model", "messages", "chat-template", "bench", "now"},
            {"no-generation-prompt", "ids", "help"});
  const bool bad = !args.ok() || !args.positional().empty() || (!args.has("help") && !args.has("messages"));
  if (bad || args.has("help")) {
    const std::string why = !args.ok() ? args.error() : !args.positional().empty() ? "unexpected argument"
                            : bad                                                   ? "--messages is required"
                                                                                    : "";
    std::fprintf(bad ? stderr : stdout, "%s%s%s", why.c_str(), why.empty() ? "" : "\n", kUsage);
    return bad ? 2 : 0;
  }
  const long long bench_runs = args.get_int("bench", 0);
  if (!args.ok() || bench_runs < 0) {
    std::fprintf(stderr, "%s\n%s", args.ok() ? "--bench must be >= 0" : args.error().c_str(), kUsage);
    return 2;
  }

  auto input = read_chat_input(args.get("messages"));
  if (!input.ok()) {
    std::fprintf(stderr, "flashscope-cli chat-template: %s\n", input.status().to_string().c_str());
    return 1;
  }
  ChatTemplateInput& in = input.value();
  if (args.has("no-generation-prompt")) in.add_generation_prompt = false;
  if (args.has("now")) {
    std::tm tm{};
    const std::string now = args.get("now");
    const char* end = strptime(now.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
    if (!end) {
      tm = std::tm{};
      end = strptime(now.c_str(), "%Y-%m-%d", &tm);
    }
    if (!end || *end) {
      std::fprintf(stderr, "--now: expected YYYY-MM-DD or \"YYYY-MM-DD HH:MM:SS\", got '%s'\n%s", now.c_str(), kUsage);
      return 2;
    }
    const std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);  // fills in the weekday and the day of the year
    in.now = [tm] { return tm; };
  }

  // The model is needed for its template, its bos/eos text, or --ids.
  Model model;
  const bool need_model = !args.has("chat-template") || args.has("ids") || args.has("model");
  if (need_model) {
    const std::string path = resolve_model_path(args);
    if (path.empty()) {
      std::fprintf(stderr, "%s", missing_model_message("chat-template").c_str());
      return 1;
    }
    auto loaded = Model::load(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "flashscope-cli chat-template: %s: %s\n", path.c_str(),
                   loaded.status().to_string().c_str());
      return 1;
    }
    model = std::move(loaded).value();
    const Tokenizer& tok = model.tokenizer();
    if (in.bos_token.empty() && tok.bos_id() >= 0) in.bos_token = tok.token_text(tok.bos_id());
    if (in.eos_token.empty() && tok.eos_id() >= 0) in.eos_token = tok.token_text(tok.eos_id());
  }

  std::string source;
  if (args.has("chat-template")) {
    auto read = read_small_file(args.get("chat-template"));
    if (!read.ok()) {
      std::fprintf(stderr, "flashscope-cli chat-template: %s\n", read.status().to_string().c_str());
      return 1;
    }
    source = std::move(read).value();
  } else {
    source = model.chat_template();
    if (source.empty()) {
      std::fprintf(stderr, "flashscope-cli chat-template: the model has no tokenizer.chat_template; "
                           "give one with --chat-template FILE\n");
      return 1;
    }
  }
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "flashscope-cli chat-template: %s\n", tmpl.status().to_string().c_str());
    return 1;
  }
  auto prompt = tmpl->render(in);
  if (!prompt.ok()) {
    std::fprintf(stderr, "flashscope-cli chat-template: %s\n", prompt.status().to_string().c_str());
    return 1;
  }

  if (bench_runs > 0) {
    using Clock = std::chrono::steady_clock;
    for (int k = 0; k < 10; ++k) (void)tmpl->render(in);  // warm-up: caches, allocator
    std::vector<double> us;
    us.reserve(static_cast<size_t>(bench_runs));
    for (long long k = 0; k < bench_runs; ++k) {
      const auto t0 = Clock::now();
      auto r = tmpl->render(in);
      const auto t1 = Clock::now();
      if (!r.ok()) return 1;
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    const double median = viz::median(us);
    const double fastest = *std::min_element(us.begin(), us.end());
    const size_t turns = std::max<size_t>(1, in.messages.size());
    std::printf("chat-template render: median %.2f us over %lld runs (min %.2f us), %zu messages: %.2f us per "
                "message, %zu bytes out\n",
                median, bench_runs, fastest, in.messages.size(), median / static_cast<double>(turns),
                prompt.value().size());
    return 0;
  }
  if (args.has("ids")) {
    const std::vector<int32_t> ids = model.tokenizer().encode(prompt.value(), /*parse_special=*/true);
    for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
    std::printf("\n");
    return 0;
  }
  std::fwrite(prompt.value().data(), 1, prompt.value().size(), stdout);
  return 0;
}

}  // namespace flashscope::cli
