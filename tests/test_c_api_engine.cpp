// The C ABI's engine calls from C++, on synthetic models (random weights, a
// ChatML template), so they run without the real model:
//  * batched generation (flashscope_batch_*): replies stepped together are
//    the ones flashscope_session_generate gives each session alone (greedy
//    and sampled), each ends on its own (a full session, a cancel from
//    another thread) while the others go on, and the history takes every
//    reply. tests/c_api_test.c checks the same on SmolLM2 from C, with a
//    turn queued by a done callback;
//  * the model's recommended sampling, read at load (C and C++ agree);
//  * DRY, on by default in sessions and queues (the CLI's and the server's
//    default), ends a greedy loop; flashscope_session_set_dry and
//    flashscope_queue_set_dry switch it off.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/chat.hpp"
#include "flashscope/flashscope.h"
#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"
#include "support/synthetic_llama.hpp"
#include "support/temp_path.hpp"

namespace {

// A model file of the synthetic spec, named for this process: ctest runs
// each test case as a process of its own, side by side, and one rewriting a
// file another has mapped ends that one with SIGBUS.
std::string synthetic_model_path() {
  const std::string path = flashscope::testing::temp_path("test_c_api", "batch.gguf");
  flashscope::SyntheticModelSpec spec;
  spec.vocab = 128;
  spec.context = 256;
  const flashscope::Status written = flashscope::write_synthetic_model(spec, path);
  REQUIRE_MESSAGE(written.ok(), written.to_string());
  return path;
}

struct Loaded {
  flashscope_model* model = nullptr;
  Loaded() {
    const std::string path = synthetic_model_path();
    REQUIRE_MESSAGE(flashscope_model_load(path.c_str(), nullptr, &model) == FLASHSCOPE_OK, flashscope_last_error());
    std::remove(path.c_str());  // the weights stay mapped
  }
  ~Loaded() { flashscope_model_free(model); }
};

struct Reply {
  std::string text;
  int tokens = 0;
  int done_calls = 0;
  flashscope_status status = FLASHSCOPE_OK;
  flashscope_generate_stats stats{};
  std::atomic<int> seen{0};
};

int on_token(const char* text, size_t len, int32_t token, void* user) {
  auto* r = static_cast<Reply*>(user);
  r->text.append(text, len);
  if (token >= 0) {
    ++r->tokens;
    r->seen.fetch_add(1);
  }
  return 1;
}

void on_done(flashscope_status status, const flashscope_generate_stats* stats, void* user) {
  auto* r = static_cast<Reply*>(user);
  ++r->done_calls;
  r->status = status;
  r->stats = *stats;
}

flashscope_session* new_session(flashscope_model* model, int32_t n_ctx = 0) {
  flashscope_session_params sp = flashscope_session_default_params();
  sp.n_ctx = n_ctx;
  flashscope_session* s = nullptr;
  REQUIRE_MESSAGE(flashscope_session_create(model, &sp, &s) == FLASHSCOPE_OK, flashscope_last_error());
  return s;
}

const char* const kPrompts[] = {"hello there", "what is up", "tell me a story", "a b c d e", "zzz"};

// The reply flashscope_session_generate gives a fresh session to prompt i.
std::string alone(flashscope_model* model, int i, const flashscope_generate_params& gp) {
  flashscope_session* s = new_session(model);
  REQUIRE(flashscope_session_add_message(s, "user", kPrompts[i]) == FLASHSCOPE_OK);
  Reply r;
  REQUIRE(flashscope_session_generate(s, &gp, on_token, &r, nullptr) == FLASHSCOPE_OK);
  flashscope_session_free(s);
  return r.text;
}

}  // namespace

TEST_CASE("c api batch: sessions stepped together reply as each does alone, greedy and sampled") {
  Loaded m;
  for (const float temperature : {0.0f, 0.9f}) {
    CAPTURE(temperature);
    flashscope_generate_params gp = flashscope_generate_default_params();
    gp.max_tokens = 16;
    gp.temperature = temperature;
    gp.top_k = 20;
    gp.seed = 7;
    flashscope_batch* batch = nullptr;
    REQUIRE(flashscope_batch_create(&batch) == FLASHSCOPE_OK);
    std::vector<flashscope_session*> sessions;
    std::vector<Reply> replies(5);
    for (int i = 0; i < 5; ++i) {
      sessions.push_back(new_session(m.model));
      REQUIRE(flashscope_session_add_message(sessions[i], "user", kPrompts[i]) == FLASHSCOPE_OK);
      uint64_t id = 99;
      REQUIRE(flashscope_batch_add(batch, sessions[i], &gp, on_token, on_done, &replies[i], &id) == FLASHSCOPE_OK);
      CHECK(id == uint64_t(i));
    }
    CHECK(flashscope_batch_n_running(batch) == 5);
    int steps = 0;
    while (flashscope_batch_n_running(batch) > 0 && steps < 100) {
      REQUIRE(flashscope_batch_step(batch) == FLASHSCOPE_OK);
      ++steps;
    }
    CHECK(steps <= gp.max_tokens);  // a token of every reply per step
    for (int i = 0; i < 5; ++i) {
      CAPTURE(i);
      CHECK(replies[i].done_calls == 1);
      CHECK(replies[i].status == FLASHSCOPE_OK);
      CHECK(replies[i].stats.generated_tokens == replies[i].tokens);
      CHECK(replies[i].stats.n_tokens == flashscope_session_n_tokens(sessions[i]));
      CHECK(replies[i].text == alone(m.model, i, gp));
      CHECK(flashscope_session_n_messages(sessions[i]) == 2);
      size_t need = 0;
      REQUIRE(flashscope_session_message(sessions[i], 1, nullptr, 0, nullptr, nullptr, 0, &need) == FLASHSCOPE_OK);
      std::string content(need, '\0');
      REQUIRE(flashscope_session_message(sessions[i], 1, nullptr, 0, nullptr, content.data(), need, nullptr) ==
              FLASHSCOPE_OK);
      content.resize(need - 1);
      CHECK(content == replies[i].text);
    }
    flashscope_batch_free(batch);
    for (flashscope_session* s : sessions) flashscope_session_free(s);
  }
}

TEST_CASE("c api batch: a full session and a cancel from another thread end only their own reply") {
  Loaded m;
  flashscope_generate_params gp = flashscope_generate_default_params();
  gp.max_tokens = 40;
  gp.temperature = 0.8f;  // a long reply: sampled, so no end-of-turn token early is likely
  gp.seed = 3;
  flashscope_batch* batch = nullptr;
  REQUIRE(flashscope_batch_create(&batch) == FLASHSCOPE_OK);

  // The prompt's size, from a session that holds just the rendered turn.
  flashscope_session* probe = new_session(m.model);
  REQUIRE(flashscope_session_add_message(probe, "user", kPrompts[0]) == FLASHSCOPE_OK);
  flashscope_generate_params one = gp;
  one.max_tokens = 1;
  flashscope_generate_stats st{};
  REQUIRE(flashscope_session_generate(probe, &one, nullptr, nullptr, &st) == FLASHSCOPE_OK);
  const int32_t prompt_len = st.prompt_tokens;
  flashscope_session_free(probe);

  flashscope_session* full = new_session(m.model, prompt_len + 3);
  flashscope_session* cancelled = new_session(m.model);
  flashscope_session* other = new_session(m.model);
  Reply r_full, r_cancelled, r_other;
  for (flashscope_session* s : {full, cancelled, other}) {
    REQUIRE(flashscope_session_add_message(s, "user", kPrompts[0]) == FLASHSCOPE_OK);
  }
  REQUIRE(flashscope_batch_add(batch, full, &gp, on_token, on_done, &r_full, nullptr) == FLASHSCOPE_OK);
  REQUIRE(flashscope_batch_add(batch, cancelled, &gp, on_token, on_done, &r_cancelled, nullptr) == FLASHSCOPE_OK);
  REQUIRE(flashscope_batch_add(batch, other, &gp, on_token, on_done, &r_other, nullptr) == FLASHSCOPE_OK);

  std::atomic<bool> sent{false}, stepping{true};
  std::thread canceller([&] {
    while (r_cancelled.seen.load() < 2 && stepping.load()) std::this_thread::yield();
    flashscope_session_cancel(cancelled);
    sent.store(true);
  });
  // Steps wait for the other thread's cancel once the reply has 2 tokens,
  // so where it stops does not depend on scheduling.
  while (flashscope_batch_n_running(batch) > 0) {
    if (r_cancelled.seen.load() >= 2) {
      while (!sent.load()) std::this_thread::yield();
    }
    CHECK(flashscope_batch_step(batch) == FLASHSCOPE_OK);
  }
  stepping.store(false);  // a reply that ended before its second token is never cancelled
  canceller.join();

  CHECK(r_full.status == FLASHSCOPE_CONTEXT_FULL);
  CHECK(r_full.stats.stop_reason == FLASHSCOPE_STOP_CONTEXT_FULL);
  CHECK(r_full.stats.generated_tokens == 4);  // 3 fit, the 4th waits as the pending token
  REQUIRE(r_cancelled.tokens >= 2);  // seed 3 gives a long reply: the cancel came
  CHECK(r_cancelled.status == FLASHSCOPE_CANCELLED);
  CHECK(r_cancelled.stats.stop_reason == FLASHSCOPE_STOP_CANCELLED);
  CHECK(r_cancelled.stats.generated_tokens == 2);
  CHECK(r_other.tokens > 2);
  CHECK(r_other.status == FLASHSCOPE_OK);
  CHECK(r_other.text == alone(m.model, 0, gp));  // its neighbours' ends did not touch it
  for (Reply* r : {&r_full, &r_cancelled, &r_other}) CHECK(r->done_calls == 1);
  for (flashscope_session* s : {full, cancelled, other}) CHECK(flashscope_session_n_messages(s) == 2);

  // The session that was cancelled takes its next turn in the batch.
  REQUIRE(flashscope_session_add_message(cancelled, "user", "again") == FLASHSCOPE_OK);
  Reply again;
  REQUIRE(flashscope_batch_add(batch, cancelled, &gp, on_token, on_done, &again, nullptr) == FLASHSCOPE_OK);
  while (flashscope_batch_n_running(batch) > 0) REQUIRE(flashscope_batch_step(batch) == FLASHSCOPE_OK);
  CHECK(again.status == FLASHSCOPE_OK);
  CHECK(flashscope_session_n_messages(cancelled) == 4);
  // A full session is refused before anything is queued.
  REQUIRE(flashscope_session_add_message(full, "user", kPrompts[2]) == FLASHSCOPE_OK);
  CHECK(flashscope_batch_add(batch, full, &gp, nullptr, nullptr, nullptr, nullptr) == FLASHSCOPE_CONTEXT_FULL);
  CHECK(flashscope_batch_n_running(batch) == 0);

  flashscope_batch_free(batch);
  for (flashscope_session* s : {full, cancelled, other}) flashscope_session_free(s);
}

TEST_CASE("c api: the model's recommended sampling, read at load, fills only the fields it names") {
  const std::string path = flashscope::testing::temp_path("test_c_api", "sampling.gguf");
  flashscope::testing::SyntheticLlama spec;
  spec.extra = [](flashscope::testing::GgufBuilder& b) {
    b.add_f32("general.sampling.temp", 0.3f).add_i32("general.sampling.top_k", 17).add_f32("general.sampling.penalty_repeat", 1.2f);
  };
  {
    const auto bytes = spec.build();
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
  }
  flashscope_model* model = nullptr;
  REQUIRE_MESSAGE(flashscope_model_load(path.c_str(), nullptr, &model) == FLASHSCOPE_OK, flashscope_last_error());
  // The file is read once, at load: gone now, the values stay.
  std::remove(path.c_str());
  flashscope_generate_params gp = flashscope_generate_default_params();
  gp.top_p = 0.5f;  // the model names no top_p: the caller's stays
  REQUIRE(flashscope_model_sampling_defaults(model, &gp) == FLASHSCOPE_OK);
  CHECK(gp.temperature == doctest::Approx(0.3));
  CHECK(gp.top_k == 17);
  CHECK(gp.repetition_penalty == doctest::Approx(1.2));
  CHECK(gp.top_p == doctest::Approx(0.5));
  CHECK(gp.min_p == flashscope_generate_default_params().min_p);
  CHECK(gp.repeat_last_n == flashscope_generate_default_params().repeat_last_n);
  char source[64];
  size_t need = 0;
  REQUIRE(flashscope_model_sampling_source(model, source, sizeof source, &need) == FLASHSCOPE_OK);
  CHECK(std::string(source) == "gguf metadata");
  CHECK(need == sizeof "gguf metadata");
  CHECK(flashscope_model_sampling_defaults(nullptr, &gp) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_model_sampling_defaults(model, nullptr) == FLASHSCOPE_INVALID_ARGUMENT);
  // The whole defaults the CLI and the server answer with: the library's,
  // with the model's on top (its top_p is not named: the library's 0.95).
  flashscope_generate_params all;
  REQUIRE(flashscope_model_default_generate_params(model, &all) == FLASHSCOPE_OK);
  const flashscope::SamplingParams lib = flashscope::engine_sampling_defaults();
  CHECK(all.temperature == doctest::Approx(0.3));
  CHECK(all.top_k == 17);
  CHECK(all.repetition_penalty == doctest::Approx(1.2));
  CHECK(all.top_p == doctest::Approx(lib.top_p));
  CHECK(all.min_p == doctest::Approx(lib.min_p));
  CHECK(all.top_p < 1.0f);  // not the neutral struct's
  CHECK(all.max_tokens == flashscope_generate_default_params().max_tokens);
  CHECK(flashscope_model_default_generate_params(nullptr, &all) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_model_default_generate_params(model, nullptr) == FLASHSCOPE_INVALID_ARGUMENT);
  flashscope_model_free(model);

  // C++: the same values on the Model; a model that names nothing has none.
  auto file = flashscope::GgufFile::from_buffer(spec.build());
  REQUIRE(file.ok());
  auto loaded = flashscope::Model::from_gguf(std::move(file).value());
  REQUIRE(loaded.ok());
  CHECK(loaded->sampling_defaults().source == "gguf metadata");
  CHECK(loaded->sampling_defaults().fields == std::vector<std::string>{"temperature", "top_k", "repetition_penalty"});
  CHECK(loaded->sampling_defaults().params.top_k == 17);
  Loaded plain;
  flashscope_generate_params untouched = flashscope_generate_default_params();
  REQUIRE(flashscope_model_sampling_defaults(plain.model, &untouched) == FLASHSCOPE_OK);
  CHECK(untouched.temperature == 0.0f);
  REQUIRE(flashscope_model_sampling_source(plain.model, source, sizeof source, &need) == FLASHSCOPE_OK);
  CHECK(std::string(source).empty());
}

TEST_CASE("c api: DRY, on by default, ends the loop a greedy reply falls into, alone, in a batch and in a queue") {
  Loaded m;
  flashscope_generate_params gp = flashscope_generate_default_params();  // greedy
  gp.max_tokens = 40;
  // The most times one token follows itself in a reply's text (the random
  // model's loop is one byte token over and over).
  auto longest_run = [](const std::string& t) {
    size_t most = t.empty() ? 0 : 1, run = 1;
    for (size_t i = 1; i < t.size(); ++i) {
      run = t[i] == t[i - 1] ? run + 1 : 1;
      most = std::max(most, run);
    }
    return most;
  };
  std::string texts[2], queued[2];
  // The queue's prompt: the chat turn as the C++ engine renders it.
  std::vector<int32_t> prompt_ids;
  {
    auto cpp = flashscope::Model::load(synthetic_model_path());
    REQUIRE(cpp.ok());
    auto ids = flashscope::ChatFormat::for_model(*cpp).encode({{"user", kPrompts[1]}}, true);
    REQUIRE(ids.ok());
    prompt_ids = *ids;
  }
  for (int dry = 0; dry < 2; ++dry) {
    // dry 1: the session's default, as flashscope-cli and serve answer; dry 0: switched off.
    flashscope_session* s = new_session(m.model);
    if (!dry) REQUIRE(flashscope_session_set_dry(s, 0.0f, 1.75f, 2, -1) == FLASHSCOPE_OK);
    REQUIRE(flashscope_session_add_message(s, "user", kPrompts[1]) == FLASHSCOPE_OK);
    Reply r;
    REQUIRE(flashscope_session_generate(s, &gp, on_token, &r, nullptr) == FLASHSCOPE_OK);
    texts[dry] = r.text;
    // The same through a batch.
    flashscope_session* b = new_session(m.model);
    if (!dry) REQUIRE(flashscope_session_set_dry(b, 0.0f, 1.75f, 2, -1) == FLASHSCOPE_OK);
    REQUIRE(flashscope_session_add_message(b, "user", kPrompts[1]) == FLASHSCOPE_OK);
    flashscope_batch* batch = nullptr;
    REQUIRE(flashscope_batch_create(&batch) == FLASHSCOPE_OK);
    Reply rb;
    REQUIRE(flashscope_batch_add(batch, b, &gp, on_token, on_done, &rb, nullptr) == FLASHSCOPE_OK);
    while (flashscope_batch_n_running(batch) > 0) REQUIRE(flashscope_batch_step(batch) == FLASHSCOPE_OK);
    CHECK(rb.text == r.text);
    flashscope_batch_free(batch);
    flashscope_session_free(b);
    // A queue the same way, on the session's tokens (its prompt and reply).
    flashscope_queue* q = nullptr;
    REQUIRE(flashscope_queue_create(m.model, nullptr, &q) == FLASHSCOPE_OK);
    if (!dry) REQUIRE(flashscope_queue_set_dry(q, 0.0f, 1.75f, 2, -1) == FLASHSCOPE_OK);
    Reply rq;
    REQUIRE(flashscope_queue_submit(q, prompt_ids.data(), prompt_ids.size(), &gp, on_token, on_done, &rq, nullptr) ==
            FLASHSCOPE_OK);
    while (flashscope_queue_n_waiting(q) + flashscope_queue_n_running(q) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    flashscope_queue_free(q);  // after the reply's done callback
    CHECK(rq.done_calls == 1);
    CHECK(rq.status == FLASHSCOPE_OK);
    queued[dry] = rq.text;
    flashscope_session_free(s);
  }
  CHECK(longest_run(queued[0]) >= 30);
  CHECK(longest_run(queued[1]) <= 8);
  REQUIRE(texts[0].size() >= 30);
  CHECK(longest_run(texts[0]) >= 30);  // without DRY: one byte to the end
  CHECK(longest_run(texts[1]) <= 8);   // with it: no run outlasts the penalty
  flashscope_session* s = new_session(m.model);
  CHECK(flashscope_session_set_dry(s, -1.0f, 1.75f, 2, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_session_set_dry(s, 0.8f, 0.5f, 2, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_session_set_dry(s, 0.8f, 1.75f, 0, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_session_set_dry(nullptr, 0.8f, 1.75f, 2, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  flashscope_session_free(s);
  flashscope_queue* q = nullptr;
  REQUIRE(flashscope_queue_create(m.model, nullptr, &q) == FLASHSCOPE_OK);
  CHECK(flashscope_queue_set_dry(q, -1.0f, 1.75f, 2, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_queue_set_dry(q, 0.8f, 0.5f, 2, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_queue_set_dry(q, 0.8f, 1.75f, 0, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_queue_set_dry(nullptr, 0.8f, 1.75f, 2, -1) == FLASHSCOPE_INVALID_ARGUMENT);
  flashscope_queue_free(q);
}
