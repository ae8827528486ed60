// The app's files and flags: how the app reads and writes JSON (nlohmann-json
// with the app's helpers), conversations saved and loaded (and refused when
// malformed, and read as the app has always written them), the ChatML
// message list a request carries, and the command line.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "chat/conversation.hpp"
#include "platform/json.hpp"
#include "platform/options.hpp"

using flashscope::StatusCode;
using flashscope::app::AppOptions;
using flashscope::app::Conversation;
using flashscope::app::Json;
using flashscope::app::json_member;
using flashscope::app::json_number;
using flashscope::app::json_string;
using flashscope::app::Message;

namespace {

bool parse(const std::string& text, Json* out) {
  std::string error;
  return flashscope::app::json_parse(text, out, &error);
}

bool parse_args(std::vector<std::string> args, AppOptions* out, std::string* error) {
  args.insert(args.begin(), "flashscope");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flashscope::app::parse_app_options(static_cast<int>(argv.size()), argv.data(), out, error);
}

Conversation sample_conversation() {
  Conversation c;
  c.system_prompt = "Be brief.\nUse \"quotes\" and \\backslashes\\.";
  c.settings.temperature = 0.25f;
  c.settings.top_k = 7;
  c.settings.max_tokens = 99;
  c.settings.seed = 18446744073709551557ull;  // above 2^53: must survive as a string
  c.settings.random_seed = false;
  c.messages.push_back(flashscope::app::make_message("user", "héllo ✓ 😀\ttab\x01"));
  Message answer = flashscope::app::make_message("assistant", "Hi!\n");
  answer.stats.valid = true;
  answer.stats.prompt_tokens = 31;
  answer.stats.generated_tokens = 4;
  answer.stats.context_tokens = 35;
  answer.stats.prefill_ms = 12.5;
  answer.stats.decode_tokens_per_s = 21.75;
  answer.stats.stop_reason = "stop_token";
  c.messages.push_back(answer);
  c.messages.push_back(flashscope::app::make_message("user", "and again"));
  return c;
}

}  // namespace

TEST_CASE("app json: strings round-trip through write and parse, escapes and UTF-8 included") {
  const std::string tricky = std::string("q\"b\\s/n\nr\rt\tc\x01\x1f") + "é✓😀";
  const Json root = {{"s", tricky}, {"n", -12.5}, {"big", 1e300}, {"a", {true, nullptr}}};
  Json back;
  REQUIRE(parse(flashscope::app::json_write(root), &back));
  CHECK(json_string(back, "s") == tricky);
  CHECK(json_number(back, "n", 0) == -12.5);
  CHECK(json_number(back, "big", 0) == 1e300);
  REQUIRE(json_member(back, "a") != nullptr);
  REQUIRE(json_member(back, "a")->size() == 2);
  CHECK((*json_member(back, "a"))[0] == true);
  CHECK((*json_member(back, "a"))[1].is_null());
  // UTF-8 is written as is; bytes that are not UTF-8 become U+FFFD rather than an invalid file.
  CHECK(flashscope::app::json_write(Json("é")) == "\"é\"\n");
  CHECK(flashscope::app::json_write(Json(std::string("cut \xE2\x9C"))) == "\"cut \xEF\xBF\xBD\"\n");
}

TEST_CASE("app json: \\u escapes decode to UTF-8, surrogate pairs included") {
  Json v;
  REQUIRE(parse(R"("\u00e9\u2713\ud83d\ude00")", &v));
  CHECK(v.get<std::string>() == "é✓😀");
}

TEST_CASE("app json: members are read with a fallback when absent or of another type") {
  Json v;
  REQUIRE(parse(R"({"n": 2, "s": "x", "b": true, "wrong": "7"})", &v));
  CHECK(json_number(v, "n", 0) == 2);
  CHECK(json_number(v, "wrong", 5) == 5);
  CHECK(json_number(v, "absent", 5) == 5);
  CHECK(json_string(v, "s") == "x");
  CHECK(json_string(v, "n", "fallback") == "fallback");
  CHECK(flashscope::app::json_bool(v, "b", false));
  CHECK(flashscope::app::json_bool(v, "s", true));
  CHECK(json_member(Json::array({1}), "n") == nullptr);
}

TEST_CASE("app json: malformed input is refused with a position") {
  Json v = 1;
  std::string error;
  CHECK_FALSE(flashscope::app::json_parse("{\"a\": 1} x", &v, &error));
  CHECK(error.find("line 1, column 10") != std::string::npos);
  CHECK(v == 1);  // left alone
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"open", "\"\\ud800\"", "\"\\udc00x\"", "01x", "tru",
                          "\"a\x01\"", "-", "1.", "{\"a\":}", "1e400"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse(bad, &v));
  }
  // The parser keeps its own stack: a hostile file nested far deeper than the
  // call stack could take is read (and a conversation reader then refuses it).
  CHECK(parse(std::string(100000, '[') + std::string(100000, ']'), &v));
  CHECK(parse(std::string(60, '[') + std::string(60, ']'), &v));
}

TEST_CASE("app conversation: JSON round trip keeps prompt, settings, messages and stats") {
  const Conversation c = sample_conversation();
  Conversation back;
  REQUIRE(flashscope::app::conversation_from_json(flashscope::app::conversation_to_json(c), &back).ok());
  CHECK(back.system_prompt == c.system_prompt);
  CHECK(back.settings.temperature == doctest::Approx(0.25));
  CHECK(back.settings.top_k == 7);
  CHECK(back.settings.max_tokens == 99);
  CHECK(back.settings.seed == c.settings.seed);
  CHECK_FALSE(back.settings.random_seed);
  REQUIRE(back.messages.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back.messages[i].role == c.messages[i].role);
    CHECK(back.messages[i].content == c.messages[i].content);
    CHECK(back.messages[i].stats.valid == c.messages[i].stats.valid);
  }
  const auto& s = back.messages[1].stats;
  CHECK(s.prompt_tokens == 31);
  CHECK(s.generated_tokens == 4);
  CHECK(s.context_tokens == 35);
  CHECK(s.prefill_ms == 12.5);
  CHECK(s.decode_tokens_per_s == 21.75);
  CHECK(s.stop_reason == "stop_token");
}

TEST_CASE("app conversation: reads a file as the app's earlier hand-written JSON writer wrote it") {
  // sample_conversation() saved by that writer: keys sorted, floats as %.17g, integers without a point.
  const std::string file = R"JSON({
  "format": "flashscope-conversation",
  "messages": [
    {
      "content": "héllo ✓ 😀\ttab\u0001",
      "role": "user"
    },
    {
      "content": "Hi!\n",
      "role": "assistant",
      "stats": {
        "context_tokens": 35,
        "decode_ms": 0,
        "decode_tokens_per_s": 21.75,
        "generated_tokens": 4,
        "prefill_ms": 12.5,
        "prefill_tokens_per_s": 0,
        "prompt_tokens": 31,
        "stop_reason": "stop_token",
        "ttft_ms": 0
      }
    },
    {
      "content": "and again",
      "role": "user"
    }
  ],
  "settings": {
    "max_tokens": 99,
    "min_p": 0.05000000074505806,
    "random_seed": false,
    "repeat_last_n": 64,
    "repetition_penalty": 1,
    "seed": "18446744073709551557",
    "temperature": 0.25,
    "top_k": 7,
    "top_p": 0.94999998807907104
  },
  "system_prompt": "Be brief.\nUse \"quotes\" and \\backslashes\\.",
  "version": 1
}
)JSON";
  const Conversation c = sample_conversation();
  Conversation back;
  REQUIRE(flashscope::app::conversation_from_json(file, &back).ok());
  CHECK(back.system_prompt == c.system_prompt);
  CHECK(back.settings.temperature == c.settings.temperature);
  CHECK(back.settings.top_p == c.settings.top_p);
  CHECK(back.settings.min_p == c.settings.min_p);
  CHECK(back.settings.repetition_penalty == c.settings.repetition_penalty);
  CHECK(back.settings.top_k == 7);
  CHECK(back.settings.max_tokens == 99);
  CHECK(back.settings.seed == c.settings.seed);
  CHECK_FALSE(back.settings.random_seed);
  REQUIRE(back.messages.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back.messages[i].role == c.messages[i].role);
    CHECK(back.messages[i].content == c.messages[i].content);
    CHECK(back.messages[i].stats.valid == c.messages[i].stats.valid);
  }
  CHECK(back.messages[1].stats.prompt_tokens == 31);
  CHECK(back.messages[1].stats.decode_tokens_per_s == 21.75);
  CHECK(back.messages[1].stats.stop_reason == "stop_token");
  // And what the app writes now has the same layout: the same keys in the same order, two-space indents.
  std::string written = flashscope::app::conversation_to_json(c);
  auto keys = [](const std::string& text) {
    std::string out;
    for (size_t at = text.find("\n"); at != std::string::npos; at = text.find("\n", at + 1)) {
      const size_t colon = text.find("\": ", at);
      const size_t next = text.find("\n", at + 1);
      if (colon != std::string::npos && colon < next) out += text.substr(at + 1, colon - at) + "|";
    }
    return out;
  };
  // ... with the one key added since: DRY's multiplier (a file without it
  // keeps the library's default, read above).
  std::string now = keys(written);
  const std::string dry = "    \"dry_multiplier\"|";
  const size_t at = now.find(dry);
  REQUIRE(at != std::string::npos);
  now.erase(at, dry.size());
  CHECK(now == keys(file));
  CHECK(back.settings.dry_multiplier == flashscope::engine_sampling_defaults().dry_multiplier);
}

TEST_CASE("app conversation: malformed files are refused and leave the conversation alone") {
  Conversation c = sample_conversation();
  const std::vector<std::string> bad = {
      "not json",
      R"({"format": "something-else", "version": 1, "messages": []})",
      R"({"format": "flashscope-conversation", "version": 2, "messages": []})",
      R"({"format": "flashscope-conversation", "version": 1})",
      R"({"format": "flashscope-conversation", "version": 1, "messages": [{"role": "user"}]})",
      R"({"format": "flashscope-conversation", "version": 1, "messages": [{"role": "system", "content": "x"}]})",
      R"([1, 2])",
      std::string(100000, '[') + std::string(100000, ']'),
  };
  for (const std::string& text : bad) {
    CAPTURE(text);
    const flashscope::Status s = flashscope::app::conversation_from_json(text, &c);
    CHECK(s.code() == StatusCode::kCorruptData);
    CHECK(c.messages.size() == 3);
  }
  // Unknown keys are ignored, missing settings keep their defaults.
  Conversation minimal;
  REQUIRE(flashscope::app::conversation_from_json(
              R"({"format": "flashscope-conversation", "version": 1, "extra": {"x": [1]},
                  "messages": [{"role": "user", "content": "hi", "note": 3}]})",
              &minimal)
              .ok());
  CHECK(minimal.messages.size() == 1);
  CHECK(minimal.settings.max_tokens == flashscope::app::ChatSettings().max_tokens);
}

TEST_CASE("app conversation: save and load through a file") {
  const std::string path = "flashscope_app_test_conversation.json";
  const Conversation c = sample_conversation();
  REQUIRE(flashscope::app::save_conversation(path, c).ok());
  Conversation back;
  REQUIRE(flashscope::app::load_conversation(path, &back).ok());
  CHECK(back.messages.size() == c.messages.size());
  CHECK(back.messages[0].content == c.messages[0].content);
  std::remove(path.c_str());
  CHECK(flashscope::app::load_conversation(path, &back).code() == StatusCode::kIoError);
  CHECK(flashscope::app::save_conversation("/nonexistent-dir/x.json", c).code() == StatusCode::kIoError);
}

TEST_CASE("app conversation: the request's messages put the system prompt first, when there is one") {
  Conversation c = sample_conversation();
  auto m = flashscope::app::prompt_messages(c, 2);
  REQUIRE(m.size() == 3);
  CHECK(m[0].role == "system");
  CHECK(m[1].content == c.messages[0].content);
  CHECK(m[2].role == "assistant");
  c.system_prompt.clear();
  m = flashscope::app::prompt_messages(c, 100);
  REQUIRE(m.size() == 3);
  CHECK(m[0].role == "user");
  const std::string text = flashscope::app::conversation_as_text(c);
  CHECK(text.rfind("User: héllo", 0) == 0);
  CHECK(text.find("Assistant: Hi!") != std::string::npos);
}

TEST_CASE("app options: headless flags, sizes and errors") {
  AppOptions o;
  std::string error;
  REQUIRE(parse_args({"--screenshot", "out.png", "--tab", "lab", "--size", "1920x1080", "--prompt", "hi"}, &o, &error));
  CHECK(o.headless());
  CHECK(o.frames == 5);  // enough frames for the layout to settle
  CHECK(o.width == 1920);
  CHECK(o.height == 1080);
  CHECK(o.has_prompt);
  CHECK(o.tab == "lab");
  REQUIRE(parse_args({"--frames", "40", "--seed", "7", "--greedy", "--scale", "2"}, &o, &error));
  CHECK(o.frames == 40);
  CHECK(o.has_seed);
  CHECK(o.seed == 7);
  CHECK(o.greedy);
  CHECK(o.scale == 2.0f);
  REQUIRE(parse_args({}, &o, &error));
  CHECK_FALSE(o.headless());
  CHECK_FALSE(parse_args({"--frames", "0"}, &o, &error));
  CHECK_FALSE(parse_args({"--size", "100x100"}, &o, &error));
  CHECK_FALSE(parse_args({"--frames"}, &o, &error));
  CHECK(error.find("needs a value") != std::string::npos);
  CHECK_FALSE(parse_args({"--bogus"}, &o, &error));
  REQUIRE(parse_args({"--replay", "assets/traces/cpu-example.fstrace", "--run-lab", "--frames", "3"}, &o, &error));
  CHECK(o.replay == "assets/traces/cpu-example.fstrace");
  CHECK(o.run_lab);
  CHECK_FALSE(parse_args({"--replay"}, &o, &error));
  CHECK_FALSE(parse_args({"--replay", ""}, &o, &error));
  CHECK(error.find("expected a trace file") != std::string::npos);
  REQUIRE(parse_args({"--dry-multiplier", "0"}, &o, &error));
  CHECK(o.dry_multiplier == 0.0f);
  REQUIRE(parse_args({}, &o, &error));
  CHECK(o.dry_multiplier < 0.0f);  // not given: the settings' default
  CHECK_FALSE(parse_args({"--dry-multiplier", "-1"}, &o, &error));
  CHECK(error.find("--dry-multiplier") != std::string::npos);
  CHECK_FALSE(parse_args({"--dry-multiplier", "lots"}, &o, &error));
}
