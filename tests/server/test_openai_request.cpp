// The server's pieces that need no model: OpenAI request bodies read into
// GenerateParams (defaults, extensions, each refusal naming its field), and
// the reasoning split as it streams (chunks add up to the whole reply's
// split, and no chunk sends text a later one would take back).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashscope/chat.hpp"
#include "openai_request.hpp"
#include "reasoning_stream.hpp"

using namespace flashscope;
using namespace flashscope::server;
using nlohmann::json;

namespace {

// Streams `reply` in pieces of `step` characters; returns (reasoning,
// content) as a client would assemble them, checking that no content
// arrives while the reasoning block is still open.
std::pair<std::string, std::string> stream(const std::string& reply, size_t step, bool opened) {
  // The engine's token events carry whole characters: cut between them.
  std::vector<std::string> chars;
  for (size_t i = 0; i < reply.size(); ++i) {
    if ((static_cast<unsigned char>(reply[i]) & 0xC0) == 0x80) {
      chars.back() += reply[i];
    } else {
      chars.emplace_back(1, reply[i]);
    }
  }
  ReasoningStream rs(opened);
  std::string reasoning, content, so_far;
  for (size_t i = 0; i < chars.size(); i += step) {
    std::string piece;
    for (size_t j = i; j < i + step && j < chars.size(); ++j) piece += chars[j];
    so_far += piece;
    rs.push(piece);
    std::string r, c;
    rs.take(false, &r, &c);
    if (split_reply(so_far, opened).reasoning_open) CHECK(c.empty());
    // The reasoning is cut where "</think>" may be arriving: never inside a character.
    if (!r.empty()) CHECK((static_cast<unsigned char>(r.back()) & 0xC0) != 0xC0);
    reasoning += r;
    content += c;
  }
  std::string r, c;
  rs.take(true, &r, &c);
  return {reasoning + r, content + c};
}

}  // namespace

TEST_CASE("serve: a streamed reply's reasoning and content add up to the whole reply's split") {
  struct Case {
    std::string reply;
    bool opened;  // the prompt left a <think> block open
    std::string reasoning, content;
  };
  const std::vector<Case> cases = {
      {"<think>\nThe user asks for 2+2. That is 4.\n</think>\n\nThe answer is 4.", false,
       "The user asks for 2+2. That is 4.", "The answer is 4."},
      {"<think>Ünïcödé thöughts — ✓</think>Answer: 日本語", false, "Ünïcödé thöughts — ✓", "Answer: 日本語"},
      {"  <think>open and never closed", false, "open and never closed", ""},
      {"Plain answer, no thinking at all.", false, "", "Plain answer, no thinking at all."},
      {"<thing> is not a tag", false, "", "<thing> is not a tag"},
      {"A reply that mentions </think> late", false, "", "A reply that mentions </think> late"},
      {"The user greets me.\n</think>\n\nHello!", true, "The user greets me.", "Hello!"},
      {"Still thinking when cut off", true, "Still thinking when cut off", ""},
  };
  CHECK(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  CHECK_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  CHECK_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  for (const Case& c : cases) {
    CAPTURE(c.reply);
    const ReasoningSplit whole = split_reply(c.reply, c.opened);
    CHECK(whole.reasoning == c.reasoning);
    CHECK(whole.content == c.content);
    for (size_t step : {1u, 2u, 3u, 7u, 64u}) {
      CAPTURE(step);
      const auto [reasoning, content] = stream(c.reply, step, c.opened);
      CHECK(reasoning == c.reasoning);
      CHECK(content == c.content);
    }
  }
}

TEST_CASE("serve: request bodies become GenerateParams with the caller's defaults and the engine's extensions") {
  GenRequest g;
  const json body = {{"messages", {{{"role", "developer"}, {"content", "Be brief."}},
                                   {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi "}},
                                                                   {{"type", "text"}, {"text", "there"}}}}}}},
                     {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"repeat_penalty", 1.1},
                     {"seed", 7}, {"stop", "END"}, {"max_completion_tokens", 33}, {"stream", true},
                     {"stream_options", {{"include_usage", true}}}, {"presence_penalty", 0.6}, {"frequency_penalty", -0.25},
                     {"ignore_eos", true}, {"repeat_last_n", 32}, {"dry_multiplier", 1.5}, {"dry_base", 2.0},
                     {"dry_allowed_length", 3}, {"dry_penalty_last_n", 0}};
  REQUIRE_FALSE(parse_chat_request(body, &g).has_value());
  REQUIRE(g.messages.size() == 2);
  CHECK(g.messages[0].role == "system");  // developer is OpenAI's newer name for it
  CHECK(g.messages[1].content == "Hi there");
  CHECK(g.params.sampling.temperature == doctest::Approx(0.5));
  CHECK(g.params.sampling.top_p == doctest::Approx(0.9));
  CHECK(g.params.sampling.top_k == 40);
  CHECK(g.params.sampling.min_p == doctest::Approx(0.05));
  CHECK(g.params.sampling.repetition_penalty == doctest::Approx(1.1));
  CHECK(g.params.sampling.presence_penalty == doctest::Approx(0.6));
  CHECK(g.params.sampling.frequency_penalty == doctest::Approx(-0.25));
  CHECK(g.params.sampling.seed == 7);
  CHECK(g.seed_given);
  CHECK(g.params.stop_strings == std::vector<std::string>{"END"});
  CHECK(g.params.max_tokens == 33);
  CHECK(g.max_tokens_given);
  CHECK(g.stream);
  CHECK(g.include_usage);
  CHECK(g.params.stop_tokens == std::vector<int32_t>{-1});  // ignore_eos
  CHECK(g.params.sampling.repeat_last_n == 32);
  // DRY under llama.cpp's server's names.
  CHECK(g.params.sampling.dry_multiplier == doctest::Approx(1.5));
  CHECK(g.params.sampling.dry_base == doctest::Approx(2.0));
  CHECK(g.params.sampling.dry_allowed_length == 3);
  CHECK(g.params.sampling.dry_last_n == 0);

  // What the body leaves out keeps the caller's values (the server's:
  // default_sampling), not OpenAI's temperature 1.
  GenRequest d;
  d.params.sampling = engine_sampling_defaults();
  d.params.sampling.temperature = 0.3f;
  REQUIRE_FALSE(parse_completion_request(json{{"prompt", {"one prompt"}}}, &d).has_value());
  CHECK(d.prompt == "one prompt");
  CHECK(d.params.sampling.temperature == doctest::Approx(0.3));
  CHECK(d.params.sampling.top_k == engine_sampling_defaults().top_k);
  CHECK(d.params.sampling.min_p == doctest::Approx(engine_sampling_defaults().min_p));
  CHECK(d.params.sampling.dry_multiplier == doctest::Approx(engine_sampling_defaults().dry_multiplier));
  CHECK(d.params.sampling.dry_multiplier > 0.0f);
  CHECK_FALSE(d.max_tokens_given);
  CHECK_FALSE(d.seed_given);
  CHECK_FALSE(d.stream);
  CHECK(d.params.stop_tokens.empty());
  CHECK(d.params.sampling.presence_penalty == 0.0f);  // OpenAI's defaults: off
  CHECK(d.params.sampling.frequency_penalty == 0.0f);
  GenRequest ids;
  REQUIRE_FALSE(parse_completion_request(json{{"prompt", {1, 2, 3}}}, &ids).has_value());
  CHECK(ids.prompt_is_ids);
  CHECK(ids.prompt_ids == std::vector<int32_t>{1, 2, 3});

  // An error names its field and says what was wrong.
  GenRequest bad;
  auto e = parse_chat_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_k", "many"}}, &bad);
  REQUIRE(e.has_value());
  CHECK(e->status == 400);
  CHECK(e->param == "top_k");
  for (const json& wrong : {json{{"dry_multiplier", -0.5}}, json{{"dry_base", 0.5}}, json{{"dry_allowed_length", 0}},
                            json{{"dry_penalty_last_n", -2}}, json{{"dry_multiplier", "much"}}}) {
    json b = wrong;
    b["messages"] = {{{"role", "user"}, {"content", "x"}}};
    GenRequest r;
    auto err = parse_chat_request(b, &r);
    REQUIRE_MESSAGE(err.has_value(), wrong.dump());
    CHECK(err->param == wrong.begin().key());
  }
  CHECK(e->message.find("integer") != std::string::npos);
  const json ej = error_json(*e);
  CHECK(ej["error"]["param"] == "top_k");
  CHECK(ej["error"]["type"] == "invalid_request_error");
  CHECK(ej["error"]["code"].is_null());

  CHECK(std::string(finish_reason(StopReason::kStopToken)) == "stop");
  CHECK(std::string(finish_reason(StopReason::kStopString)) == "stop");
  CHECK(std::string(finish_reason(StopReason::kMaxTokens)) == "length");
  CHECK(std::string(finish_reason(StopReason::kContextFull)) == "length");
}
