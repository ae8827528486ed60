// Stopping a reply: stop strings (the streaming matcher on its own, behind
// the UTF-8 stream decoder, and inside Session::generate) and
// Session::cancel() from another thread. Sessions run on the tiny synthetic
// llama of tests/support/synthetic_llama.hpp, sampled at a high temperature
// with a repetition penalty so its text varies (greedy repeats one token);
// a fixed seed makes every run draw the same tokens, so a run with stop
// strings can be compared with the same run without them.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/tokenizer.hpp"
#include "engine/stop_strings.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::GenerateParams;
using flashscope::Model;
using flashscope::Session;
using flashscope::StatusCode;
using flashscope::StopReason;
using flashscope::StopStringMatcher;
using flashscope::TokenEvent;

namespace {

Model synthetic_model() {
  flashscope::testing::SyntheticLlama s;
  auto file = flashscope::GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

// Varied, reproducible text from the synthetic model.
GenerateParams varied(int max_tokens) {
  GenerateParams gp;
  gp.max_tokens = max_tokens;
  gp.stop_tokens = {99};  // a filler: the run goes to max_tokens unless it is drawn
  gp.sampling.temperature = 2.0f;
  gp.sampling.repetition_penalty = 3.0f;
  gp.sampling.seed = 7;
  return gp;
}

struct Run {
  std::vector<TokenEvent> events;  // text copied into `texts`
  std::vector<std::string> texts;
  std::string text;                // every event's text joined
  std::vector<int32_t> tokens;     // sampled ids the callback saw
  flashscope::GenerateStats stats;
};

Run generate(Session& s, const std::vector<int32_t>& prompt, const GenerateParams& gp) {
  Run r;
  auto stats = s.generate(prompt, gp, [&](const TokenEvent& e) {
    r.texts.emplace_back(e.text);
    r.events.push_back(e);
    r.text += e.text;
    if (e.token >= 0) r.tokens.push_back(e.token);
    return true;
  });
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  r.stats = *stats;
  return r;
}

// The reference rule, byte by byte: the text is cut where the first stop
// string to complete begins (of those completing at one byte, the longest).
// Returns false when no stop string occurs.
bool cut_at_first_match(const std::string& text, const std::vector<std::string>& stops, std::string* cut) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t longest = 0;
    for (const std::string& s : stops) {
      if (s.size() <= end && s.size() > longest && text.compare(end - s.size(), s.size(), s) == 0) longest = s.size();
    }
    if (longest > 0) {
      *cut = text.substr(0, end - longest);
      return true;
    }
  }
  return false;
}

// What may be shown after `so_far` arrived: the text before a match, else
// all of it but the longest tail that a stop string starts with.
std::string shown_after(const std::string& so_far, const std::vector<std::string>& stops) {
  std::string cut;
  if (cut_at_first_match(so_far, stops, &cut)) return cut;
  for (size_t k = so_far.size(); k > 0; --k) {
    const std::string tail = so_far.substr(so_far.size() - k);
    for (const std::string& s : stops) {
      if (s.size() > k && s.compare(0, k, tail) == 0) return so_far.substr(0, so_far.size() - k);
    }
  }
  return so_far;
}

}  // namespace

// --- the matcher ----------------------------------------------------------------------

TEST_CASE("stop strings: held back while they could match, cut at the first match") {
  StopStringMatcher m({"\nUser:", "###"});
  CHECK(m.push("Hello\nUs") == "Hello");
  CHECK(m.held_bytes() == 3);
  CHECK(m.push("ual") == "\nUsual");
  CHECK(m.push(" ##") == " ");
  CHECK_FALSE(m.matched());
  CHECK(m.push("#x") == "");
  CHECK(m.matched());
  CHECK(m.matched_index() == 1);
  CHECK(m.push("more") == "");  // nothing after a match
  CHECK(m.flush() == "");

  // A match inside one push, with text before it: the stop that completes
  // first wins ("bc" at byte 3) whatever the order of the list...
  StopStringMatcher e({"cd", "abcd", "bc"});
  CHECK(e.push("abcd") == "a");
  CHECK(e.matched_index() == 2);
  // ...so pieces give what one push gives.
  StopStringMatcher e2({"cd", "abcd", "bc"});
  CHECK(e2.push("ab") == "");
  CHECK(e2.push("cd") == "a");
  CHECK(e2.matched_index() == 2);
  // Completing at the same byte: the longest.
  StopStringMatcher t({"cd", "bcd"});
  CHECK(t.push("abcd") == "a");
  CHECK(t.matched_index() == 1);

  // The stream ends while text is held: flush returns it.
  StopStringMatcher f({"END"});
  CHECK(f.push("the EN") == "the ");
  CHECK(f.flush() == "EN");
  CHECK(f.push("no stop") == "no stop");  // flushed: a new stream

  // No stops: everything passes.
  StopStringMatcher none;
  CHECK(none.empty());
  CHECK(none.push("abc") == "abc");
}

TEST_CASE("stop strings: any chunking shows the same text, as early as the rule allows") {
  // Small alphabet, many overlaps ("aab" after "aaab"...), fixed seed.
  std::mt19937 rng(2024);
  const std::string alphabet = "ab c";
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int n_stops = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < n_stops; ++s) {
      std::string stop;
      const int sl = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < sl; ++i) stop += alphabet[rng() % 2];  // 'a'/'b': often present
      stops.push_back(stop);
    }
    StopStringMatcher m(stops);
    std::string so_far, shown;
    size_t at = 0;
    while (at < text.size() && !m.matched()) {
      const size_t n = std::min(text.size() - at, static_cast<size_t>(1 + rng() % 5));
      so_far += text.substr(at, n);
      at += n;
      shown += m.push(text.substr(at - n, n));
      INFO("trial " << trial << " text \"" << text << "\" after \"" << so_far << "\"");
      REQUIRE(shown == shown_after(so_far, stops));
    }
    shown += m.flush();
    // Whole stream: the text before the first match, or all of it.
    std::string want = text;
    cut_at_first_match(text, stops, &want);
    CHECK(shown == want);
  }
}

TEST_CASE("stop strings: behind the UTF-8 stream decoder, characters split across tokens stay whole") {
  // Byte tokens: "é" is 0xC3 0xA9, spelled "Ã" and "©" in GPT-2's byte map.
  auto tok = flashscope::Tokenizer::create({"c", "a", "f", "\xC3\x83", "\xC2\xA9", "!", "x"}, {}, {}, {});
  REQUIRE_MESSAGE(tok.ok(), tok.status().to_string());
  enum : int32_t { C, A, F, E1, E2, BANG, X };
  auto stream = [&](const std::vector<int32_t>& ids, const std::vector<std::string>& stops) {
    flashscope::StreamDecoder dec(*tok);
    StopStringMatcher m(stops);
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(m.push(dec.push(id)));
    out.push_back(m.push(dec.flush()) + m.flush());
    return out;
  };
  // "é" is held by the decoder (half a character), then by the matcher
  // (it could start "é!"), and shown when "x" rules the stop out.
  CHECK(stream({C, A, F, E1, E2, X}, {"é!"}) == std::vector<std::string>{"c", "a", "f", "", "", "éx", ""});
  // "é!" arrives over three tokens: nothing of it is shown.
  CHECK(stream({C, A, F, E1, E2, BANG, X}, {"é!"}) ==
        std::vector<std::string>{"c", "a", "f", "", "", "", "", ""});
  // The stream ends inside a character: U+FFFD, as without stop strings.
  CHECK(stream({C, E1}, {"é!"}) == std::vector<std::string>{"c", "", "\xEF\xBF\xBD"});

  CHECK(flashscope::check_stop_strings({"ok", "é!"}).ok());
  CHECK(flashscope::check_stop_strings({"ok", ""}).code() == StatusCode::kInvalidArgument);
  CHECK(flashscope::check_stop_strings({"\xA9x"}).code() == StatusCode::kInvalidArgument);
}

// --- sessions -------------------------------------------------------------------------

TEST_CASE("session: a stop string ends the reply and is never shown") {
  const Model model = synthetic_model();
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  auto free_run = Session::create(model);
  REQUIRE(free_run.ok());
  const Run full = generate(*free_run, prompt, varied(60));
  REQUIRE(full.stats.stop_reason == StopReason::kMaxTokens);
  REQUIRE(full.text.size() >= 30);

  // A stop string from the middle of the text, long enough to span tokens
  // (the synthetic vocabulary has one token per character).
  const std::string stop = full.text.substr(20, 4);
  const size_t at = full.text.find(stop);
  GenerateParams gp = varied(60);
  gp.stop_strings = {"never\x01", stop};
  auto s = Session::create(model);
  REQUIRE(s.ok());
  const Run cut = generate(*s, prompt, gp);
  CHECK(cut.stats.stop_reason == StopReason::kStopString);
  CHECK(cut.stats.stop_string == 1);
  CHECK(cut.text == full.text.substr(0, at));
  // The token that completed the stop string was the last one sampled; the
  // session holds every sampled token (the last one pending), like a stop
  // token, and they are the free run's.
  const int n = cut.stats.generated_tokens;
  const std::vector<int32_t> free_tokens = free_run->tokens();
  auto text_of_first = [&](int count) {
    flashscope::StreamDecoder dec(model.tokenizer());
    std::string out;
    for (int i = 0; i < count; ++i) {
      const int32_t id = free_tokens[prompt.size() + static_cast<size_t>(i)];
      if (!model.tokenizer().is_control(id)) out += dec.push(id);
    }
    return out;
  };
  CHECK(text_of_first(n).find(stop) != std::string::npos);
  CHECK(text_of_first(n - 1).find(stop) == std::string::npos);  // it ended at the first chance
  const std::vector<int32_t> want(free_tokens.begin(), free_tokens.begin() + 4 + n);
  CHECK(s->tokens() == want);
  // The callback saw every sampled token, the completing one too, and no
  // event carried the stop string's text.
  CHECK(static_cast<int>(cut.tokens.size()) == n);
  for (const std::string& t : cut.texts) CHECK(t.find(stop) == std::string::npos);

  // The next turn continues from the pending token.
  auto next = s->generate({9, 10}, varied(3), nullptr);
  REQUIRE(next.ok());
  CHECK(next->prompt_tokens == 3);
}

TEST_CASE("session: text held for a stop string that never completes arrives at the end") {
  const Model model = synthetic_model();
  auto a = Session::create(model);
  REQUIRE(a.ok());
  const Run full = generate(*a, {5, 6, 7, 8}, varied(40));
  REQUIRE(full.stats.stop_reason == StopReason::kMaxTokens);
  REQUIRE(!full.text.empty());

  // The reply's last character followed by a byte it never produces: held
  // from the last token on, then shown with token -1.
  GenerateParams gp = varied(40);
  gp.stop_strings = {full.text.substr(full.text.size() - 1) + "\x01"};
  auto b = Session::create(model);
  REQUIRE(b.ok());
  const Run held = generate(*b, {5, 6, 7, 8}, gp);
  CHECK(held.stats.stop_reason == StopReason::kMaxTokens);
  CHECK(held.text == full.text);
  REQUIRE(!held.events.empty());
  CHECK(held.events.back().token == -1);
  CHECK(held.texts.back() == full.text.substr(full.text.size() - 1));

  GenerateParams bad = varied(4);
  bad.stop_strings = {""};
  CHECK(b->generate({5}, bad, nullptr).status().code() == StatusCode::kInvalidArgument);
  bad.stop_strings = {"\xC3"};
  CHECK(b->generate({5}, bad, nullptr).status().code() == StatusCode::kInvalidArgument);
  CHECK(std::string(flashscope::stop_reason_name(StopReason::kStopString)) == "stop_string");
  CHECK(std::string(flashscope::stop_reason_name(StopReason::kCancelled)) == "cancelled");
}

TEST_CASE("session: cancel() from another thread stops after the current token, and the next turn continues") {
  const Model model = synthetic_model();
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  auto s = Session::create(model);
  REQUIRE(s.ok());
  // The callback holds token 3 until the other thread has cancelled, so the
  // stop point does not depend on scheduling.
  std::atomic<int> seen{0};
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    while (seen.load() < 3) std::this_thread::yield();
    s->cancel();
    cancelled.store(true);
  });
  int calls = 0;
  auto stats = s->generate(prompt, varied(200), [&](const TokenEvent& e) {
    ++calls;
    if (e.token >= 0 && seen.fetch_add(1) + 1 == 3) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!cancelled.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
    return true;
  });
  canceller.join();
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  CHECK(stats->stop_reason == StopReason::kCancelled);
  CHECK(stats->generated_tokens == 3);
  CHECK(s->n_tokens() == 4 + 3);  // the third token is kept pending

  // Consistent: the next generate continues the same cache, and the result
  // equals one uninterrupted session fed the whole conversation.
  const std::vector<int32_t> after_cancel = s->tokens();
  GenerateParams gp = varied(6);
  const Run turn2 = generate(*s, {30, 31}, gp);
  CHECK(turn2.stats.prompt_tokens == 1 + 2);
  CHECK(turn2.stats.stop_reason != StopReason::kCancelled);  // each generate starts uncancelled
  auto t = Session::create(model);
  REQUIRE(t.ok());
  std::vector<int32_t> whole = after_cancel;
  whole.push_back(30);
  whole.push_back(31);
  const Run again = generate(*t, whole, gp);
  CHECK(turn2.tokens == again.tokens);
  CHECK(s->tokens() == t->tokens());
}

TEST_CASE("session: cancel() inside the callback, and a cancel() with no generate running is forgotten") {
  const Model model = synthetic_model();
  auto s = Session::create(model);
  REQUIRE(s.ok());
  s->cancel();  // nothing running: the next generate starts uncancelled
  const Run first = generate(*s, {5, 6, 7, 8}, varied(5));
  CHECK(first.stats.stop_reason == StopReason::kMaxTokens);
  CHECK(first.stats.generated_tokens == 5);

  s->reset();
  int calls = 0;
  auto stats = s->generate({5, 6, 7, 8}, varied(50), [&](const TokenEvent&) {
    if (++calls == 2) s->cancel();
    return true;
  });
  REQUIRE(stats.ok());
  CHECK(stats->stop_reason == StopReason::kCancelled);
  CHECK(stats->generated_tokens == 2);
  CHECK(s->n_tokens() == 4 + 2);
}
