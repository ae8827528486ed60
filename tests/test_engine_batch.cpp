// Several sessions decoded together (the CPU backend; the CUDA cases are in
// test_model_cuda.cpp):
//
//  * Model::forward_batch: each row is the sequence's own decode step, bit
//    for bit (the batched matmuls skip the 4-token tiles that would sum in
//    another order), over several weight types and head layouts; malformed
//    batches are refused and no sequence moves;
//  * generate_batch / BatchGenerator: every reply is the one
//    Session::generate() gives the same session (greedy, sampled with
//    penalties, stop strings, a pending token from an earlier turn), replies
//    finish independently (max_tokens, a full cache, cancel()), a reply added
//    mid-way joins the batch, and refused requests change nothing;
//  * SmolLM2-135M (when its GGUF is present): batched greedy chat replies
//    equal the sessions' own.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/skip.hpp"
#include "support/synthetic_llama.hpp"

using namespace flashscope;
using flashscope::testing::SyntheticLlama;

namespace {

Model load(const SyntheticLlama& s) {
  auto file = GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

Sequence prefilled(const Model& m, const std::vector<int32_t>& prompt, int capacity = 0) {
  auto seq = m.new_sequence(capacity);
  REQUIRE_MESSAGE(seq.ok(), seq.status().to_string());
  const Status s = m.forward(*seq, prompt, {}, LogitsMode::kNone, nullptr);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return std::move(seq).value();
}

std::vector<int32_t> ids(int n, int first, int vocab) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(3 + (first + 7 * i) % (vocab - 3));
  return v;
}

// What a reply showed and how it ended.
struct Reply {
  std::vector<int32_t> tokens;
  std::string text;
  GenerateStats stats;
  Status status;
  std::vector<int32_t> conversation;  // the session's tokens() afterwards
};

TokenCallback collect(Reply* r) {
  return [r](const TokenEvent& e) {
    if (e.token >= 0) r->tokens.push_back(e.token);
    r->text += std::string(e.text);
    return true;
  };
}

void check_same(const Reply& got, const Reply& want) {
  CHECK(got.status.code() == want.status.code());
  CHECK(got.tokens == want.tokens);
  CHECK(got.text == want.text);
  CHECK(got.stats.stop_reason == want.stats.stop_reason);
  CHECK(got.stats.generated_tokens == want.stats.generated_tokens);
  CHECK(got.stats.prompt_tokens == want.stats.prompt_tokens);
  CHECK(got.stats.stop_token == want.stats.stop_token);
  CHECK(got.stats.stop_string == want.stats.stop_string);
  CHECK(got.conversation == want.conversation);
}

// One request of the tests below: a session's history (an earlier turn,
// run alone) and its reply's prompt and params.
struct Request {
  std::vector<int32_t> history;
  std::vector<int32_t> prompt;
  GenerateParams params;
  int capacity = 0;
  std::function<bool(Session&, const TokenEvent&)> on_token;  // extra behaviour (cancel, stop); true: go on
};

Session fresh_session(const Model& m, const Request& r) {
  auto s = Session::create(m, SessionOptions{r.capacity});
  REQUIRE(s.ok());
  if (!r.history.empty()) {
    GenerateParams gp;
    gp.max_tokens = 3;
    gp.stop_tokens = {-1};
    REQUIRE(s->generate(r.history, gp, nullptr).ok());  // leaves its last token pending
  }
  return std::move(s).value();
}

TokenCallback callback(Session* s, Reply* r, const Request& req) {
  TokenCallback base = collect(r);
  return [s, base, req](const TokenEvent& e) {
    const bool go_on = base(e);
    return req.on_token ? req.on_token(*s, e) && go_on : go_on;
  };
}

Reply run_alone(const Model& m, const Request& req) {
  Session s = fresh_session(m, req);
  Reply r;
  auto st = s.generate(req.prompt, req.params, callback(&s, &r, req));
  r.status = st.status();
  if (st.ok()) r.stats = st.value();
  r.conversation = s.tokens();
  return r;
}

std::vector<Reply> run_batched(const Model& m, const std::vector<Request>& reqs) {
  std::vector<Session> sessions;
  for (const Request& q : reqs) sessions.push_back(fresh_session(m, q));
  std::vector<Reply> replies(reqs.size());
  std::vector<BatchRequest> batch;
  for (size_t i = 0; i < reqs.size(); ++i) {
    batch.push_back({&sessions[i], reqs[i].prompt, reqs[i].params, callback(&sessions[i], &replies[i], reqs[i])});
  }
  auto results = generate_batch(batch);
  REQUIRE_MESSAGE(results.ok(), results.status().to_string());
  REQUIRE(results->size() == reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result<GenerateStats>& st = (*results)[i];
    replies[i].status = st.status();
    if (st.ok()) replies[i].stats = st.value();
    replies[i].conversation = sessions[i].tokens();
  }
  return replies;
}

GenerateParams greedy(int max_tokens) {
  GenerateParams gp;
  gp.max_tokens = max_tokens;
  gp.stop_tokens = {99};  // a filler token: replies run to max_tokens unless it is sampled
  return gp;
}

}  // namespace

// --- Model::forward_batch -------------------------------------------------------------

TEST_CASE("forward_batch: each row is the sequence's own decode step, bit for bit (CPU)") {
  // The shared variants but the last (its 300-token vocabulary adds nothing here).
  std::vector<std::pair<const char*, SyntheticLlama>> variants;
  for (const auto& v : flashscope::testing::synthetic_variants()) variants.push_back({v.name, v.s});
  variants.pop_back();
  for (const auto& [name, spec] : variants) {
    CAPTURE(name);
    const Model m = load(spec);
    for (int batch : {1, 3, 6}) {
      CAPTURE(batch);
      // Sequences of different lengths, twice: one set decodes together, the other alone.
      std::vector<Sequence> together, alone;
      for (int i = 0; i < batch; ++i) {
        const std::vector<int32_t> prompt = ids(2 + 5 * i, 11 * i, spec.vocab);
        together.push_back(prefilled(m, prompt));
        alone.push_back(prefilled(m, prompt));
      }
      std::vector<Sequence*> ptrs;
      for (Sequence& s : together) ptrs.push_back(&s);
      for (int step = 0; step < 3; ++step) {
        const std::vector<int32_t> next = ids(batch, 40 + step, spec.vocab);
        std::vector<float> rows;
        const Status st = m.forward_batch(ptrs, next, &rows);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        REQUIRE(rows.size() == static_cast<size_t>(batch) * static_cast<size_t>(spec.vocab));
        for (int i = 0; i < batch; ++i) {
          std::vector<float> want;
          REQUIRE(m.forward(alone[static_cast<size_t>(i)], {next[static_cast<size_t>(i)]}, {}, LogitsMode::kLast, &want).ok());
          CHECK(std::memcmp(want.data(), rows.data() + static_cast<size_t>(i) * spec.vocab,
                            want.size() * sizeof(float)) == 0);
        }
      }
      for (int i = 0; i < batch; ++i) CHECK(together[static_cast<size_t>(i)].tokens() == alone[static_cast<size_t>(i)].tokens());
    }
  }
}

TEST_CASE("forward_batch: without logits the caches still advance, and malformed batches change nothing") {
  const SyntheticLlama spec;
  const Model m = load(spec);
  Sequence a = prefilled(m, {5, 6, 7}), b = prefilled(m, {8, 9}), a2 = prefilled(m, {5, 6, 7});
  // No logits: the LM head is skipped, the K/V are written.
  REQUIRE(m.forward_batch({&a, &b}, {10, 11}, nullptr).ok());
  CHECK(a.n_tokens() == 4);
  CHECK(b.n_tokens() == 3);
  REQUIRE(m.forward(a2, {10}, {}, LogitsMode::kNone, nullptr).ok());
  std::vector<float> rows, want;
  REQUIRE(m.forward_batch({&a, &b}, {12, 13}, &rows).ok());
  REQUIRE(m.forward(a2, {12}, {}, LogitsMode::kLast, &want).ok());
  CHECK(std::memcmp(want.data(), rows.data(), want.size() * sizeof(float)) == 0);

  const Model other = load(spec);
  Sequence foreign = prefilled(other, {5});
  Sequence full = prefilled(m, {5, 6, 7, 8}, 4);
  Sequence empty;
  const std::vector<std::pair<const char*, std::function<Status(std::vector<float>*)>>> bad = {
      {"no sequences", [&](std::vector<float>* l) { return m.forward_batch({}, {}, l); }},
      {"counts differ", [&](std::vector<float>* l) { return m.forward_batch({&a, &b}, {1}, l); }},
      {"a null sequence", [&](std::vector<float>* l) { return m.forward_batch({&a, nullptr}, {1, 2}, l); }},
      {"an empty sequence", [&](std::vector<float>* l) { return m.forward_batch({&a, &empty}, {1, 2}, l); }},
      {"a sequence twice", [&](std::vector<float>* l) { return m.forward_batch({&a, &b, &a}, {1, 2, 3}, l); }},
      {"another model's sequence", [&](std::vector<float>* l) { return m.forward_batch({&a, &foreign}, {1, 2}, l); }},
      {"an id past the vocabulary", [&](std::vector<float>* l) { return m.forward_batch({&a, &b}, {1, spec.vocab}, l); }},
      {"a negative id", [&](std::vector<float>* l) { return m.forward_batch({&a, &b}, {-1, 2}, l); }},
      {"a full cache", [&](std::vector<float>* l) { return m.forward_batch({&a, &full, &b}, {1, 2, 3}, l); }},
      {"an unloaded model", [&](std::vector<float>* l) { return Model().forward_batch({&a}, {1}, l); }},
  };
  for (const auto& [what, call] : bad) {
    CAPTURE(what);
    std::vector<float> logits = {42.0f};
    const Status s = call(&logits);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(!s.message().empty());
    CHECK(logits == std::vector<float>{42.0f});
    CHECK(a.n_tokens() == 5);
    CHECK(b.n_tokens() == 4);
    CHECK(full.n_tokens() == 4);
  }
  // The full sequence is named, so a caller can drop it and run the others.
  const Status s = m.forward_batch({&a, &full, &b}, {1, 2, 3}, &rows);
  CHECK(s.message().find("sequence 1") != std::string::npos);
  CHECK(m.forward_batch({&a, &b}, {1, 2}, &rows).ok());
}

// --- generate_batch / BatchGenerator -------------------------------------------------------

TEST_CASE("generate_batch: every reply is the one Session::generate gives (greedy, sampled, penalties, stop strings, a pending turn)") {
  const Model m = load(SyntheticLlama{});
  std::vector<Request> reqs(6);
  reqs[0].prompt = {5, 6, 7, 8};
  reqs[0].params = greedy(12);
  reqs[1].prompt = {10, 11};
  reqs[1].params = greedy(3);
  reqs[2].prompt = ids(7, 20, 100);
  reqs[2].params = greedy(9);
  reqs[2].params.sampling.temperature = 0.8f;
  reqs[2].params.sampling.top_k = 20;
  reqs[2].params.sampling.repetition_penalty = 1.3f;
  reqs[2].params.sampling.seed = 7;
  reqs[3].history = {30, 31};
  reqs[3].prompt = {32};
  reqs[3].params = greedy(7);
  reqs[3].params.stop_strings = {"q", "zz"};
  reqs[3].params.sampling.presence_penalty = 1.2f;  // counted over the reply alone, not the history
  reqs[4].prompt = ids(5, 3, 100);
  reqs[4].params = greedy(10);
  reqs[4].params.sampling.temperature = 1.0f;
  reqs[4].params.sampling.top_p = 0.9f;
  reqs[4].params.sampling.min_p = 0.05f;
  reqs[4].params.sampling.seed = 3;
  reqs[4].params.sampling.presence_penalty = 0.7f;
  reqs[4].params.sampling.frequency_penalty = -0.4f;
  reqs[5].prompt = {40};
  reqs[5].params = greedy(0);  // prefill only
  const std::vector<Reply> batched = run_batched(m, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    const Reply want = run_alone(m, reqs[i]);
    REQUIRE_MESSAGE(want.status.ok(), want.status.to_string());
    check_same(batched[i], want);
  }
  // Replies of different lengths: they finished on their own.
  CHECK(batched[1].stats.generated_tokens <= 3);
  CHECK(batched[5].stats.generated_tokens == 0);
  CHECK(batched[3].stats.prompt_tokens == 2);  // the pending token of the earlier turn, then the prompt
}

TEST_CASE("generate_batch: a full cache ends one reply with kContextFull, the others go on") {
  const Model m = load(SyntheticLlama{});
  std::vector<Request> reqs(3);
  for (Request& r : reqs) {
    r.prompt = ids(4, static_cast<int>(&r - reqs.data()) * 13, 100);
    r.params = greedy(20);
    r.params.stop_tokens = {-1};
  }
  reqs[1].capacity = 10;
  const std::vector<Reply> batched = run_batched(m, reqs);
  CHECK(batched[1].stats.stop_reason == StopReason::kContextFull);
  CHECK(batched[1].conversation.size() == 11);  // 10 cached + the pending last sample
  CHECK(batched[0].stats.stop_reason == StopReason::kMaxTokens);
  CHECK(batched[2].stats.generated_tokens == 20);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    check_same(batched[i], run_alone(m, reqs[i]));
  }
}

TEST_CASE("BatchGenerator: cancel() stops one reply, a reply added mid-way joins, results and refusals") {
  const Model m = load(SyntheticLlama{});
  std::vector<Request> reqs(3);
  reqs[0].prompt = {5, 6, 7};
  reqs[0].params = greedy(12);
  reqs[0].on_token = [](Session& s, const TokenEvent& e) {
    if (e.index == 2) s.cancel();  // stops after this token, which stays pending
    return true;
  };
  reqs[1].prompt = {9, 10, 11, 12};
  reqs[1].params = greedy(10);
  reqs[2].prompt = {13, 14};
  reqs[2].params = greedy(6);

  std::vector<Session> sessions;
  for (const Request& q : reqs) sessions.push_back(fresh_session(m, q));
  std::vector<Reply> got(reqs.size());
  BatchGenerator g;
  auto id0 = g.add(sessions[0], reqs[0].prompt, reqs[0].params, callback(&sessions[0], &got[0], reqs[0]));
  auto id1 = g.add(sessions[1], reqs[1].prompt, reqs[1].params, callback(&sessions[1], &got[1], reqs[1]));
  REQUIRE(id0.ok());
  REQUIRE(id1.ok());
  CHECK(id0.value() == 0);
  CHECK(id1.value() == 1);
  CHECK(g.running() == 2);
  CHECK(!g.finished(0));
  CHECK(g.result(0).status().code() == StatusCode::kInvalidArgument);  // still running
  CHECK(g.result(7).status().code() == StatusCode::kInvalidArgument);

  // Refused, each leaving its session as it was.
  CHECK(g.add(sessions[0], {1}, greedy(2), nullptr).status().code() == StatusCode::kInvalidArgument);  // busy
  GenerateParams bad = greedy(2);
  bad.sampling.top_p = 0.0f;
  CHECK(g.add(sessions[2], {1}, bad, nullptr).status().code() == StatusCode::kInvalidArgument);
  CHECK(g.add(sessions[2], std::vector<int32_t>(600, 5), greedy(2), nullptr).status().code() ==
        StatusCode::kInvalidArgument);  // longer than the context (512)
  const Model other = load(SyntheticLlama{});
  auto foreign = Session::create(other);
  REQUIRE(foreign.ok());
  CHECK(g.add(*foreign, {1}, greedy(2), nullptr).status().code() == StatusCode::kInvalidArgument);
  Session unloaded;
  CHECK(g.add(unloaded, {1}, greedy(2), nullptr).status().code() == StatusCode::kInvalidArgument);
  CHECK(sessions[2].n_tokens() == 0);
  CHECK(g.size() == 2);

  REQUIRE(g.step().ok());
  REQUIRE(g.step().ok());
  auto id2 = g.add(sessions[2], reqs[2].prompt, reqs[2].params, callback(&sessions[2], &got[2], reqs[2]));
  REQUIRE(id2.ok());
  int steps = 2;
  while (!g.done()) {
    REQUIRE(g.step().ok());
    ++steps;
  }
  CHECK(steps < 20);
  CHECK(g.step().ok());  // nothing left: a no-op
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(g.finished(i));
    auto r = g.result(i);
    got[static_cast<size_t>(i)].status = r.status();
    if (r.ok()) got[static_cast<size_t>(i)].stats = r.value();
    got[static_cast<size_t>(i)].conversation = sessions[static_cast<size_t>(i)].tokens();
    check_same(got[static_cast<size_t>(i)], run_alone(m, reqs[static_cast<size_t>(i)]));
  }
  CHECK(got[0].stats.stop_reason == StopReason::kCancelled);
  CHECK(got[0].stats.generated_tokens == 3);

  // A finished session can take the next turn in the same generator.
  REQUIRE(g.add(sessions[0], {20}, greedy(2), nullptr).ok());
  while (!g.done()) REQUIRE(g.step().ok());
  CHECK(g.result(3).ok());
}

TEST_CASE("generate_batch: refused batches run nothing; a refused request does not stop the others") {
  const Model m = load(SyntheticLlama{});
  const Model other = load(SyntheticLlama{});
  auto a = Session::create(m), b = Session::create(m), c = Session::create(other);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(generate_batch({}).status().code() == StatusCode::kInvalidArgument);
  CHECK(generate_batch({{nullptr, {1}, greedy(2), nullptr}}).status().code() == StatusCode::kInvalidArgument);
  CHECK(generate_batch({{&*a, {1}, greedy(2), nullptr}, {&*a, {2}, greedy(2), nullptr}}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(generate_batch({{&*a, {1}, greedy(2), nullptr}, {&*c, {2}, greedy(2), nullptr}}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(a->n_tokens() == 0);
  CHECK(c->n_tokens() == 0);

  GenerateParams bad = greedy(2);
  bad.sampling.min_p = 2.0f;
  auto results = generate_batch({{&*a, {1, 2}, bad, nullptr}, {&*b, {3, 4}, greedy(4), nullptr}});
  REQUIRE(results.ok());
  CHECK((*results)[0].status().code() == StatusCode::kInvalidArgument);
  CHECK(a->n_tokens() == 0);
  REQUIRE((*results)[1].ok());
  CHECK((*results)[1]->generated_tokens >= 1);
  CHECK(b->n_tokens() == 2 + (*results)[1]->generated_tokens);
}

TEST_CASE("generate_batch on SmolLM2-135M: batched greedy chat replies equal the sessions' own (CPU)") {
  const std::string path = find_default_model();
  if (path.empty()) {
    MESSAGE("skipped: the default model is absent (scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  auto model = Model::load(path);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  const std::vector<std::string> questions = {"What is a GPU?", "Name a color.", "Say hello to a knight."};
  std::vector<Request> reqs;
  for (const std::string& q : questions) {
    Request r;
    r.prompt = encode_chatml(model->tokenizer(), {{"user", q}}, true);
    r.params.max_tokens = 8;
    r.capacity = 256;
    reqs.push_back(r);
  }
  const std::vector<Reply> batched = run_batched(*model, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(questions[i]);
    const Reply want = run_alone(*model, reqs[i]);
    MESSAGE("\"" << questions[i] << "\" -> \"" << batched[i].text << "\"");
    check_same(batched[i], want);
  }
}
