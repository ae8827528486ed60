// capture_attention on the CPU engine: the model's own attention over a real
// turn (synthetic models always, SmolLM2 when assets/models has it), checked
// by support/capture_checks.hpp (double recomputation from the captured
// operands, the kernel's lse), and here: a decode row's lse is bit for bit
// what prefill() computes for that row alone (q_len 1 over its keys: the
// CPU engine's decode step).
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "flashscope/attention_capture.hpp"
#include "flashscope/chat.hpp"
#include "support/capture_checks.hpp"
#include "support/skip.hpp"

namespace fs = flashscope;
using fs::testing::check_capture;
using fs::testing::decode_step_lse;
using fs::testing::greedy;
using fs::testing::prompt_ids;
using fs::testing::synthetic;

TEST_CASE("attention capture (CPU): a turn's prompt and answer, labelled, checked against double math") {
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec);
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  REQUIRE(fs::arm_attention_capture(*session, -1).ok());
  auto stats = session->generate(prompt_ids(model, 150), greedy(12), {});
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());

  fs::AttentionCaptureRequest req;
  req.layer = 1;
  req.heads = {0, 3};
  auto cap = fs::capture_attention(*session, req);
  REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
  CHECK(cap->first == 0);
  CHECK(cap->keys == 150 + 11);  // the 12th sampled token is pending, not in the cache
  REQUIRE(cap->heads.size() == 2);
  REQUIRE(cap->all_heads.size() == 4);
  check_capture(*cap, *session, spec.head_dim, 0);
  // Every block was sampled (161² pairs is under the default bound).
  CHECK(cap->heads[0].trace.prob_samples.size() == size_t(161 * 161));

  // The decode steps' rows: the kernel's lse is what each step computed.
  for (const fs::HeadCapture& h : cap->heads) {
    for (int i = 150; i < cap->rows; ++i) {
      const float step = decode_step_lse(*cap, h, i, spec.head_dim);
      CHECK(std::memcmp(&step, &h.lse[size_t(i)], sizeof step) == 0);
    }
  }

  // The same trace survives the file.
  auto bytes = fs::serialize_trace(cap->heads[1].trace);
  REQUIRE(bytes.ok());
  auto back = fs::parse_trace(bytes->data(), bytes->size());
  REQUIRE(back.ok());
  CHECK(back->tokens.keys.size() == size_t(cap->keys));
  CHECK(back->tokens.layer == 1);
}

TEST_CASE("attention capture (CPU): armed between turns, the rows are the second turn's, decode steps included") {
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec);
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  REQUIRE(session->generate(prompt_ids(model, 40), greedy(5), {}).ok());
  const int before = session->n_tokens();  // 40 + 5, the last pending

  fs::AttentionCaptureRequest req;
  req.layer = 0;
  auto none = fs::capture_attention(*session, req);
  CHECK(none.status().code() == fs::StatusCode::kInvalidArgument);
  CHECK(none.status().message().find("arm_attention_capture") != std::string::npos);

  REQUIRE(fs::arm_attention_capture(*session, 0).ok());
  REQUIRE(session->generate(prompt_ids(model, 20), greedy(6), {}).ok());
  req.heads = {};  // every head
  auto cap = fs::capture_attention(*session, req);
  REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
  CHECK(cap->first == before - 1);  // the pending token was fed first, and its Q kept
  CHECK(cap->rows == 1 + 20 + 5);
  REQUIRE(cap->heads.size() == 4);
  check_capture(*cap, *session, spec.head_dim, 0);
  for (const fs::HeadCapture& h : cap->heads) {
    for (int i = 21; i < cap->rows; ++i) {
      const float step = decode_step_lse(*cap, h, i, spec.head_dim);
      CHECK(std::memcmp(&step, &h.lse[size_t(i)], sizeof step) == 0);
    }
  }

  // A layer not armed has nothing; truncation shortens the rows; disarming drops them.
  req.layer = 1;
  CHECK(fs::capture_attention(*session, req).status().code() == fs::StatusCode::kInvalidArgument);
  REQUIRE(session->truncate(before + 3).ok());
  req.layer = 0;
  auto shorter = fs::capture_attention(*session, req);
  REQUIRE(shorter.ok());
  CHECK(shorter->rows == 4);
  fs::disarm_attention_capture(*session);
  CHECK(fs::capture_attention(*session, req).status().code() == fs::StatusCode::kInvalidArgument);
}

TEST_CASE("attention capture (CPU): arming does not change what the model computes") {
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec);
  auto plain = fs::Session::create(model);
  auto armed = fs::Session::create(model);
  REQUIRE((plain.ok() && armed.ok()));
  REQUIRE(fs::arm_attention_capture(*armed, -1).ok());
  REQUIRE(plain->generate(prompt_ids(model, 30), greedy(10), {}).ok());
  REQUIRE(armed->generate(prompt_ids(model, 30), greedy(10), {}).ok());
  CHECK(plain->tokens() == armed->tokens());
}

TEST_CASE("attention capture (CPU): bad requests are refused by name") {
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec);
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  CHECK(fs::arm_attention_capture(*session, 2).code() == fs::StatusCode::kInvalidArgument);
  CHECK(fs::arm_attention_capture(*session, -2).code() == fs::StatusCode::kInvalidArgument);
  REQUIRE(fs::arm_attention_capture(*session, -1).ok());
  REQUIRE(session->generate(prompt_ids(model, 10), greedy(2), {}).ok());
  fs::AttentionCaptureRequest req;
  req.layer = 5;
  auto r = fs::capture_attention(*session, req);
  CHECK(r.status().code() == fs::StatusCode::kInvalidArgument);
  CHECK(r.status().message().find("layer 5") != std::string::npos);
  req.layer = 0;
  req.heads = {4};
  r = fs::capture_attention(*session, req);
  CHECK(r.status().message().find("head 4") != std::string::npos);
  req.heads = {0};
  req.rows = {11};  // 10 + 1 rows captured
  r = fs::capture_attention(*session, req);
  CHECK(r.status().message().find("row 11") != std::string::npos);
  req.rows = {10};
  CHECK(fs::capture_attention(*session, req).ok());
}

TEST_CASE("attention capture (CPU): sliding-window layers (gemma3), window mass") {
  fs::testing::SyntheticLlama spec;
  spec.architecture = "gemma3";
  spec.sliding_window = 24;
  spec.n_layers = 6;  // layers 0-4 slide, layer 5 sees everything
  const fs::Model model = synthetic(spec);
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  REQUIRE(fs::arm_attention_capture(*session, -1).ok());
  REQUIRE(session->generate(prompt_ids(model, 90), greedy(4), {}).ok());
  for (int layer : {0, 5}) {
    CAPTURE(layer);
    fs::AttentionCaptureRequest req;
    req.layer = layer;
    req.heads = {1};
    auto cap = fs::capture_attention(*session, req);
    REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
    CHECK(cap->window == (layer == 5 ? 0 : 24));
    check_capture(*cap, *session, spec.head_dim, 24);
    const double w = cap->heads[0].summary.window_mass;
    if (layer == 5) {
      CHECK(w < 0.999);  // a global layer puts some mass before the window
    } else {
      CHECK(w == doctest::Approx(1.0).epsilon(1e-5));
    }
  }
}

TEST_CASE("attention capture (CPU): SmolLM2-135M, a real chat turn") {
  const std::string path = fs::find_default_model();
  if (path.empty()) {
    MESSAGE("skipped: the default model is absent (scripts/fetch_model.sh)");
    fs::testing::mark_skipped();
    return;
  }
  auto model = fs::Model::load(path);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  auto session = fs::Session::create(*model, {512});
  REQUIRE(session.ok());
  REQUIRE(fs::arm_attention_capture(*session, -1).ok());
  const fs::ChatFormat format = fs::ChatFormat::for_model(*model);
  auto turn = format.next_turn(session->tokens(), {{"user", "What is the capital of France?"}});
  REQUIRE(turn.ok());
  REQUIRE(session->generate(turn->keep, turn->feed, greedy(8), {}).ok());
  const int dim = model->config().head_dim;
  for (int layer : {0, model->config().n_layers / 2}) {
    CAPTURE(layer);
    fs::AttentionCaptureRequest req;
    req.layer = layer;
    req.heads = {0, model->config().n_heads - 1};
    auto cap = fs::capture_attention(*session, req);
    REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
    CHECK(cap->first == 0);
    check_capture(*cap, *session, dim, 0);
    for (const fs::HeadCapture& h : cap->heads) {
      for (int i = cap->rows - 7; i < cap->rows; ++i) {
        const float step = decode_step_lse(*cap, h, i, dim);
        CHECK(std::memcmp(&step, &h.lse[size_t(i)], sizeof step) == 0);
      }
    }
  }
}

TEST_CASE("attention capture (CPU): rows fed by a batched decode step are kept too") {
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec);
  auto armed = fs::Session::create(model);
  auto other = fs::Session::create(model);
  REQUIRE((armed.ok() && other.ok()));
  REQUIRE(fs::arm_attention_capture(*armed, 1).ok());
  fs::BatchGenerator g;
  REQUIRE(g.add(*armed, prompt_ids(model, 70), greedy(8), nullptr).ok());
  REQUIRE(g.add(*other, prompt_ids(model, 20), greedy(8), nullptr).ok());
  while (!g.done()) REQUIRE(g.step().ok());
  fs::AttentionCaptureRequest req;
  req.layer = 1;
  req.heads = {2};
  auto cap = fs::capture_attention(*armed, req);
  REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
  CHECK(cap->rows == 70 + 7);
  check_capture(*cap, *armed, spec.head_dim, 0);
  for (int i = 70; i < cap->rows; ++i) {
    const float step = decode_step_lse(*cap, cap->heads[0], i, spec.head_dim);
    CHECK(std::memcmp(&step, &cap->heads[0].lse[size_t(i)], sizeof step) == 0);
  }
}
