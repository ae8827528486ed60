// The CUDA decode step's launch-saving forms give the plain forms' logits,
// on random models of the released models' layer shapes (make-model's
// gemma3-270m and qwen3-0.6b presets with fewer layers and a small
// vocabulary), with weights expanded to bf16 and kept in Q8_0 blocks:
//
//  * programmatic dependent launch (sm_90: each kernel of the step may start
//    while the one before it finishes, and waits for it on the GPU) gives
//    the plainly launched step's logits bit for bit: the same kernels do the
//    same arithmetic, so any difference is a kernel reading or writing
//    before its producer finished;
//  * Gemma's post-norms folded into the next few-token GEMM's staging
//    (FLASHSCOPE_CUDA_FUSE_NORMS, on by default) give the step with its
//    add_rms_norm launches, within the bounds the fused and cuBLAS steps
//    are held to (test_model_families_cuda.cpp: the paths round the same
//    values to bf16 after fp32 sums in another order; a wrong residual or
//    norm moves logits by tens of percent);
//  * q/k norms + RoPE + K/V append run by the QKV GEMM's last CTA per head
//    (FLASHSCOPE_CUDA_FUSE_ROPE, bf16 weights) give the rope_append
//    launches' logits bit for bit (the same arithmetic on the same values):
//    the Qwen3 shape, which has no post-norms, must match exactly.
//
// Each model decodes past its sliding window and across a KV page from CUDA
// graphs, then runs a step of 3 tokens (the fused kernels without a graph).
// Without a device every case skips.
// On the GPU machine: flashscope-tests -tc="cuda decode step*"
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "device_facts.hpp"
#include "flashscope/device.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

using namespace flashscope;
using flashscope::testing::random_ids;
using flashscope::testing::skip_without_gpu;

namespace {

struct Shape {
  const char* name;
  SyntheticModelSpec spec;
};

// make-model's presets' layers (cli/cmd_make_model.cpp), 3-4 of them, a
// 2000-token vocabulary and a 32-token window for Gemma (the preset's is 512).
std::vector<Shape> shapes() {
  SyntheticModelSpec gemma;
  gemma.architecture = "gemma3";
  gemma.n_layers = 4;
  gemma.hidden = 640;
  gemma.n_heads = 4;
  gemma.n_kv_heads = 1;
  gemma.head_dim = 256;
  gemma.ffn = 2048;
  gemma.vocab = 2000;
  gemma.sliding_window = 32;
  gemma.rope_base = 1000000.0f;
  gemma.rms_eps = 1e-6f;
  gemma.matrix_type = GgmlType::kQ8_0;
  SyntheticModelSpec qwen3 = gemma;
  qwen3.architecture = "qwen3";
  qwen3.n_layers = 3;
  qwen3.hidden = 1024;
  qwen3.n_heads = 16;
  qwen3.n_kv_heads = 8;
  qwen3.head_dim = 128;
  qwen3.ffn = 3072;
  qwen3.sliding_window = 0;
  return {{"gemma3-270m layers", gemma}, {"qwen3-0.6b layers", qwen3}};
}

// The shape on CUDA with `weights`: both folds on (FLASHSCOPE_CUDA_FUSE_ROPE
// is opt-in) when fuse_norms, FLASHSCOPE_CUDA_FUSE_NORMS=0 and
// FLASHSCOPE_CUDA_FUSE_ROPE=0 when not (read at load); no value when the
// backend refuses it.
std::optional<Model> load(const Shape& shape, WeightFormat weights, bool fuse_norms) {
  ModelOptions o;
  o.device = Device::kCuda;
  o.weights = weights;
  if (!fuse_norms) ::setenv("FLASHSCOPE_CUDA_FUSE_NORMS", "0", 1);
  ::setenv("FLASHSCOPE_CUDA_FUSE_ROPE", fuse_norms ? "1" : "0", 1);
  auto model = [&]() -> Result<Model> {
    auto bytes = build_synthetic_model(shape.spec);
    if (!bytes.ok()) return bytes.status();
    auto file = GgufFile::from_buffer(std::move(bytes).value());
    if (!file.ok()) return file.status();
    return Model::from_gguf(std::move(file).value(), o);
  }();
  ::unsetenv("FLASHSCOPE_CUDA_FUSE_NORMS");
  ::unsetenv("FLASHSCOPE_CUDA_FUSE_ROPE");
  if (!model.ok() && model.status().code() == StatusCode::kUnsupported) {
    MESSAGE(shape.name << " on CUDA skipped: " << model.status().message());
    return std::nullopt;
  }
  REQUIRE_MESSAGE(model.ok(), shape.name, ": ", model.status().to_string());
  return std::move(model).value();
}

struct Decoded {
  std::vector<float> logits;  // every decode step's row, then the 3-token step's rows
  uint64_t fused_enqueues = 0, norm_fused_enqueues = 0, rope_fused_enqueues = 0, replays = 0;
};

// A 40-token prompt, 50 decode steps (past the 32-token window, across the
// 64-token page; graphs after the first two), then a step of 3 tokens.
Decoded decode(const Model& m) {
  const int V = m.config().vocab;
  const std::vector<int32_t> ids = random_ids(93, V, 77);
  const int prompt = 40;
  const model::CudaForwardStats before = model::cuda_total_stats();
  auto seq = m.new_sequence(128);
  REQUIRE(seq.ok());
  Decoded d;
  std::vector<float> logits;
  Status st = m.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kLast, &logits);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  for (size_t i = prompt; i + 3 < ids.size(); ++i) {
    st = m.forward(*seq, {ids[i]}, {}, LogitsMode::kLast, &logits);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    d.logits.insert(d.logits.end(), logits.begin(), logits.end());
  }
  st = m.forward(*seq, std::vector<int32_t>(ids.end() - 3, ids.end()), {}, LogitsMode::kAll, &logits);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  d.logits.insert(d.logits.end(), logits.begin(), logits.end());
  const model::CudaForwardStats after = model::cuda_total_stats();
  d.fused_enqueues = after.fused_step_enqueues - before.fused_step_enqueues;
  d.norm_fused_enqueues = after.norm_fused_enqueues - before.norm_fused_enqueues;
  d.rope_fused_enqueues = after.rope_fused_enqueues - before.rope_fused_enqueues;
  d.replays = after.graph_replays - before.graph_replays;
  return d;
}

double rms(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  return std::sqrt(ss / static_cast<double>(v.size()));
}

const char* format_name(WeightFormat w) { return w == WeightFormat::kBf16 ? "bf16" : "Q8_0 blocks"; }

// Restores the process's programmatic-launch setting when a case ends (a REQUIRE may end it early).
struct ProgrammaticSetting {
  bool saved = cuda::programmatic_allowed();
  ~ProgrammaticSetting() { cuda::allow_programmatic(saved); }
};

}  // namespace

TEST_CASE("cuda decode step: programmatic launches give the plain launches' logits bit for bit") {
  if (skip_without_gpu()) return;
  ProgrammaticSetting restore;
  cuda::allow_programmatic(true);
  auto facts = cuda::device_facts();
  REQUIRE(facts.ok());
  if (!facts->programmatic) MESSAGE("this device or build has no programmatic launches: both runs launch plainly");
  int ran = 0;
  for (const Shape& shape : shapes()) {
    for (WeightFormat weights : {WeightFormat::kBf16, WeightFormat::kQuantized}) {
      const std::string what = std::string(shape.name) + ", " + format_name(weights);
      CAPTURE(what);
      cuda::allow_programmatic(false);
      auto plain_model = load(shape, weights, true);
      if (!plain_model) continue;
      const Decoded plain = decode(*plain_model);
      cuda::allow_programmatic(true);
      auto pdl_model = load(shape, weights, true);
      REQUIRE(pdl_model);
      const Decoded pdl = decode(*pdl_model);
      ++ran;
      CHECK(pdl.fused_enqueues >= 3);  // the few-token kernels ran (two plain decode steps and the 3-token step)
      CHECK(pdl.replays >= 45);        // and the rest replayed from graphs
      REQUIRE(plain.logits.size() == pdl.logits.size());
      size_t differ = 0;
      for (size_t i = 0; i < plain.logits.size(); ++i) {
        if (std::memcmp(&plain.logits[i], &pdl.logits[i], sizeof(float)) != 0) ++differ;
      }
      MESSAGE(what << ": " << differ << " of " << plain.logits.size() << " logits differ between plain and "
                   << (facts->programmatic ? "programmatic" : "(also plain)") << " launches");
      CHECK(differ == 0);
    }
  }
  if (ran == 0) flashscope::testing::mark_skipped();
}

TEST_CASE("cuda decode step: post-norms and q/k-norm RoPE folded into the few-token GEMMs give the unfused logits") {
  if (skip_without_gpu()) return;
  int ran = 0;
  for (const Shape& shape : shapes()) {
    for (WeightFormat weights : {WeightFormat::kBf16, WeightFormat::kQuantized}) {
      const std::string what = std::string(shape.name) + ", " + format_name(weights);
      CAPTURE(what);
      auto unfused_model = load(shape, weights, false);
      if (!unfused_model) continue;
      const Decoded unfused = decode(*unfused_model);
      auto fused_model = load(shape, weights, true);
      REQUIRE(fused_model);
      const Decoded fused = decode(*fused_model);
      ++ran;
      const bool post_norms = shape.spec.architecture == "gemma3";
      CHECK(unfused.norm_fused_enqueues == 0);
      // Every few-token step of a model with post-norms folds them (the plain
      // decode steps and the 3-token step; graph replays are not enqueues).
      if (post_norms) CHECK(fused.norm_fused_enqueues == fused.fused_enqueues);
      if (!post_norms) CHECK(fused.norm_fused_enqueues == 0);
      CHECK(unfused.rope_fused_enqueues == 0);
      // Both shapes have q/k norms; with bf16 weights every few-token step folds rope_append.
      CHECK(fused.rope_fused_enqueues == (weights == WeightFormat::kBf16 ? fused.fused_enqueues : 0));
      CHECK(fused.fused_enqueues >= 3);
      REQUIRE(unfused.logits.size() == fused.logits.size());
      double max_abs = 0, ss = 0;
      for (size_t i = 0; i < unfused.logits.size(); ++i) {
        const double d = std::fabs(static_cast<double>(unfused.logits[i]) - fused.logits[i]);
        max_abs = std::max(max_abs, std::isfinite(d) ? d : INFINITY);
        ss += d * d;
      }
      const double rms_abs = std::sqrt(ss / static_cast<double>(unfused.logits.size()));
      const double scale = rms(unfused.logits);
      MESSAGE(what << ": norms folded vs add_rms_norm launches: max " << 100 * max_abs / scale << "%, RMS "
                   << 100 * rms_abs / scale << "% of logit RMS");
      CHECK(max_abs <= 0.02 * scale);
      CHECK(rms_abs <= 0.005 * scale);
      // Without post-norms nothing changes: the same kernels, bit for bit.
      if (!post_norms) CHECK(max_abs == 0.0);
    }
  }
  if (ran == 0) flashscope::testing::mark_skipped();
}
