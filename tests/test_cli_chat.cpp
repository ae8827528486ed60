// `flashscope-cli chat` and `generate` as a user meets them (issue #22): every
// numeric flag is range-checked with a message naming it, `generate` without
// -p says -p is required, whitespace-only lines are not sent, the context
// meter never reads more than its maximum, and a Ctrl-C during an answer
// stops it while the next turn still works. The commands run in-process on a
// synthetic model, with stdin, stdout and stderr redirected to files.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "flashscope/cpu_threads.hpp"
#include "flashscope/trace.hpp"
#include "support/synthetic_llama.hpp"
#include "support/temp_path.hpp"

#if FLASHSCOPE_TEST_CLI
#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"

namespace {

std::string temp_path(const std::string& name) { return flashscope::testing::temp_path("cli_chat", name); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct CliRun {
  int rc = -1;
  std::string out, err;
};

// Runs a command with `input` as its stdin and its stdout and stderr sent to
// files (what a pipe gives it: not a terminal, so no line editing).
CliRun run_cli(int (*cmd)(int, char**), std::vector<std::string> args, const std::string& input = "") {
  const std::string in_path = temp_path("stdin.txt"), out_path = temp_path("stdout.txt"),
                    err_path = temp_path("stderr.txt");
  {
    std::ofstream f(in_path, std::ios::trunc);
    f << input;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved[3] = {::dup(STDIN_FILENO), ::dup(STDOUT_FILENO), ::dup(STDERR_FILENO)};
  const int fds[3] = {::open(in_path.c_str(), O_RDONLY), ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
                      ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600)};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(saved[i] >= 0);
    REQUIRE(fds[i] >= 0);
    ::dup2(fds[i], i);
    ::close(fds[i]);
  }
  std::clearerr(stdin);
  std::cin.clear();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  CliRun r;
  r.rc = cmd(static_cast<int>(argv.size()), argv.data());
  std::fflush(stdout);
  std::fflush(stderr);
  for (int i = 0; i < 3; ++i) {
    ::dup2(saved[i], i);
    ::close(saved[i]);
  }
  std::clearerr(stdin);
  std::cin.clear();
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return r;
}

// A synthetic ChatML model on disk (context 512), removed at the end.
struct ModelFile {
  std::string path = temp_path("model.gguf");
  ModelFile() {
    const auto bytes = flashscope::testing::SyntheticLlama().build();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(f.good());
  }
  ~ModelFile() { std::remove(path.c_str()); }
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;
};

// Every "context X of Y" the chat printed, as (X, Y).
std::vector<std::pair<int, int>> meters(const std::string& text) {
  std::vector<std::pair<int, int>> m;
  const std::regex re("context:? (\\d+) of (\\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    m.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  }
  return m;
}

}  // namespace

using flashscope::cli::cmd_chat;
using flashscope::cli::cmd_generate;

TEST_CASE("cli: each numeric flag out of range is refused with a message naming the flag") {
  ModelFile model;
  struct Bad {
    std::vector<std::string> flag;
    const char* named;
  };
  const std::vector<Bad> bad = {
      {{"--top-p", "7"}, "--top-p"},          {{"--top-p", "0"}, "--top-p"},
      {{"--top-p", "nan"}, "--top-p"},        {{"--temp", "-0.5"}, "--temp"},
      {{"--temp", "inf"}, "--temp"},          {{"--top-k", "-1"}, "--top-k"},
      {{"--top-k", "4294967297"}, "--top-k"}, {{"--min-p", "1.5"}, "--min-p"},
      {{"--min-p", "-0.1"}, "--min-p"},       {{"--repeat-penalty", "0"}, "--repeat-penalty"},
      {{"--seed", "-1"}, "--seed"},           {{"-n", "0"}, "--n-predict"},
      {{"-n", "-5"}, "--n-predict"},          {{"--ctx", "-1"}, "--ctx"},
      {{"--ctx", "99999999"}, "--ctx"},       {{"-t", "1025"}, "--threads"},
      {{"--top-p", "x"}, "--top-p"},
      {{"--presence-penalty", "2.5"}, "--presence-penalty"},
      {{"--presence-penalty", "nan"}, "--presence-penalty"},
      {{"--frequency-penalty", "-3"}, "--frequency-penalty"},
  };
  for (auto cmd : {cmd_generate, cmd_chat}) {
    for (const Bad& b : bad) {
      CAPTURE(b.flag[0]);
      CAPTURE(b.flag[1]);
      std::vector<std::string> args = {"-m", model.path, "--device", "cpu", "-t", "1"};
      if (cmd == cmd_generate) args.insert(args.end(), {"-p", "hi"});
      args.insert(args.end(), b.flag.begin(), b.flag.end());
      const CliRun r = run_cli(cmd, args, "hi\n");
      CHECK(r.rc == 2);
      CHECK(contains(r.err, b.named));
      CHECK(r.out.empty());  // nothing generated
    }
  }
  // The edges are accepted.
  const CliRun edge = run_cli(cmd_generate, {"-m", model.path, "--device", "cpu", "-t", "1", "-p", "hi", "-n", "1",
                                             "--top-p", "1", "--min-p", "0", "--temp", "0", "--top-k", "0",
                                             "--ctx", "512", "--seed", "0", "--presence-penalty", "-2",
                                             "--frequency-penalty", "2"});
  CHECK_MESSAGE(edge.rc == 0, edge.err);
}

TEST_CASE("cli: info -m names the model's recommended sampling, or says there is none") {
  ModelFile model;  // a synthetic model: no general.sampling.* keys, no known card
  const CliRun r = run_cli(flashscope::cli::cmd_info, {"-m", model.path});
  CHECK_MESSAGE(r.rc == 0, r.err);
  CHECK(contains(r.out, "model " + model.path));
  CHECK(contains(r.out, "sampling          no recommendation"));
  const CliRun missing = run_cli(flashscope::cli::cmd_info, {"-m", model.path + ".absent"});
  CHECK(missing.rc == 1);
  CHECK(contains(missing.err, model.path + ".absent"));
}

TEST_CASE("cli: the model's recommended sampling fills in the flags the user did not give") {
  flashscope::testing::SyntheticLlama spec;
  spec.extra = [](flashscope::testing::GgufBuilder& b) {
    b.add_f32("general.sampling.temp", 0.3f)
        .add_f32("general.sampling.top_p", 0.8f)
        .add_i32("general.sampling.penalty_last_n", 32);
  };
  auto file = flashscope::GgufFile::from_buffer(spec.build());
  REQUIRE(file.ok());
  auto model = flashscope::Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  std::vector<std::string> argv_s = {"--temp", "0.9", "--top-k", "5"};
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  flashscope::cli::Args args(static_cast<int>(argv.size()), argv.data(), {"temp", "top-k", "top-p"}, {});
  REQUIRE(args.ok());
  flashscope::SamplingParams s = flashscope::cli::parse_sampling(args);
  CHECK(flashscope::cli::apply_model_sampling(args, *model, &s) == "gguf metadata");
  CHECK(s.temperature == doctest::Approx(0.9));  // given: the user's
  CHECK(s.top_k == 5);
  CHECK(s.top_p == doctest::Approx(0.8));        // not given: the model's
  CHECK(s.repeat_last_n == 32);
  // A model that recommends nothing changes nothing.
  auto plain = flashscope::Model::from_gguf(flashscope::GgufFile::from_buffer(
                                                flashscope::testing::SyntheticLlama().build()).value());
  REQUIRE(plain.ok());
  flashscope::SamplingParams t = s;
  CHECK(flashscope::cli::apply_model_sampling(args, *plain, &t).empty());
  CHECK(t.top_p == s.top_p);
  CHECK(t.repeat_last_n == s.repeat_last_n);
}

TEST_CASE("cli: more threads than the machine has is allowed, with a note naming --threads") {
  ModelFile model;
  // Nothing is generated (empty input), so no thread is started.
  const CliRun r = run_cli(cmd_chat, {"-m", model.path, "--device", "cpu", "-t", "1000"}, "");
  CHECK(r.rc == 0);
  if (flashscope::cpu_threads().allowed < 1000) {
    CHECK(contains(r.err, "--threads 1000 is more than the " + std::to_string(flashscope::cpu_threads().allowed) +
                              " CPUs this process may run on"));
  }
}

TEST_CASE("cli: generate without -p says that -p is required") {
  ModelFile model;
  const CliRun r = run_cli(cmd_generate, {"-m", model.path, "--device", "cpu"});
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "-p TEXT (the prompt) is required"));
  CHECK(contains(r.err, "usage:"));
  const CliRun help = run_cli(cmd_generate, {"--help"});
  CHECK(help.rc == 0);
  CHECK(contains(help.out, "usage:"));
}

TEST_CASE("cli: chat ignores whitespace-only lines") {
  ModelFile model;
  const CliRun r = run_cli(cmd_chat, {"-m", model.path, "--device", "cpu", "-t", "1", "--temp", "0"},
                           "   \n\t\n \t \r\n\n/stats\n");
  CHECK_MESSAGE(r.rc == 0, r.err);
  CHECK(contains(r.out, "context: 0 of 512 tokens"));  // nothing was sent to the model
  CHECK_FALSE(contains(r.err, "tokens/s"));             // and no turn ran
}

TEST_CASE("cli: the chat's context meter never exceeds its maximum, even when a reply fills the cache") {
  ModelFile model;
  // --ctx 80 with long replies: the first turn (64 prompt tokens) fills the
  // cache (the reply stops on it, its last sampled token with no slot left),
  // the next does not fit. The meter once read "context 81 of 80" there.
  const CliRun r = run_cli(cmd_chat,
                           {"-m", model.path, "--device", "cpu", "-t", "1", "--ctx", "80", "-n", "1000", "--temp", "2",
                            "--repeat-penalty", "3", "--seed", "7", "--top-k", "0", "--top-p", "1", "--min-p", "0"},
                           "hello\nand again\n/stats\n");
  CHECK_MESSAGE(r.rc == 0, r.err);
  const auto m = meters(r.out + r.err);
  REQUIRE(m.size() >= 2);  // the first turn's meter and /stats
  bool full = false;
  for (const auto& [used, max] : m) {
    CAPTURE(used);
    CHECK(max == 80);
    CHECK(used <= max);
    full = full || used == max;
  }
  CHECK_MESSAGE(full, (r.out + r.err));  // the case the test is about happened
}

TEST_CASE("cli: Ctrl-C during an answer stops it, keeps it in the conversation, and the next turn works") {
  ModelFile model;
  // The chat raises SIGINT from its token callback at token 0 of each answer
  // (the handler the command installs catches it, as a Ctrl-C).
  struct sigaction before {};
  REQUIRE(::sigaction(SIGINT, nullptr, &before) == 0);
  REQUIRE(::setenv("FLASHSCOPE_CHAT_TEST_SIGINT_AT", "0", 1) == 0);
  const CliRun r = run_cli(cmd_chat,
                           {"-m", model.path, "--device", "cpu", "-t", "1", "-n", "50", "--temp", "2", "--seed", "3",
                            "--top-k", "0", "--top-p", "1", "--min-p", "0", "--repeat-penalty", "3"},
                           "hello\nhow are you\n/stats\n");
  ::unsetenv("FLASHSCOPE_CHAT_TEST_SIGINT_AT");
  CHECK_MESSAGE(r.rc == 0, r.err);
  // Both turns were stopped after their first token, and neither failed.
  size_t stops = 0;
  for (size_t at = r.err.find("stopped (kept in the conversation); 1 tokens"); at != std::string::npos;
       at = r.err.find("stopped (kept in the conversation); 1 tokens", at + 1)) {
    ++stops;
  }
  CHECK_MESSAGE(stops == 2, r.err);
  CHECK_FALSE(contains(r.err, "/reset to start over"));
  // The process's SIGINT handler is the test runner's again.
  struct sigaction after {};
  REQUIRE(::sigaction(SIGINT, nullptr, &after) == 0);
  const bool restored = after.sa_handler == before.sa_handler;
  CHECK(restored);
  const auto turns = meters(r.err), stats = meters(r.out);
  REQUIRE(turns.size() == 2);
  REQUIRE(stats.size() == 1);
  CHECK(turns[1].first > turns[0].first);   // the second turn built on the first
  CHECK(stats[0].first == turns[1].first);  // /stats agrees with the meter
}

TEST_CASE("cli: a model without a chat template chats in a question-and-answer transcript, and says so") {
  // A base model (Gemma-3-270M is one): the same synthetic file without tokenizer.chat_template.
  flashscope::testing::SyntheticLlama base;
  base.skip_keys.insert("tokenizer.chat_template");
  const std::string path = temp_path("base.gguf");
  {
    const auto bytes = base.build();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(f.good());
  }
  const CliRun r = run_cli(cmd_chat, {"-m", path, "--device", "cpu", "-t", "1", "--temp", "0", "-n", "4"},
                           "Once upon a time\n/stats\n");
  std::remove(path.c_str());
  CHECK_MESSAGE(r.rc == 0, r.err);
  CHECK(contains(r.err, "note: the model has no chat template: a question-and-answer transcript"));
  CHECK(contains(r.err, "a question-and-answer transcript (a base model)"));
  // The line as a question (byte tokens: "Question: " and "\nAnswer:" around it) and an answer ran.
  const auto m = meters(r.out + r.err);
  REQUIRE_FALSE(m.empty());
  const int framed = static_cast<int>(std::string("Question: Once upon a time\nAnswer:").size());
  CHECK(m.back().first > framed);
  CHECK(m.back().first <= framed + 1 + 4);
}

TEST_CASE("cli: trace chat writes the model's own attention, labelled, and prints every head's summary") {
  const ModelFile model;
  const std::string out = temp_path("chat.fstrace");
  const CliRun r = run_cli(flashscope::cli::cmd_trace, {"chat", "-m", model.path, "-p", "hello there", "--layer", "1",
                                                        "--head", "3", "-n", "5", "-t", "1", "--out", out});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  auto t = flashscope::read_trace(out);
  std::remove(out.c_str());
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  CHECK(t->meta.traced_head == 3);
  CHECK(t->tokens.layer == 1);
  CHECK(t->tokens.keys.size() == size_t(t->meta.kv_len));
  CHECK(t->tokens.row_keys.size() == size_t(t->meta.q_len));
  CHECK(t->tokens.keys[0].text == "<|im_start|>");
  // One summary line per head of the synthetic model (4), the traced one marked.
  CHECK(contains(r.out, "layer 1:"));
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') >= 4 + 3);
  CHECK(contains(r.out, "<- traced"));

  const CliRun bad = run_cli(flashscope::cli::cmd_trace, {"chat", "-m", model.path, "-p", "hi", "--layer", "2",
                                                          "--out", out});
  CHECK(bad.rc == 2);
  CHECK(contains(bad.err, "--layer 2: the model has 2 layers"));
  const CliRun no_out = run_cli(flashscope::cli::cmd_trace, {"chat", "-m", model.path, "-p", "hi"});
  CHECK(no_out.rc == 2);
  CHECK(contains(no_out.err, "--out FILE is required"));
}

#endif  // FLASHSCOPE_TEST_CLI
