// Conversation files from elsewhere (issue #26): numbers an int or a u64
// cannot hold are refused naming the field, not cast (undefined behaviour);
// a FIFO or a directory as the path is refused before anything blocks on it.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat/conversation.hpp"

using flashscope::StatusCode;
using flashscope::app::Conversation;

namespace {

std::string with_settings(const std::string& settings) {
  return R"({"format": "flashscope-conversation", "version": 1, "settings": {)" + settings +
         R"(}, "messages": []})";
}

std::string with_stats(const std::string& stats) {
  return R"({"format": "flashscope-conversation", "version": 1, "messages": [{"role": "assistant", "content": "x",
             "stats": {)" +
         stats + "}}]}";
}

}  // namespace

TEST_CASE("app conversation: out-of-range numbers are refused naming the field") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {with_settings(R"("top_k": 1e10)"), "top_k"},
      {with_settings(R"("top_k": -3e9)"), "top_k"},
      {with_settings(R"("max_tokens": 1e300)"), "max_tokens"},
      {with_settings(R"("repeat_last_n": 2147483648)"), "repeat_last_n"},
      {with_settings(R"("seed": 1e30)"), "seed"},
      {with_settings(R"("seed": -1)"), "seed"},
      {with_stats(R"("prompt_tokens": 1e10)"), "prompt_tokens"},
      {with_stats(R"("generated_tokens": -1e20)"), "generated_tokens"},
  };
  for (const auto& [text, field] : bad) {
    CAPTURE(text);
    Conversation c;
    const flashscope::Status s = flashscope::app::conversation_from_json(text, &c);
    CHECK(s.code() == StatusCode::kCorruptData);
    CHECK(s.message().find(field) != std::string::npos);
  }
  // The extremes that do fit still load.
  Conversation c;
  const flashscope::Status s = flashscope::app::conversation_from_json(
      with_settings(R"("top_k": 2147483647, "max_tokens": -2147483648, "seed": 18446744073709551615)"), &c);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(c.settings.top_k == 2147483647);
  CHECK(c.settings.max_tokens == -2147483647 - 1);
  CHECK(c.settings.seed == 18446744073709551615ull);
}

TEST_CASE("app conversation: a FIFO or a directory is refused before it is opened") {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = std::string(tmp && *tmp ? tmp : "/tmp") + "/flashscope_conv_" + std::to_string(::getpid());
  const std::string fifo = base + ".fifo";
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  Conversation c;
  flashscope::Status s;
  auto done = std::async(std::launch::async, [&] { s = flashscope::app::load_conversation(fifo, &c); });
  const bool prompt = done.wait_for(std::chrono::seconds(3)) == std::future_status::ready;
  if (!prompt) {  // release the reader stuck in open()
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  done.wait();
  ::unlink(fifo.c_str());
  CHECK(prompt);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("FIFO") != std::string::npos);

  const std::string dir = base + ".d";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  s = flashscope::app::load_conversation(dir, &c);
  ::rmdir(dir.c_str());
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("directory") != std::string::npos);
}
