// capture_attention on the CUDA engine: the probed paged kernels over the
// engine's own page pool, on the query rows a turn really fed (kept while
// armed: staged on the device inside the step, decode steps in their CUDA
// graph). Checked by support/capture_checks.hpp as on the CPU (double
// recomputation from the captured operands, the kernel's lse), and here:
//   - every row fed alone (a decode step) is traced again by itself through
//     the decode tile with its split-KV plan: its one row's final m + ln l is
//     the kernel's lse of that row in the whole-conversation run (relative
//     1e-4: the two tiles sum in another order), its keys are the
//     conversation up to it, its one row its own token;
//   - arming changes nothing the model computes (greedy tokens equal);
//   - armed decode steps replay their graph, and what they keep is exactly
//     what plain launches keep (a model loaded with FLASHSCOPE_CUDA_GRAPHS=0),
//     also after the armed layers change between turns.
// Skips without a device; a build without the probed kernels must answer
// kUnsupported, never crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "flashscope/attention_capture.hpp"
#include "flashscope/device.hpp"
#include "support/capture_checks.hpp"
#include "support/gpu.hpp"

namespace fs = flashscope;
using fs::testing::check_capture;
using fs::testing::greedy;
using fs::testing::prompt_ids;
using fs::testing::synthetic;

namespace {

fs::ModelOptions on_gpu() {
  fs::ModelOptions o;
  o.device = fs::Device::kCuda;
  return o;
}

// The last softmax state of row `row` in trace t: m + ln l, the row's lse.
double final_lse(const fs::Trace& t, uint32_t row) {
  const fs::SoftmaxStateRecord* last = nullptr;
  for (const fs::SoftmaxStateRecord& r : t.softmax)
    if (r.row == row && (last == nullptr || last->kv_tile < r.kv_tile)) last = &r;
  REQUIRE(last != nullptr);
  return double(last->m) + std::log(double(last->l));
}

// What a CUDA capture adds to the common checks: the decode steps.
void check_decode_steps(const fs::AttentionCapture& cap, int prompt_rows) {
  for (const fs::HeadCapture& h : cap.heads) {
    CAPTURE(h.head);
    REQUIRE(h.decode_steps.size() == h.decode_rows.size());
    REQUIRE(int(h.decode_rows.size()) == cap.rows - prompt_rows);  // every answer row, none of the prompt's
    for (size_t n = 0; n < h.decode_steps.size(); ++n) {
      const fs::Trace& t = h.decode_steps[n];
      const int row = h.decode_rows[n], pos = cap.first + row;
      CAPTURE(row);
      CHECK(row == prompt_rows + int(n));
      CHECK(t.meta.kind == fs::TraceKind::kDecode);
      CHECK(t.meta.q_len == 1);
      CHECK(t.meta.kv_len == pos + 1);
      CHECK(t.meta.traced_head == h.head);
      CHECK(t.meta.num_splits >= 1);
      CHECK(t.tokens.keys.size() == size_t(pos + 1));
      REQUIRE(t.tokens.row_keys.size() == 1);
      CHECK(t.tokens.row_keys[0] == uint32_t(pos));
      CHECK(final_lse(t, 0) == doctest::Approx(h.lse[size_t(row)]).epsilon(1e-4));
      // Its probabilities are the whole run's for that row: every key sampled.
      size_t visible = 0;
      for (const fs::ProbSampleRecord& r : t.prob_samples) visible += r.flags == 0;
      const int lo = cap.window > 0 ? std::max(0, pos - cap.window + 1) : 0;
      CHECK(visible == size_t(pos + 1 - lo));
    }
  }
}

}  // namespace

TEST_CASE("attention capture (CUDA): a turn's prompt and decode steps from the probed paged kernels") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec, on_gpu());
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  REQUIRE(fs::arm_attention_capture(*session, -1).ok());
  REQUIRE(session->generate(prompt_ids(model, 150), greedy(12), {}).ok());

  fs::AttentionCaptureRequest req;
  req.layer = 1;
  req.heads = {0, 3};
  auto cap = fs::capture_attention(*session, req);
  if (cap.status().code() == fs::StatusCode::kUnsupported) {
    MESSAGE("skipped: " << cap.status().message());
    fs::testing::mark_skipped();
    return;
  }
  REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
  CHECK(cap->first == 0);
  CHECK(cap->keys == 150 + 11);
  for (const fs::HeadCapture& h : cap->heads) {
    CHECK(h.trace.meta.backend == "cuda");
    CHECK(h.trace.meta.page_size > 0);
  }
  check_capture(*cap, *session, spec.head_dim, 0);
  check_decode_steps(*cap, 150);
}

TEST_CASE("attention capture (CUDA): armed between turns, GQA 3 and head_dim 128, a longer answer") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  spec.hidden = 128;
  spec.n_heads = 6;
  spec.n_kv_heads = 2;
  spec.head_dim = 128;
  spec.rope_dim = 128;
  spec.ffn = 160;
  const fs::Model model = synthetic(spec, on_gpu());
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  REQUIRE(session->generate(prompt_ids(model, 70), greedy(4), {}).ok());
  const int before = session->n_tokens();
  REQUIRE(fs::arm_attention_capture(*session, 0).ok());
  REQUIRE(session->generate(prompt_ids(model, 30), greedy(40), {}).ok());
  fs::AttentionCaptureRequest req;
  req.layer = 0;
  req.heads = {};  // all six
  req.max_sampled_pairs = 0;  // the diagonal and first blocks only
  auto cap = fs::capture_attention(*session, req);
  if (cap.status().code() == fs::StatusCode::kUnsupported) {
    MESSAGE("skipped: " << cap.status().message());
    fs::testing::mark_skipped();
    return;
  }
  REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
  CHECK(cap->first == before - 1);  // the pending token was fed first
  REQUIRE(cap->heads.size() == 6);
  check_capture(*cap, *session, spec.head_dim, 0);
  check_decode_steps(*cap, 1 + 30);
}

TEST_CASE("attention capture (CUDA): sliding-window layers (gemma3)") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  spec.architecture = "gemma3";
  spec.sliding_window = 24;
  spec.n_layers = 6;
  const fs::Model model = synthetic(spec, on_gpu());
  auto session = fs::Session::create(model);
  REQUIRE(session.ok());
  REQUIRE(fs::arm_attention_capture(*session, -1).ok());
  REQUIRE(session->generate(prompt_ids(model, 90), greedy(6), {}).ok());
  for (int layer : {0, 5}) {
    CAPTURE(layer);
    fs::AttentionCaptureRequest req;
    req.layer = layer;
    req.heads = {1};
    auto cap = fs::capture_attention(*session, req);
    if (cap.status().code() == fs::StatusCode::kUnsupported) {
      MESSAGE("skipped: " << cap.status().message());
      fs::testing::mark_skipped();
      return;
    }
    REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
    CHECK(cap->window == (layer == 5 ? 0 : 24));
    check_capture(*cap, *session, spec.head_dim, 24);
    check_decode_steps(*cap, 90);
    if (layer != 5) CHECK(cap->heads[0].summary.window_mass == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("attention capture (CUDA): arming does not change what the model computes") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec, on_gpu());
  auto plain = fs::Session::create(model);
  auto armed = fs::Session::create(model);
  REQUIRE((plain.ok() && armed.ok()));
  REQUIRE(fs::arm_attention_capture(*armed, -1).ok());
  REQUIRE(plain->generate(prompt_ids(model, 30), greedy(24), {}).ok());
  REQUIRE(armed->generate(prompt_ids(model, 30), greedy(24), {}).ok());
  CHECK(plain->tokens() == armed->tokens());
  // Disarmed again, the next turn decodes as before (graphs back).
  fs::disarm_attention_capture(*armed);
  REQUIRE(plain->generate(prompt_ids(model, 5), greedy(8), {}).ok());
  REQUIRE(armed->generate(prompt_ids(model, 5), greedy(8), {}).ok());
  CHECK(plain->tokens() == armed->tokens());
}

namespace {

// RMS of a − b over RMS of b.
double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

// The kept rows and gathered keys are the layer's real operands: the same
// tokens through the CPU engine give the same Q and K up to the engines'
// different arithmetic (the CPU's 8-bit activations: about 1% per product
// here), while a wrong layer, row or page would be uncorrelated (~140%).
TEST_CASE("attention capture (CUDA): the captured Q and K are the CPU engine's for the same tokens, within 10%") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  const fs::Model gpu = synthetic(spec, on_gpu());
  const fs::Model cpu = synthetic(spec);
  auto on_gpu_session = fs::Session::create(gpu);
  REQUIRE(on_gpu_session.ok());
  REQUIRE(fs::arm_attention_capture(*on_gpu_session, -1).ok());
  REQUIRE(on_gpu_session->generate(prompt_ids(gpu, 100), greedy(9), {}).ok());
  // The CPU engine fed the very tokens the GPU's cache holds, as prompt and single steps alike.
  std::vector<int32_t> held = on_gpu_session->tokens();
  held.pop_back();  // the pending token has no K/V
  auto on_cpu_session = fs::Session::create(cpu);
  REQUIRE(on_cpu_session.ok());
  REQUIRE(fs::arm_attention_capture(*on_cpu_session, -1).ok());
  fs::GenerateParams one = greedy(1);
  REQUIRE(on_cpu_session->generate(held, one, {}).ok());
  for (int layer : {0, 1}) {
    CAPTURE(layer);
    fs::AttentionCaptureRequest req;
    req.layer = layer;
    req.heads = {0, 3};
    auto g = fs::capture_attention(*on_gpu_session, req);
    if (g.status().code() == fs::StatusCode::kUnsupported) {
      MESSAGE("skipped: " << g.status().message());
      fs::testing::mark_skipped();
      return;
    }
    REQUIRE_MESSAGE(g.ok(), g.status().to_string());
    auto c = fs::capture_attention(*on_cpu_session, req);
    REQUIRE_MESSAGE(c.ok(), c.status().to_string());
    REQUIRE(g->keys == c->keys);
    REQUIRE(g->rows == c->rows);
    for (size_t i = 0; i < 2; ++i) {
      CAPTURE(g->heads[i].head);
      CHECK(relative_rms(g->heads[i].q, c->heads[i].q) < 0.10);
      CHECK(relative_rms(g->heads[i].k, c->heads[i].k) < 0.10);
      CHECK(std::abs(g->heads[i].summary.entropy - c->heads[i].summary.entropy) < 0.1);
    }
  }
}

TEST_CASE("attention capture (CUDA): rows fed by batched decode steps (BatchGenerator) are kept too") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  const fs::Model model = synthetic(spec, on_gpu());
  auto armed = fs::Session::create(model);
  auto other = fs::Session::create(model);
  REQUIRE((armed.ok() && other.ok()));
  REQUIRE(fs::arm_attention_capture(*armed, -1).ok());
  fs::BatchGenerator g;
  REQUIRE(g.add(*armed, prompt_ids(model, 70), greedy(10), nullptr).ok());
  REQUIRE(g.add(*other, prompt_ids(model, 20), greedy(10), nullptr).ok());
  while (!g.done()) REQUIRE(g.step().ok());
  fs::AttentionCaptureRequest req;
  req.layer = 1;
  req.heads = {1};
  auto cap = fs::capture_attention(*armed, req);
  if (cap.status().code() == fs::StatusCode::kUnsupported) {
    MESSAGE("skipped: " << cap.status().message());
    fs::testing::mark_skipped();
    return;
  }
  REQUIRE_MESSAGE(cap.ok(), cap.status().to_string());
  CHECK(cap->rows == 70 + 9);
  check_capture(*cap, *armed, spec.head_dim, 0);
  check_decode_steps(*cap, 70);
}

namespace {

// The same numbers, bit for bit: the capture's operands and lse, and every
// record of its traces (the whole conversation's and each decode step's).
void check_same_trace(const fs::Trace& a, const fs::Trace& b) {
  CHECK(a.meta.q_len == b.meta.q_len);
  CHECK(a.meta.kv_len == b.meta.kv_len);
  CHECK(a.meta.num_splits == b.meta.num_splits);
  REQUIRE(a.softmax.size() == b.softmax.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.softmax.size(); ++i) {
    const fs::SoftmaxStateRecord &x = a.softmax[i], &y = b.softmax[i];
    differ += x.row != y.row || x.kv_tile != y.kv_tile || x.m != y.m || x.l != y.l || x.keys != y.keys;
  }
  REQUIRE(a.prob_samples.size() == b.prob_samples.size());
  for (size_t i = 0; i < a.prob_samples.size(); ++i) {
    const fs::ProbSampleRecord &x = a.prob_samples[i], &y = b.prob_samples[i];
    differ += x.row != y.row || x.key != y.key || x.prob != y.prob || x.flags != y.flags;
  }
  CHECK(differ == 0);
}

void check_same_capture(const fs::AttentionCapture& graphed, const fs::AttentionCapture& plain) {
  REQUIRE(graphed.first == plain.first);
  REQUIRE(graphed.rows == plain.rows);
  REQUIRE(graphed.keys == plain.keys);
  REQUIRE(graphed.heads.size() == plain.heads.size());
  for (size_t h = 0; h < graphed.heads.size(); ++h) {
    const fs::HeadCapture &g = graphed.heads[h], &p = plain.heads[h];
    CAPTURE(g.head);
    CHECK(g.q == p.q);
    CHECK(g.k == p.k);
    CHECK(g.lse == p.lse);
    check_same_trace(g.trace, p.trace);
    CHECK(g.decode_rows == p.decode_rows);
    REQUIRE(g.decode_steps.size() == p.decode_steps.size());
    for (size_t n = 0; n < g.decode_steps.size(); ++n) check_same_trace(g.decode_steps[n], p.decode_steps[n]);
  }
}

}  // namespace

// Three turns: armed at layer 0, disarmed, armed at layer 1. The third turn's
// stage has the size and address of the first's but holds another layer, so
// a graph replayed from turn 1 would keep layer 0's rows as layer 1's.
TEST_CASE("attention capture (CUDA): armed decode steps replay their graph and keep what plain launches keep") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  ::setenv("FLASHSCOPE_CUDA_GRAPHS", "0", 1);
  const fs::Model plain = synthetic(spec, on_gpu());
  ::unsetenv("FLASHSCOPE_CUDA_GRAPHS");
  const fs::Model graphed = synthetic(spec, on_gpu());

  struct Run {
    std::vector<int32_t> tokens;
    fs::Result<fs::AttentionCapture> layer0 = fs::AttentionCapture{}, layer1 = fs::AttentionCapture{};
    uint64_t armed_steps[2] = {0, 0}, armed_replays[2] = {0, 0}, armed_captures[2] = {0, 0};
  };
  auto run = [&](const fs::Model& m) {
    Run r;
    auto session = fs::Session::create(m);
    REQUIRE(session.ok());
    fs::AttentionCaptureRequest req;
    req.heads = {};  // every head
    auto turn = [&](int prompt, int armed_turn) {
      const fs::model::CudaForwardStats before = fs::model::cuda_total_stats();
      REQUIRE(session->generate(prompt_ids(m, prompt), greedy(12), {}).ok());
      const fs::model::CudaForwardStats after = fs::model::cuda_total_stats();
      CHECK_MESSAGE(after.graph_capture_failures == before.graph_capture_failures, after.last_capture_error);
      if (armed_turn < 0) return;
      r.armed_steps[armed_turn] = after.decode_steps - before.decode_steps;
      r.armed_replays[armed_turn] = after.graph_replays - before.graph_replays;
      r.armed_captures[armed_turn] = after.graph_captures - before.graph_captures;
    };
    REQUIRE(fs::arm_attention_capture(*session, 0).ok());
    turn(40, 0);
    req.layer = 0;
    r.layer0 = fs::capture_attention(*session, req);
    fs::disarm_attention_capture(*session);
    turn(5, -1);
    REQUIRE(fs::arm_attention_capture(*session, 1).ok());
    turn(5, 1);
    req.layer = 1;
    r.layer1 = fs::capture_attention(*session, req);
    if (r.layer1.ok()) check_capture(*r.layer1, *session, spec.head_dim, 0);
    r.tokens = session->tokens();
    return r;
  };
  const Run p = run(plain);
  const Run g = run(graphed);
  if (g.layer0.status().code() == fs::StatusCode::kUnsupported) {
    MESSAGE("skipped: " << g.layer0.status().message());
    fs::testing::mark_skipped();
    return;
  }
  REQUIRE_MESSAGE(p.layer0.ok(), p.layer0.status().to_string());
  REQUIRE_MESSAGE(g.layer0.ok(), g.layer0.status().to_string());
  REQUIRE_MESSAGE(p.layer1.ok(), p.layer1.status().to_string());
  REQUIRE_MESSAGE(g.layer1.ok(), g.layer1.status().to_string());
  CHECK(g.tokens == p.tokens);
  for (int t = 0; t < 2; ++t) {
    CAPTURE(t);
    CHECK(p.armed_steps[t] == 11);  // 12 tokens, the first from the prefill, the last not fed
    CHECK(p.armed_replays[t] == 0);
    // Armed, the first decode step runs plainly (warm-up), the second is
    // captured with the armed layers' copies and every later one replays it
    // (the keys stay in the 256 bucket).
    CHECK(g.armed_steps[t] == 11);
    CHECK(g.armed_captures[t] == 1);
    CHECK(g.armed_replays[t] == g.armed_steps[t] - 1);
  }
  CHECK(g.layer0->rows == 40 + 11);
  CHECK(g.layer1->rows == 1 + 5 + 11);
  {
    INFO("layer 0, armed turn 1");
    check_same_capture(*g.layer0, *p.layer0);
  }
  {
    INFO("layer 1, armed turn 3");
    check_same_capture(*g.layer1, *p.layer1);
  }
}

// The batched decode step (BatchGenerator, the server) replays its graph with
// an armed sequence in the batch, and keeps what plain launches keep.
TEST_CASE("attention capture (CUDA): batched decode steps replay their graph with an armed sequence") {
  if (fs::testing::skip_without_gpu()) return;
  fs::testing::SyntheticLlama spec;
  ::setenv("FLASHSCOPE_CUDA_GRAPHS", "0", 1);
  const fs::Model plain = synthetic(spec, on_gpu());
  ::unsetenv("FLASHSCOPE_CUDA_GRAPHS");
  const fs::Model graphed = synthetic(spec, on_gpu());
  struct Run {
    std::vector<int32_t> tokens;
    fs::Result<fs::AttentionCapture> cap = fs::AttentionCapture{};
    uint64_t replays = 0;
  };
  auto run = [&](const fs::Model& m) {
    Run r;
    auto armed = fs::Session::create(m);
    auto other = fs::Session::create(m);
    REQUIRE((armed.ok() && other.ok()));
    REQUIRE(fs::arm_attention_capture(*armed, -1).ok());
    const fs::model::CudaForwardStats before = fs::model::cuda_total_stats();
    fs::BatchGenerator g;
    REQUIRE(g.add(*armed, prompt_ids(m, 60), greedy(12), nullptr).ok());
    REQUIRE(g.add(*other, prompt_ids(m, 20), greedy(12), nullptr).ok());
    while (!g.done()) REQUIRE(g.step().ok());
    r.replays = fs::model::cuda_total_stats().batch_graph_replays - before.batch_graph_replays;
    fs::AttentionCaptureRequest req;
    req.layer = 1;
    req.heads = {0, 2};
    r.cap = fs::capture_attention(*armed, req);
    r.tokens = armed->tokens();
    return r;
  };
  const Run p = run(plain);
  const Run g = run(graphed);
  if (g.cap.status().code() == fs::StatusCode::kUnsupported) {
    MESSAGE("skipped: " << g.cap.status().message());
    fs::testing::mark_skipped();
    return;
  }
  REQUIRE_MESSAGE(p.cap.ok(), p.cap.status().to_string());
  REQUIRE_MESSAGE(g.cap.ok(), g.cap.status().to_string());
  CHECK(p.replays == 0);
  CHECK(g.replays > 0);
  CHECK(g.tokens == p.tokens);
  CHECK(g.cap->rows == 60 + 11);
  check_same_capture(*g.cap, *p.cap);
}
