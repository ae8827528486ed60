// The generation layer: sampling rules, ChatML formatting, and Session
// (generate loop, stop conditions, multi-turn continuation of one cache).
// Sessions run on a tiny synthetic llama (tests/support/synthetic_llama.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/sampling_defaults.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::ChatMessage;
using flashscope::GenerateParams;
using flashscope::LogitsMode;
using flashscope::Model;
using flashscope::Rng;
using flashscope::SamplingParams;
using flashscope::Session;
using flashscope::StatusCode;
using flashscope::StopReason;
using flashscope::TokenEvent;

namespace {

Model synthetic_model(uint64_t seed = 1) {
  flashscope::testing::SyntheticLlama s;
  s.seed = seed;
  auto file = flashscope::GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

SamplingParams sampling(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

}  // namespace

// --- sampling ---------------------------------------------------------------------

TEST_CASE("sampling: greedy is the argmax, lowest id on ties, non-finite logits ignored") {
  Rng rng(1);
  CHECK(flashscope::sample({0.1f, 3.0f, -2.0f, 2.9f}, sampling(0.0f), rng, {}) == 1);
  CHECK(flashscope::sample({1.0f, 5.0f, 5.0f}, sampling(0.0f), rng, {}) == 1);
  CHECK(flashscope::sample({NAN, 1.0f, INFINITY, 0.5f}, sampling(0.0f), rng, {}) == 1);
  CHECK(flashscope::sample({-INFINITY, -INFINITY}, sampling(0.0f), rng, {}) == 0);
}

TEST_CASE("sampling: temperature draws follow the softmax, and a seed reproduces them") {
  // p(1) = e^ln3 / (1 + e^ln3) = 0.75.
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  Rng rng(123);
  int ones = 0;
  const int n = 8000;
  for (int i = 0; i < n; ++i) ones += flashscope::sample(logits, sampling(1.0f), rng, {}) == 1;
  // Binomial standard deviation sqrt(n·0.75·0.25) ≈ 39: ±5σ.
  CHECK(std::abs(ones - 6000) < 200);

  // Temperature 0.5 squares the odds: p(1) = 9 / 10.
  ones = 0;
  for (int i = 0; i < n; ++i) ones += flashscope::sample(logits, sampling(0.5f), rng, {}) == 1;
  CHECK(std::abs(ones - 7200) < 140);  // σ ≈ 27

  std::vector<int32_t> a, b;
  Rng r1(99), r2(99);
  const std::vector<float> wide = {0.1f, 0.5f, 0.3f, 0.2f, 0.4f, 0.0f};
  for (int i = 0; i < 50; ++i) a.push_back(flashscope::sample(wide, sampling(1.0f), r1, {}));
  for (int i = 0; i < 50; ++i) b.push_back(flashscope::sample(wide, sampling(1.0f), r2, {}));
  CHECK(a == b);
}

TEST_CASE("sampling: top-k, top-p and min-p cut the candidates") {
  const std::vector<float> logits = {2.0f, 1.9f, 1.8f, -5.0f, 1.7f};
  Rng rng(5);
  SamplingParams p = sampling(1.0f);
  p.top_k = 2;
  for (int i = 0; i < 300; ++i) {
    const int32_t id = flashscope::sample(logits, p, rng, {});
    CHECK((id == 0 || id == 1));
  }
  p = sampling(1.0f);
  p.top_p = 0.01f;  // the smallest set reaching 1%: the best token alone
  for (int i = 0; i < 100; ++i) CHECK(flashscope::sample(logits, p, rng, {}) == 0);
  p = sampling(1.0f);
  p.min_p = 0.5f;  // exp(-5 - 2) ≈ 0.001 of the best: token 3 is never drawn, the rest are
  std::vector<int> seen(5, 0);
  for (int i = 0; i < 2000; ++i) ++seen[static_cast<size_t>(flashscope::sample(logits, p, rng, {}))];
  CHECK(seen[3] == 0);
  CHECK(seen[0] > 0);
  CHECK(seen[4] > 0);
}

TEST_CASE("sampling: repetition penalty divides positive logits and multiplies negative ones") {
  Rng rng(1);
  SamplingParams p = sampling(0.0f);
  p.repetition_penalty = 2.0f;
  // 4.0 / 2 = 2.0 < 3.0: the repeated best token loses.
  CHECK(flashscope::sample({4.0f, 3.0f}, p, rng, {0}) == 1);
  // A negative logit gets more negative: -1 * 2 = -2 < -1.5.
  CHECK(flashscope::sample({-1.0f, -1.5f}, p, rng, {0}) == 1);
  // Only the last repeat_last_n tokens count.
  p.repeat_last_n = 1;
  CHECK(flashscope::sample({4.0f, 3.0f}, p, rng, {0, 1}) == 0);
}

TEST_CASE("sampling: presence and frequency penalties subtract from the logits of generated tokens") {
  Rng rng(1);
  SamplingParams p = sampling(0.0f);
  const std::vector<float> logits = {4.0f, 3.5f, 3.0f};
  const std::vector<int32_t> three_zeros = {0, 0, 0};
  // Presence counts once: 4.0 - 0.4 = 3.6 > 3.5, however often token 0 came.
  p.presence_penalty = 0.4f;
  CHECK(flashscope::sample(logits, p, rng, three_zeros) == 0);
  p.presence_penalty = 0.6f;  // 3.4 < 3.5
  CHECK(flashscope::sample(logits, p, rng, three_zeros) == 1);
  // Frequency scales with the count: 4.0 - 3·0.1 = 3.7 keeps it, 4.0 - 3·0.2 = 3.4 does not.
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.1f;
  CHECK(flashscope::sample(logits, p, rng, three_zeros) == 0);
  CHECK(flashscope::sample(logits, p, rng, {0}) == 0);
  p.frequency_penalty = 0.2f;
  CHECK(flashscope::sample(logits, p, rng, three_zeros) == 1);
  CHECK(flashscope::sample(logits, p, rng, {0}) == 0);  // 3.8: one occurrence is not enough
  // Only the reply's own tokens count: the last `generated` of recent.
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.6f;
  CHECK(flashscope::sample(logits, p, rng, {0, 2}, 1) == 0);  // token 0 is the prompt's
  CHECK(flashscope::sample(logits, p, rng, {0, 2}, 2) == 1);
  CHECK(flashscope::sample(logits, p, rng, {0, 2}, 0) == 0);
  // Negative values favour what came before: 3.5 + 1 > 4.
  p.presence_penalty = -1.0f;
  CHECK(flashscope::sample(logits, p, rng, {1}) == 1);
  // After the repetition penalty (llama.cpp's and vLLM's order): 4 / 2 - 0.5
  // = 1.5 < 1.6, where subtracting first would give (4 - 0.5) / 2 = 1.75.
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  CHECK(flashscope::sample({4.0f, 1.6f}, p, rng, {0}) == 1);
  p.presence_penalty = 0.0f;
  CHECK(flashscope::sample({4.0f, 1.6f}, p, rng, {0}) == 0);
  // The plan both samplers apply: repetition ids first, then the rest, each
  // with presence·[c > 0] + frequency·c.
  SamplingParams q;
  q.repetition_penalty = 1.3f;
  q.repeat_last_n = 2;
  q.presence_penalty = 0.5f;
  q.frequency_penalty = 0.25f;
  const flashscope::PenaltyPlan plan = flashscope::plan_penalties(q, {7, 1, 2, 2, 9, 1, 2}, 4, 8);  // 9 is out of range
  CHECK(plan.ids == std::vector<int32_t>{1, 2});
  CHECK(plan.num_repeat == 2);
  REQUIRE(plan.sub.size() == 2);
  CHECK(plan.sub[0] == doctest::Approx(0.75));  // token 1 once among the last 4
  CHECK(plan.sub[1] == doctest::Approx(1.0));   // token 2 twice
  q.repetition_penalty = 1.0f;
  q.presence_penalty = q.frequency_penalty = 0.0f;
  CHECK(flashscope::plan_penalties(q, {1, 2, 3}, 3, 8).ids.empty());
}

TEST_CASE("sampling: DRY penalizes the token that would extend a repeated run, by its length") {
  SamplingParams q;
  q.dry_multiplier = 0.8f;  // base 1.75, allowed length 2
  // The last three tokens (5 6 7) appeared before, followed by 8: 8 would
  // make it a run of 4, so it loses 0.8 · 1.75^(3 − 2).
  flashscope::PenaltyPlan plan = flashscope::plan_penalties(q, {5, 6, 7, 8, 5, 6, 7}, 3, 10);
  CHECK(plan.ids == std::vector<int32_t>{8});
  REQUIRE(plan.sub.size() == 1);
  CHECK(plan.sub[0] == doctest::Approx(1.4));
  // The longest run wins for each candidate; a run shorter than the
  // allowed length (2 followed by 9 once) costs nothing.
  plan = flashscope::plan_penalties(q, {1, 2, 9, 3, 1, 2, 4, 3, 1, 2}, 3, 10);
  CHECK(plan.ids == std::vector<int32_t>{9, 4});  // after "1 2": 9 (run 2), then 4 (run 3: "3 1 2")
  REQUIRE(plan.sub.size() == 2);
  CHECK(plan.sub[0] == doctest::Approx(0.8));
  CHECK(plan.sub[1] == doctest::Approx(1.4));
  CHECK(flashscope::plan_penalties(q, {1, 2, 9, 3, 2}, 3, 10).ids.empty());  // "2" alone: run 1
  q.dry_last_n = 3;  // the earlier "5 6 7" is outside the window
  CHECK(flashscope::plan_penalties(q, {5, 6, 7, 8, 5, 6, 7}, 3, 10).ids.empty());
  q.dry_last_n = -1;
  q.dry_allowed_length = 4;
  CHECK(flashscope::plan_penalties(q, {5, 6, 7, 8, 5, 6, 7}, 3, 10).ids.empty());
  // It applies before the argmax: greedy leaves the loop.
  Rng rng(1);
  SamplingParams greedy = sampling(0.0f);
  CHECK(flashscope::sample({0, 0, 0, 0, 0, 0, 0, 0, 1.0f, 0.5f}, greedy, rng, {5, 6, 7, 8, 5, 6, 7}) == 8);
  greedy.dry_multiplier = 0.8f;
  CHECK(flashscope::sample({0, 0, 0, 0, 0, 0, 0, 0, 1.0f, 0.5f}, greedy, rng, {5, 6, 7, 8, 5, 6, 7}) == 9);
}

namespace {

// The most times some run of 1..8 tokens repeats back to back.
int longest_loop(const std::vector<int32_t>& t) {
  int most = 1;
  for (size_t n = 1; n <= 8; ++n) {
    for (size_t i = 0; i + n <= t.size(); ++i) {
      int k = 1;
      while (i + (k + 1) * n <= t.size() && std::equal(t.begin() + i, t.begin() + i + n, t.begin() + i + k * n)) ++k;
      most = std::max(most, k);
    }
  }
  return most;
}

}  // namespace

TEST_CASE("generate: DRY ends the loop a greedy reply falls into") {
  const Model model = synthetic_model();
  for (const float dry : {0.0f, 0.8f}) {
    CAPTURE(dry);
    auto session = Session::create(model);
    REQUIRE(session.ok());
    GenerateParams gp;
    gp.max_tokens = 64;
    gp.stop_tokens = {-1};  // none: the reply runs its 64 tokens
    gp.sampling.dry_multiplier = dry;
    std::vector<int32_t> reply;
    auto stats = session->generate({1, 40, 41, 42, 3, 50}, gp, [&](const TokenEvent& e) {
      reply.push_back(e.token);
      return true;
    });
    REQUIRE(stats.ok());
    REQUIRE(reply.size() == 64);
    // The random model repeats one token to the end; DRY's penalty grows
    // with the run until another token wins, every time.
    if (dry == 0.0f) CHECK(longest_loop(reply) == 64);
    else CHECK(longest_loop(reply) <= 8);
  }
  GenerateParams bad;
  bad.sampling.dry_multiplier = -1.0f;
  auto session = Session::create(model);
  REQUIRE(session.ok());
  auto refused = session->generate({1, 40}, bad, {});
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("dry_multiplier") != std::string::npos);
}

TEST_CASE("sampling defaults: the GGUF's general.sampling.* keys, else the model card, else none") {
  using flashscope::GgufFile;
  using flashscope::testing::GgufBuilder;
  auto defaults = [](const GgufBuilder& b) {
    auto f = GgufFile::from_buffer(b.build());
    REQUIRE_MESSAGE(f.ok(), f.status().to_string());
    return flashscope::sampling_defaults(f.value());
  };
  GgufBuilder keys;
  keys.add_string("general.architecture", "qwen3")
      .add_string("general.basename", "SmolLM2")  // the file's own keys win over the card
      .add_f32("general.sampling.temp", 0.6f)
      .add_i32("general.sampling.top_k", 20)
      .add_f32("general.sampling.top_p", 0.95f)
      .add_f32("general.sampling.min_p", 1.5f)  // out of [0, 1]: ignored
      .add_string("general.sampling.penalty_repeat", "1.1");  // not a number: ignored
  const auto d = defaults(keys);
  CHECK(d.source == "gguf metadata");
  CHECK(d.params.temperature == doctest::Approx(0.6));
  CHECK(d.params.top_k == 20);
  CHECK(d.params.top_p == doctest::Approx(0.95));
  CHECK(d.params.min_p == 0.0f);  // SamplingParams' own
  CHECK(d.params.repetition_penalty == 1.0f);
  CHECK(d.fields == std::vector<std::string>{"temperature", "top_k", "top_p"});
  CHECK(d.ignored == std::vector<std::string>{"general.sampling.min_p", "general.sampling.penalty_repeat"});

  GgufBuilder off;
  off.add_string("general.architecture", "llama").add_i32("general.sampling.top_k", -1);  // llama.cpp's "all"
  CHECK(defaults(off).params.top_k == 0);
  CHECK(defaults(off).fields == std::vector<std::string>{"top_k"});

  GgufBuilder card;
  card.add_string("general.architecture", "llama").add_string("general.name", "Smollm2 135M 8k Lc100K Mix1 Ep2");
  const auto c = defaults(card);
  CHECK(c.source == "SmolLM2 model card");
  CHECK(c.params.temperature == doctest::Approx(0.2));
  CHECK(c.params.top_p == doctest::Approx(0.9));

  GgufBuilder none;
  none.add_string("general.architecture", "llama").add_string("general.name", "something else");
  const auto n = defaults(none);
  CHECK(n.source.empty());
  CHECK(n.fields.empty());
  CHECK(n.params.temperature == SamplingParams{}.temperature);
}

// --- chat --------------------------------------------------------------------------

TEST_CASE("chat: ChatML as SmolLM2's template renders it") {
  CHECK(flashscope::format_chatml({{"user", "Hi"}}, true) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(flashscope::format_chatml({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}}, false) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n");
  CHECK(flashscope::format_chatml({{"user", "Hi"}}, false, "") == "<|im_start|>user\nHi<|im_end|>\n");
  CHECK(flashscope::chatml_next_turn("More", true) == "\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n");
  CHECK(flashscope::chatml_next_turn("More", false) ==
        "<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("chat: the default system prompt is read from the template") {
  const std::string smollm =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}";
  CHECK(flashscope::default_system_prompt_from_template(smollm) == flashscope::kSmolLMDefaultSystemPrompt);
  CHECK(flashscope::default_system_prompt_from_template("'<|im_start|>system\\nBe nice<|im_end|>\\n'") == "Be nice");
  CHECK(flashscope::default_system_prompt_from_template("<|im_start|>system\n{{ sys }}<|im_end|>").empty());
  CHECK(flashscope::default_system_prompt_from_template("").empty());
}

TEST_CASE("chat: encode_chatml keeps user text from becoming control tokens") {
  const Model model = synthetic_model();
  const flashscope::Tokenizer& tok = model.tokenizer();
  const auto ids = flashscope::encode_chatml(tok, {{"user", "a<|im_end|>b"}}, true, "sys");
  // Framing control tokens: <|im_start|> ×3 and <|im_end|> ×2; the one typed inside the text is plain bytes.
  int im_start = 0, im_end = 0;
  for (int32_t id : ids) {
    im_start += id == 1;
    im_end += id == 2;
  }
  CHECK(im_start == 3);
  CHECK(im_end == 2);
  CHECK(tok.decode(ids) == flashscope::format_chatml({{"user", "a<|im_end|>b"}}, true, "sys"));
}

// --- sessions -------------------------------------------------------------------------

TEST_CASE("session: greedy generation streams tokens and reports stats") {
  const Model model = synthetic_model();
  auto session = Session::create(model);
  REQUIRE(session.ok());
  GenerateParams gp;
  gp.max_tokens = 12;
  gp.stop_tokens = {99};  // a filler token: the reply runs to max_tokens unless sampled
  std::vector<int32_t> seen;
  std::string text;
  auto stats = session->generate({5, 6, 7, 8}, gp, [&](const TokenEvent& e) {
    if (e.token >= 0) seen.push_back(e.token);
    text += e.text;
    return true;
  });
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  CHECK(stats->prompt_tokens == 4);
  CHECK(stats->generated_tokens == static_cast<int>(seen.size()) + (stats->stop_reason == StopReason::kStopToken));
  CHECK(stats->prefill_ms > 0);
  if (stats->stop_reason == StopReason::kMaxTokens) {
    CHECK(stats->generated_tokens == 12);
    CHECK(stats->decode_tokens_per_s > 0);
  }
  // The conversation: prompt, then every sampled token (the last one pending).
  std::vector<int32_t> want = {5, 6, 7, 8};
  want.insert(want.end(), seen.begin(), seen.end());
  if (stats->stop_reason == StopReason::kStopToken) want.push_back(stats->stop_token);
  CHECK(session->tokens() == want);
  CHECK(session->n_tokens() == static_cast<int>(want.size()));

  // Greedy: each token is the argmax of a full recompute of everything before it.
  auto check = model.new_sequence();
  REQUIRE(check.ok());
  std::vector<float> logits;
  REQUIRE(model.forward(*check, std::vector<int32_t>(want.begin(), want.end() - 1), {}, LogitsMode::kAll, &logits).ok());
  for (size_t i = 4; i < want.size(); ++i) {
    const float* row = logits.data() + (i - 1) * 100;
    CHECK(std::max_element(row, row + 100) - row == want[i]);
  }
}

TEST_CASE("session: stop token, callback stop, and max_tokens 0") {
  const Model model = synthetic_model();
  // Find what greedy says first, then make it the stop token.
  auto probe = Session::create(model);
  REQUIRE(probe.ok());
  GenerateParams gp;
  gp.max_tokens = 1;
  gp.stop_tokens = {99};
  int32_t first = -1;
  REQUIRE(probe->generate({10, 11}, gp, [&](const TokenEvent& e) { first = e.token; return true; }).ok());
  REQUIRE(first >= 0);

  auto s = Session::create(model);
  REQUIRE(s.ok());
  gp.max_tokens = 10;
  gp.stop_tokens = {first};
  int calls = 0;
  auto stats = s->generate({10, 11}, gp, [&](const TokenEvent&) { ++calls; return true; });
  REQUIRE(stats.ok());
  CHECK(stats->stop_reason == StopReason::kStopToken);
  CHECK(stats->stop_token == first);
  CHECK(stats->generated_tokens == 1);
  CHECK(calls == 0);  // stop tokens are not shown

  s->reset();
  CHECK(s->n_tokens() == 0);
  gp.stop_tokens = {99};
  calls = 0;
  stats = s->generate({10, 11}, gp, [&](const TokenEvent&) { return ++calls < 3; });
  REQUIRE(stats.ok());
  if (stats->stop_reason != StopReason::kStopToken) {
    CHECK(stats->stop_reason == StopReason::kCallback);
    CHECK(calls == 3);
  }

  s->reset();
  gp.max_tokens = 0;  // prefill only
  stats = s->generate({10, 11}, gp, nullptr);
  REQUIRE(stats.ok());
  CHECK(stats->generated_tokens == 0);
  CHECK(s->n_tokens() == 2);
}

TEST_CASE("session: a second turn continues the cache and equals one long run") {
  const Model model = synthetic_model();
  GenerateParams gp;
  gp.max_tokens = 6;
  gp.stop_tokens = {99};
  std::vector<int32_t> turn2;

  auto s = Session::create(model);
  REQUIRE(s.ok());
  REQUIRE(s->generate({20, 21, 22}, gp, nullptr).ok());
  const std::vector<int32_t> after1 = s->tokens();
  auto stats = s->generate({30, 31}, gp, [&](const TokenEvent& e) { if (e.token >= 0) turn2.push_back(e.token); return true; });
  REQUIRE(stats.ok());
  // Only the pending token and the new prompt were prefilled.
  CHECK(stats->prompt_tokens == 1 + 2);

  // One session fed the whole first turn as a prompt produces the same reply.
  auto t = Session::create(model);
  REQUIRE(t.ok());
  std::vector<int32_t> prompt = after1;
  prompt.push_back(30);
  prompt.push_back(31);
  std::vector<int32_t> again;
  REQUIRE(t->generate(prompt, gp, [&](const TokenEvent& e) { if (e.token >= 0) again.push_back(e.token); return true; }).ok());
  CHECK(turn2 == again);
  CHECK(s->tokens() == t->tokens());

  // Truncate back to the first turn and run it again: the same reply.
  REQUIRE(s->truncate(static_cast<int>(after1.size())).ok());
  std::vector<int32_t> redo;
  REQUIRE(s->generate({30, 31}, gp, [&](const TokenEvent& e) { if (e.token >= 0) redo.push_back(e.token); return true; }).ok());
  CHECK(redo == turn2);
}

TEST_CASE("session: a prompt that does not fit is refused and the session is unchanged") {
  const Model model = synthetic_model();
  flashscope::SessionOptions so;
  so.max_tokens = 10;
  auto s = Session::create(model, so);
  REQUIRE(s.ok());
  GenerateParams gp;
  gp.max_tokens = 3;
  gp.stop_tokens = {99};
  auto too_long = s->generate(std::vector<int32_t>(11, 5), gp, nullptr);
  CHECK(too_long.status().code() == StatusCode::kInvalidArgument);
  CHECK(s->n_tokens() == 0);

  REQUIRE(s->generate({5, 6, 7, 8, 9, 10}, gp, nullptr).ok());
  const std::vector<int32_t> before = s->tokens();
  auto overflow = s->generate({5, 6, 7}, gp, nullptr);
  CHECK(overflow.status().code() == StatusCode::kInvalidArgument);
  CHECK(s->tokens() == before);

  // The cache filling up mid-reply ends the reply with kContextFull.
  s->reset();
  gp.max_tokens = 20;
  auto stats = s->generate({5, 6, 7, 8}, gp, nullptr);
  REQUIRE(stats.ok());
  if (stats->stop_reason != StopReason::kStopToken) {
    CHECK(stats->stop_reason == StopReason::kContextFull);
    CHECK(s->n_tokens() == 11);  // 10 cached + the pending last sample
  }

  GenerateParams bad;
  bad.sampling.top_p = 0.0f;
  CHECK(s->generate({5}, bad, nullptr).status().code() == StatusCode::kInvalidArgument);
  // OpenAI's range for the additive penalties is [-2, 2]; NaN is refused too.
  for (float v : {2.5f, -2.01f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    CAPTURE(v);
    GenerateParams presence, frequency;
    presence.sampling.presence_penalty = v;
    frequency.sampling.frequency_penalty = v;
    const auto p = s->generate({5}, presence, nullptr);
    CHECK(p.status().code() == StatusCode::kInvalidArgument);
    CHECK(p.status().message().find("presence_penalty") != std::string::npos);
    const auto f = s->generate({5}, frequency, nullptr);
    CHECK(f.status().code() == StatusCode::kInvalidArgument);
    CHECK(f.status().message().find("frequency_penalty") != std::string::npos);
  }
  GenerateParams edge;
  edge.max_tokens = 1;
  edge.sampling.presence_penalty = -2.0f;
  edge.sampling.frequency_penalty = 2.0f;
  s->reset();
  CHECK(s->generate({5}, edge, nullptr).ok());
  CHECK(Session().generate({5}, GenerateParams{}, nullptr).status().code() == StatusCode::kInvalidArgument);
}
