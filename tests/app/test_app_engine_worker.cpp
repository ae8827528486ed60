// The app's engine thread on a tiny synthetic llama: an answer streamed
// through the snapshot equals a direct Session run, follow-ups and
// regenerations reuse the KV cache up to where the conversation changed,
// stop and reset take effect, and failures arrive as messages.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "chat/engine_worker.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/gpu.hpp"
#include "support/synthetic_llama.hpp"
#include "viz/token_matrix.hpp"

using flashscope::ChatMessage;
using flashscope::GenerateParams;
using flashscope::Model;
using flashscope::StopReason;
using flashscope::app::EngineRequest;
using flashscope::app::EngineSnapshot;
using flashscope::app::EngineState;
using flashscope::app::EngineWorker;

namespace {

Model synthetic_model(flashscope::Device device = flashscope::Device::kCpu) {
  flashscope::testing::SyntheticLlama s;
  auto file = flashscope::GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  flashscope::ModelOptions options;
  options.device = device;
  auto model = Model::from_gguf(std::move(file).value(), options);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

GenerateParams greedy(int max_tokens) {
  GenerateParams gp;
  gp.max_tokens = max_tokens;
  gp.stop_tokens = {99};  // a filler token: replies run to max_tokens unless greedy picks it
  return gp;
}

EngineRequest generate_request(uint64_t id, std::vector<ChatMessage> messages, GenerateParams params) {
  EngineRequest r;
  r.kind = EngineRequest::Kind::kGenerate;
  r.id = id;
  r.messages = std::move(messages);
  r.params = params;
  return r;
}

// Polls the snapshot (as the UI does each frame) until `done` holds; fails after 20 s.
template <typename Pred>
EngineSnapshot wait_for(const EngineWorker& worker, Pred done) {
  EngineSnapshot snap;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    worker.snapshot(&snap);
    if (done(snap)) return snap;
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "the engine worker did not finish in 20 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

EngineSnapshot wait_answer(const EngineWorker& worker, uint64_t id) {
  return wait_for(worker, [id](const EngineSnapshot& s) { return s.answer_id == id && s.answer_done; });
}

}  // namespace

TEST_CASE("engine worker: an answer streams through the snapshot and equals a direct Session run") {
  const Model model = synthetic_model();
  const std::vector<ChatMessage> messages = {{"system", "be short"}, {"user", "hello there"}};
  const GenerateParams gp = greedy(12);

  // The reference: the same prompt through a Session on this thread.
  auto session = flashscope::Session::create(model);
  REQUIRE(session.ok());
  const auto ids = flashscope::encode_chatml(model.tokenizer(), messages, true, "");
  std::string want;
  auto stats = session->generate(ids, gp, [&](const flashscope::TokenEvent& e) {
    want += e.text;
    return true;
  });
  REQUIRE(stats.ok());

  EngineWorker worker;
  worker.start(model);
  const EngineSnapshot ready = wait_for(worker, [](const EngineSnapshot& s) { return s.state != EngineState::kLoading; });
  CHECK(ready.state == EngineState::kIdle);
  CHECK(ready.context_capacity == model.config().context_length);
  CHECK(ready.config.n_layers == model.config().n_layers);

  worker.submit(generate_request(1, messages, gp));
  const EngineSnapshot s = wait_answer(worker, 1);
  CHECK(s.answer_error.empty());
  CHECK(s.answer_text == want);
  CHECK(s.stats.generated_tokens == stats->generated_tokens);
  CHECK(s.answer_reused_tokens == 0);
  CHECK(s.answer_prompt_tokens == static_cast<int>(ids.size()));
  CHECK(s.context_used == session->n_tokens());
  CHECK(s.state == EngineState::kIdle);
  // The capture of the model's own attention follows the answer within the
  // request; then the worker is idle.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (worker.busy() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_FALSE(worker.busy());
}

TEST_CASE("engine worker: follow-ups reuse the cache, regenerate and edits cut it back where the text changed") {
  const Model model = synthetic_model();
  EngineWorker worker;
  worker.start(model);
  std::vector<ChatMessage> messages = {{"system", "sys"}, {"user", "first question"}};
  const auto first_ids = flashscope::encode_chatml(model.tokenizer(), messages, true, "");
  worker.submit(generate_request(1, messages, greedy(6)));
  EngineSnapshot s = wait_answer(worker, 1);
  REQUIRE(s.answer_error.empty());

  // A follow-up: everything up to the first answer is already cached.
  messages.push_back({"assistant", s.answer_text});
  messages.push_back({"user", "second"});
  const auto second_ids = flashscope::encode_chatml(model.tokenizer(), messages, true, "");
  worker.submit(generate_request(2, messages, greedy(6)));
  s = wait_answer(worker, 2);
  REQUIRE(s.answer_error.empty());
  CHECK(s.answer_reused_tokens >= static_cast<int>(first_ids.size()));
  CHECK(s.answer_reused_tokens + s.answer_prompt_tokens == static_cast<int>(second_ids.size()));

  // Regenerate: the same conversation again; only its last token is fed anew.
  worker.submit(generate_request(3, messages, greedy(6)));
  s = wait_answer(worker, 3);
  REQUIRE(s.answer_error.empty());
  CHECK(s.answer_reused_tokens == static_cast<int>(second_ids.size()) - 1);
  CHECK(s.answer_prompt_tokens == 1);

  // Edit the first user message: the cache is kept only up to the edit.
  std::vector<ChatMessage> edited = {{"system", "sys"}, {"user", "first questiom"}};
  worker.submit(generate_request(4, edited, greedy(6)));
  s = wait_answer(worker, 4);
  REQUIRE(s.answer_error.empty());
  CHECK(s.answer_reused_tokens < static_cast<int>(first_ids.size()));
  CHECK(s.answer_reused_tokens > 0);  // the system prompt is still shared

  // Reset empties the cache.
  const uint64_t done_before = s.requests_done;
  worker.reset(5);
  s = wait_for(worker, [&](const EngineSnapshot& x) { return x.requests_done > done_before; });
  CHECK(s.context_used == 0);
}

TEST_CASE("engine worker: stop ends the running answer, and a stopped request never starts") {
  const Model model = synthetic_model();
  EngineWorker worker;
  worker.start(model);
  const std::vector<ChatMessage> messages = {{"user", "tell me a long story"}};
  worker.submit(generate_request(1, messages, greedy(400)));
  worker.submit(generate_request(2, messages, greedy(400)));
  worker.stop();  // covers both: 1 stops at its next token, 2 is answered "stopped" unrun
  const EngineSnapshot s1 = wait_for(worker, [](const EngineSnapshot& s) { return s.answer_id >= 1 && s.answer_done; });
  // How many tokens 1 sampled before stop() depends on when this thread ran
  // (on a loaded machine the worker can sample a dozen first); that it was
  // stopped, long before its 400, does not.
  CHECK(s1.stats.stop_reason == StopReason::kCallback);
  CHECK(s1.answer_tokens < 400);
  const EngineSnapshot s2 = wait_answer(worker, 2);
  CHECK(s2.answer_error.empty());
  CHECK(s2.stats.stop_reason == StopReason::kCallback);
  CHECK(s2.answer_tokens == 0);
  CHECK(s2.answer_text.empty());

  // Later requests are not affected by the earlier stop.
  worker.submit(generate_request(3, messages, greedy(5)));
  const EngineSnapshot s3 = wait_answer(worker, 3);
  CHECK(s3.stats.stop_reason != StopReason::kCallback);
  CHECK(s3.stats.generated_tokens >= 1);
}

TEST_CASE("engine worker: a conversation longer than the context is refused with a message") {
  EngineWorker worker;
  worker.start(synthetic_model(), /*context=*/48);
  worker.submit(generate_request(1, {{"user", std::string(200, 'x')}}, greedy(4)));
  const EngineSnapshot s = wait_answer(worker, 1);
  CHECK(s.context_capacity == 48);
  CHECK(s.answer_error.find("context holds 48") != std::string::npos);
  CHECK(s.state == EngineState::kIdle);
}

TEST_CASE("engine worker: a model that cannot be loaded says why, and requests get that answer") {
  EngineWorker worker;
  EngineWorker::Options options;
  options.model_path = "/nonexistent/model.gguf";
  worker.start(options);
  const EngineSnapshot s = wait_for(worker, [](const EngineSnapshot& x) { return x.state != EngineState::kLoading; });
  CHECK(s.state == EngineState::kFailed);
  CHECK(s.load_error.find("/nonexistent/model.gguf") != std::string::npos);
  worker.submit(generate_request(1, {{"user", "hi"}}, greedy(4)));
  const EngineSnapshot a = wait_answer(worker, 1);
  CHECK(a.answer_error.rfind("no model", 0) == 0);
}

TEST_CASE("engine worker: an override template renders the prompt; a broken one falls back with a notice") {
  const Model model = synthetic_model();
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  {
    EngineWorker worker;
    worker.start(model, 0, "{{ messages[0].content }}!");
    worker.submit(generate_request(1, messages, greedy(2)));
    const EngineSnapshot s = wait_answer(worker, 1);
    CHECK(s.answer_error.empty());
    CHECK(s.chat_format == flashscope::ChatFormatKind::kTemplate);
    CHECK(s.chat_format_notice.empty());
    CHECK(s.answer_prompt_tokens == 3);  // "h", "i", "!": byte tokens
  }
  {
    EngineWorker worker;
    worker.start(model, 0, "{% include 'x' %}");
    worker.submit(generate_request(1, messages, greedy(2)));
    const EngineSnapshot s = wait_answer(worker, 1);
    CHECK(s.answer_error.empty());
    CHECK(s.chat_format == flashscope::ChatFormatKind::kChatML);
    CHECK(s.chat_format_notice.find("include") != std::string::npos);
    CHECK(s.chat_format_fallback);
  }
}

TEST_CASE("engine worker: a model without a chat template answers in a question-and-answer transcript") {
  flashscope::testing::SyntheticLlama spec;
  spec.skip_keys.insert("tokenizer.chat_template");
  auto file = flashscope::GgufFile::from_buffer(spec.build());
  REQUIRE(file.ok());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE(model.ok());
  EngineWorker worker;
  worker.start(*model);
  worker.submit(generate_request(1, {{"system", "left out"}, {"user", "Once upon"}}, greedy(2)));
  const EngineSnapshot s = wait_answer(worker, 1);
  CHECK(s.answer_error.empty());
  CHECK(s.chat_format == flashscope::ChatFormatKind::kTranscript);
  CHECK(s.chat_format_notice.find("no chat template") != std::string::npos);
  CHECK_FALSE(s.chat_format_fallback);  // how a base model runs, not a fallback
  // Byte tokens: the question's framing and no system message.
  CHECK(s.answer_prompt_tokens == static_cast<int>(std::string("Question: Once upon\nAnswer:").size()));
}

TEST_CASE("engine worker: after an answer the model's own attention arrives, labelled; a new layer or head recaptures") {
  const Model model = synthetic_model();
  EngineWorker worker;
  worker.start(model);
  wait_for(worker, [](const EngineSnapshot& s) { return s.state != EngineState::kLoading; });
  worker.submit(generate_request(1, {{"user", "hello there"}}, greedy(6)));
  wait_answer(worker, 1);
  const EngineSnapshot first = wait_for(worker, [](const EngineSnapshot& s) { return s.attention_serial >= 1; });
  REQUIRE(static_cast<bool>(first.attention_trace));
  CHECK(first.attention_error.empty());
  const flashscope::Trace& t = *first.attention_trace;
  CHECK(t.tokens.layer == 0);
  CHECK(t.meta.traced_head == 0);
  CHECK(t.meta.kv_len == first.context_used - 1);  // the last sampled token is not fed yet
  CHECK(t.tokens.keys.size() == size_t(t.meta.kv_len));
  CHECK(t.tokens.keys[0].text == "<|im_start|>");
  CHECK(first.attention_note.find("layer 0, head 0") != std::string::npos);
  // Every head of the layer summarised, in head order; the traced head's mass on the first token is a share.
  REQUIRE(first.attention_heads.size() == size_t(first.config.n_heads));
  for (size_t h = 0; h < first.attention_heads.size(); ++h) {
    CHECK(first.attention_heads[h].head == int(h));
    CHECK(first.attention_heads[h].rows > 0);
    CHECK(first.attention_heads[h].first_token_mass >= 0.0);
    CHECK(first.attention_heads[h].first_token_mass <= 1.0 + 1e-9);
  }

  // A slider dragged over several heads: the last target is captured.
  worker.set_attention_target(1, 1);
  worker.set_attention_target(1, 2);
  worker.set_attention_target(1, 3);
  const EngineSnapshot next = wait_for(worker, [&](const EngineSnapshot& s) {
    return s.attention_trace && s.attention_trace->meta.traced_head == 3;
  });
  CHECK(next.attention_trace->tokens.layer == 1);
  CHECK(next.attention_serial > first.attention_serial);
  CHECK(next.attention_error.empty());
}

TEST_CASE("engine worker: the snapshot says where the answer's decode steps begin; a new chat forgets it") {
  const Model model = synthetic_model();
  EngineWorker worker;
  worker.start(model);
  wait_for(worker, [](const EngineSnapshot& s) { return s.state != EngineState::kLoading; });
  EngineSnapshot loaded;
  worker.snapshot(&loaded);
  CHECK(loaded.attention_answer_first == -1);
  worker.submit(generate_request(1, {{"user", "hello there"}}, greedy(6)));
  wait_answer(worker, 1);
  const EngineSnapshot s = wait_for(worker, [](const EngineSnapshot& x) { return x.attention_serial >= 1; });
  REQUIRE(static_cast<bool>(s.attention_trace));
  // The prompt's tokens end where the steps begin; each sampled token but the
  // last (not fed yet) had a step, and its row is in the trace.
  CHECK(s.attention_answer_first == s.answer_reused_tokens + s.answer_prompt_tokens);
  const std::vector<int> steps = flashscope::viz::rows_from_key(*s.attention_trace, s.attention_answer_first);
  CHECK(static_cast<int>(steps.size()) == s.answer_tokens - 1);
  const uint64_t done_before = s.requests_done;
  worker.reset(2);
  const EngineSnapshot after =
      wait_for(worker, [&](const EngineSnapshot& x) { return x.requests_done > done_before; });
  CHECK(after.attention_answer_first == -1);
}

// The decode strip shows each step as the decode kernel ran it: on CUDA the
// capture traces every step again alone (its split-KV plan), and the snapshot
// carries those traces, one per answer row, in the rows' order; the strip's
// matrix takes every row from them. On the CPU the trace's rows are the
// steps' own numbers and the snapshot carries none.
TEST_CASE("engine worker: the answer's decode steps come with their own traces on CUDA, none on the CPU") {
  for (const flashscope::Device device : {flashscope::Device::kCpu, flashscope::Device::kCuda}) {
    CAPTURE(static_cast<int>(device));
    if (device == flashscope::Device::kCuda && flashscope::testing::skip_without_gpu()) return;
    const Model model = synthetic_model(device);
    EngineWorker worker;
    worker.start(model);
    wait_for(worker, [](const EngineSnapshot& s) { return s.state != EngineState::kLoading; });
    GenerateParams gp = greedy(7);
    gp.stop_tokens = {-5};  // never sampled: seven tokens, six decode steps
    worker.submit(generate_request(1, {{"user", "hello there"}}, gp));
    wait_answer(worker, 1);
    const EngineSnapshot s = wait_for(worker, [](const EngineSnapshot& x) { return x.attention_serial >= 1; });
    REQUIRE(static_cast<bool>(s.attention_trace));
    REQUIRE_MESSAGE(s.attention_error.empty(), s.attention_error);
    REQUIRE(s.answer_tokens == 7);
    const flashscope::Trace& t = *s.attention_trace;
    const std::vector<int> steps = flashscope::viz::rows_from_key(t, s.attention_answer_first);
    REQUIRE(static_cast<int>(steps.size()) == s.answer_tokens - 1);
    REQUIRE(!steps.empty());
    const std::vector<flashscope::Trace> none;
    const std::vector<flashscope::Trace>& own = s.attention_steps ? *s.attention_steps : none;
    const flashscope::viz::TokenMatrix m = flashscope::viz::build_token_matrix(t);
    int from_steps = -1;
    const flashscope::viz::TokenMatrix strip = flashscope::viz::step_rows_matrix(m, t, steps, own, &from_steps);
    REQUIRE(strip.rows == static_cast<int>(steps.size()));
    if (device == flashscope::Device::kCpu) {
      CHECK(own.empty());
      CHECK(from_steps == 0);
      continue;
    }
    REQUIRE(own.size() == steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      CAPTURE(i);
      REQUIRE(own[i].tokens.row_keys.size() == 1);
      CHECK(own[i].tokens.row_keys[0] == t.tokens.row_keys[static_cast<size_t>(steps[i])]);
      CHECK(own[i].meta.traced_head == t.meta.traced_head);
    }
    CHECK(from_steps == static_cast<int>(steps.size()));
    // Every key a step saw has its probability, and they sum to 1.
    for (int r = 0; r < strip.rows; ++r) {
      double sum = 0;
      for (int k = 0; k < strip.keys; ++k)
        if (strip.at_state(r, k) == flashscope::viz::TokenMatrix::kSampled) sum += strip.at(r, k);
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-3));
    }
  }
}
