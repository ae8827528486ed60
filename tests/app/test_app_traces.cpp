// The dashboard's trace plumbing without a window: which trace the views
// show (a replayed file, the chat's capture, the lab's) and the messages a
// bad file gets; the captures themselves (the CPU fallback and its note,
// the rows and blocks they follow, the CPU size cap); the synthetic inputs;
// the chat's capture thread; and the kernel lab's loop on this machine.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "flashscope/device.hpp"
#include "flashscope/half.hpp"
#include "lab/kernel_lab.hpp"
#include "traces/capture.hpp"
#include "traces/live_capture.hpp"
#include "traces/synthetic_problem.hpp"
#include "traces/trace_sources.hpp"

namespace fs = flashscope;
namespace app = flashscope::app;

namespace {

std::string temp_path(const char* name) { return "/tmp/flashscope-app-test-" + std::to_string(getpid()) + "-" + name; }

std::shared_ptr<const fs::Trace> small_trace(const char* kernel) {
  app::CaptureRequest rq;
  rq.shape = {1, 2, 1, 100, 100, 64, true};
  rq.try_gpu = false;
  app::CaptureOutcome c = app::capture_prefill(rq);
  REQUIRE_MESSAGE(c.status.ok(), c.status.to_string());
  c.trace.meta.kernel = kernel;
  return std::make_shared<const fs::Trace>(std::move(c.trace));
}

template <typename Pred>
void wait_until(Pred done, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, what);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

TEST_CASE("app trace sources: a bad file is refused with its name and reason, a good one is shown") {
  app::TraceSources s;
  CHECK_FALSE(app::open_replay(s, "/nonexistent/dir/t.fstrace").ok());
  CHECK(s.replay_error.find("/nonexistent/dir/t.fstrace") != std::string::npos);
  CHECK(s.shown == app::TraceOrigin::kNone);
  CHECK(app::shown_slot(s) == nullptr);

  const std::string garbage = temp_path("garbage.fstrace");
  {
    std::ofstream f(garbage, std::ios::binary);
    f << "FSTRACE but not really a trace file";
  }
  const fs::Status bad = app::open_replay(s, garbage);
  CHECK(bad.code() == fs::StatusCode::kCorruptData);
  CHECK(s.replay_error.find(garbage) != std::string::npos);
  CHECK(s.replay_error.find("corrupt") != std::string::npos);
  CHECK_FALSE(s.replay.trace);

  const std::string good = temp_path("good.fstrace");
  REQUIRE(fs::write_trace(*small_trace("cpu-tiled"), good).ok());
  REQUIRE(app::open_replay(s, good).ok());
  CHECK(s.replay_error.empty());
  CHECK(s.shown == app::TraceOrigin::kReplay);
  REQUIRE(app::shown_slot(s) != nullptr);
  CHECK(app::shown_slot(s)->provenance == "replayed from " + good);
  CHECK(app::shown_slot(s)->trace->meta.q_len == 100);
  CHECK(app::shown_slot(s)->note.find("CTAs") != std::string::npos);
  std::remove(garbage.c_str());
  std::remove(good.c_str());
}

TEST_CASE("app trace sources: live traces never take the view from a replay, versions change with every trace") {
  app::TraceSources s;
  app::set_live_trace(s, app::TraceOrigin::kChat, small_trace("a"), "live · after answer 1", "synthetic");
  CHECK(s.shown == app::TraceOrigin::kChat);  // nothing was shown: the first trace is
  const uint64_t v1 = s.chat.version;
  app::set_live_trace(s, app::TraceOrigin::kChat, small_trace("b"), "live · after answer 2", "synthetic");
  CHECK(s.chat.version > v1);
  CHECK(app::shown_slot(s)->trace->meta.kernel == "b");

  const std::string path = temp_path("replay.fstrace");
  REQUIRE(fs::write_trace(*small_trace("replayed"), path).ok());
  REQUIRE(app::open_replay(s, path).ok());
  app::set_live_trace(s, app::TraceOrigin::kChat, small_trace("c"), "live · after answer 3", "synthetic");
  app::set_live_trace(s, app::TraceOrigin::kLab, small_trace("lab"), "live · kernel lab", "synthetic");
  CHECK(s.shown == app::TraceOrigin::kReplay);
  CHECK(app::shown_slot(s)->trace->meta.kernel == "replayed");

  app::show_origin(s, app::TraceOrigin::kLab);
  CHECK(app::shown_slot(s)->trace->meta.kernel == "lab");
  app::show_origin(s, app::TraceOrigin::kReplay);
  app::close_replay(s);  // falls back to a live source
  CHECK(s.shown == app::TraceOrigin::kChat);
  CHECK_FALSE(s.replay.trace);
  app::show_origin(s, app::TraceOrigin::kReplay);  // empty: ignored
  CHECK(s.shown == app::TraceOrigin::kChat);
  std::remove(path.c_str());
}

TEST_CASE("app captures: the CPU path says so, follows the head asked for, and its records fit the shape") {
  app::CaptureRequest rq;
  rq.shape = {1, 4, 2, 130, 130, 64, true};
  rq.head = 3;
  app::CaptureOutcome c = app::capture_prefill(rq);
  REQUIRE_MESSAGE(c.status.ok(), c.status.to_string());
  if (fs::cuda_available()) {
    // GPU probes, or — while a build has none — the CPU capture with the reason.
    CHECK((c.note == "GPU probes" || c.note.find("GPU probes unavailable") == 0));
  } else {
    CHECK(c.note == "CPU capture (no CUDA device)");
    CHECK(c.trace.meta.backend == "cpu");
  }
  const fs::TraceMeta& m = c.trace.meta;
  CHECK(m.q_heads == 4);
  CHECK(m.kv_heads == 2);
  CHECK(m.q_len == 130);
  CHECK(m.causal);
  CHECK(m.traced_head == 3);
  std::set<uint32_t> rows;
  for (const fs::SoftmaxStateRecord& r : c.trace.softmax) rows.insert(r.row);
  CHECK(rows.count(0) == 1);
  CHECK(rows.count(129) == 1);
  CHECK(rows.count(64) == 1);  // a tile edge
  CHECK_FALSE(c.trace.prob_samples.empty());
  // One CTA per q-tile and head: 3 × 4 in the CPU's 64-row tiles, fewer in a GPU kernel's taller ones.
  REQUIRE(m.block_q > 0);
  CHECK(c.trace.ctas.size() == size_t((130 + m.block_q - 1) / m.block_q) * 4);

  rq.try_gpu = false;
  CHECK(app::capture_prefill(rq).note == "CPU capture");
  // A CPU capture bigger than asked for is reduced, and says to what.
  rq.shape = {1, 4, 2, 2048, 2048, 64, true};
  rq.cpu_max_flops = 2e8;
  const app::CaptureOutcome small = app::capture_prefill(rq);
  REQUIRE(small.status.ok());
  CHECK(small.note.find("reduced to") != std::string::npos);
  CHECK(small.trace.meta.flops <= 2e8);
}

TEST_CASE("app captures: which rows and blocks the dashboard follows") {
  const fs::TraceOptions few = app::dashboard_trace_options({1, 2, 2, 256, 256, 64, true}, 9);
  CHECK(few.head == 1);                  // clamped to the heads there are
  CHECK(few.sample_tiles.size() == 10);  // every computed block of a 4 × 4 causal grid
  std::set<int32_t> rows(few.rows.begin(), few.rows.end());
  for (const int32_t r : {0, 63, 64, 127, 128, 255}) CHECK(rows.count(r) == 1);
  CHECK(few.rows.size() <= 24);

  // 16 × 16 causal: 136 computed blocks, too many; the diagonal, its left neighbours and column 0.
  const fs::TraceOptions many = app::dashboard_trace_options({1, 2, 2, 1024, 1024, 64, true}, 0);
  CHECK(many.sample_tiles.size() == 45);
  for (const fs::TileCoord& t : many.sample_tiles) {
    CHECK(t.kv_tile <= t.q_tile);
    CHECK((t.kv_tile == 0 || t.kv_tile == t.q_tile || t.kv_tile == t.q_tile - 1));
  }
}

TEST_CASE("app captures: the CPU size cap halves lengths together, then heads in whole groups") {
  const app::SyntheticShape seed{1, 8, 8, 4096, 8192, 128, false};
  CHECK(app::shape_flops(seed) == doctest::Approx(4.0 * 8 * 4096 * 8192 * 128));
  const app::SyntheticShape s = app::cap_shape_for_cpu(seed, 5e8);
  CHECK(app::shape_flops(s) <= 5e8);
  CHECK(s.kv_len == 2 * s.q_len);  // the cached-prefix ratio stays
  CHECK(s.q_len >= 64);
  CHECK(s.head_dim == 128);
  const app::SyntheticShape gqa = app::cap_shape_for_cpu({1, 32, 8, 64, 64, 128, false}, 1e6);
  CHECK(gqa.q_heads == gqa.kv_heads * 4);
  CHECK(app::cap_shape_for_cpu(seed, 0).q_len == 4096);  // 0: no cap
}

TEST_CASE("app synthetic inputs: seeded, and shaped like a RoPE'd model's (local, with a sink at key 0)") {
  const app::SyntheticShape sh{1, 2, 1, 300, 300, 64, true};
  const app::SyntheticProblem a = app::make_synthetic_problem(sh, 5), b = app::make_synthetic_problem(sh, 5),
                              c = app::make_synthetic_problem(sh, 6);
  CHECK(a.q == b.q);
  CHECK(a.k == b.k);
  CHECK(a.q != c.q);
  // Mean logits of near pairs beat far ones, and key 0 beats a typical far key.
  auto logit = [&](int i, int j) {
    double s = 0;
    for (int d = 0; d < 64; ++d) {
      s += fs::bf16_to_float(a.q[static_cast<size_t>(i) * 2 * 64 + d]) *
           fs::bf16_to_float(a.k[static_cast<size_t>(j) * 64 + d]);
    }
    return s / 8.0;  // scale 1/√64
  };
  double near = 0, far = 0, sink = 0;
  int n_near = 0, n_far = 0, n_sink = 0;
  for (int i = 150; i < 300; ++i) {
    for (int j = 1; j <= i; ++j) {
      const int dist = i - j;
      if (dist <= 3) {
        near += logit(i, j);
        ++n_near;
      } else if (dist >= 100 && j % 7 == 0) {
        far += logit(i, j);
        ++n_far;
      }
    }
    sink += logit(i, 0);
    ++n_sink;
  }
  near /= n_near;
  far /= n_far;
  sink /= n_sink;
  INFO("mean logits: near " << near << ", far " << far << ", key 0 " << sink);
  CHECK(near > far + 1.0);
  CHECK(sink > far + 1.0);
}

TEST_CASE("app live capture: one at a time, the newest waiting request wins") {
  fs::ModelConfig cfg;
  cfg.n_heads = 9;
  cfg.n_kv_heads = 3;
  cfg.head_dim = 64;
  const app::LiveCaptureJob j = app::chat_capture_job(cfg, "SmolLM2", 66, 4, "live · after answer 1");
  CHECK(j.request.shape.q_len == 256);  // short conversations are shown as 256 tokens
  CHECK(j.request.shape.q_heads == 9);
  CHECK(j.request.shape.kv_heads == 3);
  CHECK(j.request.head == 4);
  CHECK(j.note.find("synthetic") != std::string::npos);
  CHECK(j.note.find("not the model's activations") != std::string::npos);
  CHECK(j.note.find("holds 66") != std::string::npos);
  CHECK(app::chat_capture_job(cfg, "SmolLM2", 5000, 0, "").request.shape.q_len == 1024);
  CHECK(app::chat_capture_job(cfg, "SmolLM2", 700, 20, "").request.head == 8);
  CHECK(j.request.shape.head_dim == 64);
  // Gemma 3's head_dim 256 is traced as 256 (it was drawn as D 64), and said so.
  fs::ModelConfig gemma = cfg;
  gemma.n_heads = 4;
  gemma.n_kv_heads = 1;
  gemma.head_dim = 256;
  const app::LiveCaptureJob g = app::chat_capture_job(gemma, "gemma-3-270m", 0, 0, "");
  CHECK(g.request.shape.head_dim == 256);
  CHECK(g.note.find("D 256") != std::string::npos);
  gemma.head_dim = 72;  // no path runs it: the nearest, named
  const app::LiveCaptureJob odd = app::chat_capture_job(gemma, "odd", 0, 0, "");
  CHECK(odd.request.shape.head_dim == 64);
  CHECK(odd.note.find("head_dim 72 has no attention path") != std::string::npos);

  app::LiveCapture capture;
  app::LiveCaptureJob a = j, b = j, c = j;
  a.provenance = "A";
  b.provenance = "B";
  c.provenance = "C";
  capture.request(a);
  capture.request(b);  // waits
  capture.request(c);  // replaces B
  CHECK(capture.busy());
  std::vector<std::string> got;
  app::LiveCaptureResult r;
  wait_until(
      [&] {
        if (capture.poll(&r)) {
          REQUIRE_MESSAGE(r.outcome.status.ok(), r.outcome.status.to_string());
          got.push_back(r.provenance);
        }
        return !capture.busy();
      },
      "captures did not finish in 60 s");
  REQUIRE(got.size() == 2);
  CHECK(got[0] == "A");
  CHECK(got[1] == "C");
  CHECK(r.outcome.trace.meta.q_heads == 9);
}

TEST_CASE("app kernel lab: runs, times and traces on this machine, stops, and reports a bad shape") {
  const std::vector<fs::PrefillKernel> kernels = app::lab_kernels();
  REQUIRE(kernels.size() >= 6);
  CHECK(std::string(fs::prefill_kernel_name(kernels[0])) == "v1");
  CHECK(std::string(fs::prefill_kernel_name(kernels[5])) == "v6");

  app::KernelLab lab;
  app::LabConfig cfg;
  cfg.shape = {1, 2, 2, 128, 128, 64, true};
  lab.run(cfg);
  app::LabSnapshot s;
  wait_until(
      [&] {
        lab.snapshot(&s);
        return (s.runs >= 3 && s.trace) || !s.error.empty();
      },
      "the lab did not run 3 times and capture in 60 s");
  REQUIRE_MESSAGE(s.error.empty(), s.error);
  CHECK(s.running);
  CHECK(s.flops == doctest::Approx(4.0 * 2 * 128 * 128 * 64 * 0.5));
  CHECK(s.last_ms > 0);
  CHECK(s.tflops.values.size() == s.runs);
  CHECK(s.tflops.last() == doctest::Approx(s.flops / (s.last_ms * 1e-3) / 1e12).epsilon(1e-4));
  REQUIRE(s.per_kernel.size() == 1);
  if (!fs::cuda_available()) {
    CHECK(s.kernel == "cpu-tiled");
    CHECK_FALSE(s.on_gpu);
    CHECK(s.device.find("CPU") == 0);
    CHECK(s.trace->meta.backend == "cpu");
  } else {
    // On a GPU the lab times the kernel it was given and traces it with the probes.
    CHECK(s.on_gpu);
    CHECK(s.trace->meta.backend == "cuda");
    CHECK(s.trace->meta.kernel == s.kernel);
  }
  CHECK(s.trace->meta.q_len == 128);

  // A new shape starts the per-kernel statistics over.
  cfg.shape.q_len = cfg.shape.kv_len = 192;
  lab.run(cfg);
  wait_until(
      [&] {
        lab.snapshot(&s);
        return s.shape.q_len == 192 && s.runs >= 5;
      },
      "the lab did not switch shapes");
  REQUIRE(s.per_kernel.size() == 1);
  CHECK(s.per_kernel[0].tflops.values.size() < s.runs);

  lab.stop();
  lab.snapshot(&s);
  CHECK_FALSE(s.running);
  const uint64_t runs = s.runs;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  lab.snapshot(&s);
  CHECK(s.runs <= runs + 1);  // at most the run in flight when stop() came

  cfg.shape.kv_heads = 3;  // 2 q-heads over 3 kv-heads: invalid
  lab.run(cfg);
  wait_until(
      [&] {
        lab.snapshot(&s);
        return !s.error.empty();
      },
      "an invalid shape was not reported");
  CHECK_FALSE(s.running);
  CHECK(s.error.find("invalid argument") != std::string::npos);
}
