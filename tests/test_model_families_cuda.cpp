// The CUDA backend's paths agree with each other on every model family:
// the transformers fixtures (tests/data/families/: llama with Llama 3 rope
// factors, qwen2, qwen3, gemma3; test_model_families.cpp holds each against
// transformers) and synthetic models of the released models' shapes (Qwen2.5's
// 14/2 heads over hidden 896, Qwen3's 16/8 heads of 128 with Q wider than
// hidden, a Gemma 3 shape with one KV head, window 32 and six layers; head_dim
// 80 and 32):
//
//  * the fused few-token decode step (skinny GEMMs, with rope_append behind
//    the QKV product for NeoX pairs, biases and q/k norms, and add_rms_norm
//    behind O and down for Gemma's post-norms) gives the cuBLAS step's
//    logits, replayed from CUDA graphs;
//  * forward_batch rows (one paged attention launch for sequences of
//    different lengths, two RoPE tables for gemma3, windows) give each
//    sequence's own decode step;
//  * Q8_0 weights kept in their blocks (WeightFormat::kQuantized: the
//    quantized few-token GEMMs with the families' epilogues, GeGLU over
//    quantized gate/up, the quantized embedding with Gemma's scale, the
//    many-row path's dequantized slices) give the same file's bf16 path.
// Bounds as in test_model_cuda.cpp: the paths round the same values to bf16
// and sum in fp32 in another order, max ~2% / RMS ~0.5% of the logit RMS
// (quantized against bf16: test_model_cuda_quant.cpp's 7% / 1.5%, each path
// within kCudaBounds of the float64 reference);
// a wrong op (a RoPE pair, a bias, a norm, the wrong table or window) moves
// logits by tens of percent.
//
// A family the CUDA backend refuses (kUnsupported at load: an attention
// kernel without its head_dim or sliding window in this build) is reported
// and skipped; without a device every case skips.
// On the GPU machine: flashscope-tests -tc="cuda families*"
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "flashscope/device.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"
#include "support/gpu.hpp"
#include "support/q8_steps.hpp"
#include "support/random.hpp"

using namespace flashscope;
using flashscope::testing::random_ids;
using flashscope::testing::skip_without_gpu;

namespace {

const std::string kDir = FLASHSCOPE_SOURCE_DIR "/tests/data/families/";
const char* const kFamilies[] = {"llama3", "qwen2", "qwen3", "gemma3"};

// A model to run: a fixture file (BF16) or a synthetic spec.
struct Source {
  std::string name;
  std::string fixture;  // family name under kDir, or empty
  SyntheticModelSpec spec;
};

std::vector<Source> sources() {
  std::vector<Source> out;
  for (const char* family : kFamilies) out.push_back({family, family, {}});
  SyntheticModelSpec qwen2;
  qwen2.architecture = "qwen2";
  qwen2.hidden = 896;
  qwen2.n_heads = 14;
  qwen2.n_kv_heads = 2;
  qwen2.head_dim = 64;
  qwen2.ffn = 1024;
  qwen2.vocab = 1000;
  qwen2.rope_base = 1e6f;
  qwen2.matrix_type = GgmlType::kQ8_0;
  out.push_back({"qwen2.5-shaped synthetic", "", qwen2});
  SyntheticModelSpec qwen3 = qwen2;
  qwen3.architecture = "qwen3";
  qwen3.hidden = 1024;
  qwen3.n_heads = 16;
  qwen3.n_kv_heads = 8;
  qwen3.head_dim = 128;
  qwen3.ffn = 1536;
  out.push_back({"qwen3-shaped synthetic", "", qwen3});
  SyntheticModelSpec gemma3 = qwen2;
  gemma3.architecture = "gemma3";
  gemma3.n_layers = 6;
  gemma3.hidden = 640;
  gemma3.n_heads = 4;
  gemma3.n_kv_heads = 1;
  gemma3.head_dim = 128;
  gemma3.ffn = 2048;
  gemma3.sliding_window = 32;
  out.push_back({"gemma3-shaped synthetic", "", gemma3});
  // The head_dims only the sm80 family runs on every GPU: 80 (Phi-2's) and 32.
  SyntheticModelSpec d80 = qwen2;
  d80.architecture = "llama";
  d80.hidden = 640;
  d80.n_heads = 8;
  d80.n_kv_heads = 2;
  d80.head_dim = 80;
  out.push_back({"head_dim 80 synthetic", "", d80});
  SyntheticModelSpec d32 = qwen3;
  d32.hidden = 256;
  d32.n_heads = 8;
  d32.n_kv_heads = 4;
  d32.head_dim = 32;
  d32.ffn = 512;
  out.push_back({"head_dim 32 synthetic", "", d32});
  return out;
}

// The source on CUDA (a fixture in `type`, BF16 unless named); no value when
// the backend refuses it.
std::optional<Model> load_cuda(const Source& src, bool skinny, const std::string& type = "bf16",
                               WeightFormat weights = WeightFormat::kQuantized) {
  ModelOptions o;
  o.device = Device::kCuda;
  o.weights = weights;
  if (!skinny) ::setenv("FLASHSCOPE_CUDA_SKINNY", "0", 1);
  auto model = [&]() -> Result<Model> {
    if (!src.fixture.empty()) return Model::load(kDir + src.fixture + "." + type + ".gguf", o);
    auto bytes = build_synthetic_model(src.spec);
    if (!bytes.ok()) return bytes.status();
    auto file = GgufFile::from_buffer(std::move(bytes).value());
    if (!file.ok()) return file.status();
    return Model::from_gguf(std::move(file).value(), o);
  }();
  ::unsetenv("FLASHSCOPE_CUDA_SKINNY");
  const std::string& family = src.name;
  if (!model.ok() && model.status().code() == StatusCode::kUnsupported) {
    MESSAGE(family << " on CUDA skipped: " << model.status().message());
    return std::nullopt;
  }
  REQUIRE_MESSAGE(model.ok(), family, ": ", model.status().to_string());
  return std::move(model).value();
}

double rms(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  return std::sqrt(ss / static_cast<double>(v.size()));
}

// max |a - b| and RMS of a - b (NaN: infinity).
void diff(const std::vector<float>& a, const float* b, double* max_abs, double* rms_abs) {
  double m = 0, ss = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    m = std::max(m, std::isfinite(d) ? d : INFINITY);
    ss += d * d;
  }
  *max_abs = m;
  *rms_abs = std::sqrt(ss / static_cast<double>(a.size()));
}

}  // namespace

TEST_CASE("cuda families: the fused few-token decode step gives the cuBLAS step's logits") {
  if (skip_without_gpu()) return;
  const testing::ScopedQ8Rows tiles(0);  // two paths to bf16 rounding (test_model_cuda.cpp's TileSteps)
  int ran = 0;
  for (const Source& src : sources()) {
    const std::string family = src.name;
    CAPTURE(family);
    auto unfused = load_cuda(src, false);
    auto fused = load_cuda(src, true);
    if (!unfused || !fused) continue;
    ++ran;
    const int V = fused->config().vocab;
    // Past gemma3's 16-key window and across a KV page (64 tokens).
    const std::vector<int32_t> ids = random_ids(90, V, 18);
    const int prompt = 40;
    auto run = [&](const Model& m, uint64_t* fused_enqueues, uint64_t* replays) {
      const model::CudaForwardStats before = model::cuda_total_stats();
      auto seq = m.new_sequence(128);
      REQUIRE(seq.ok());
      std::vector<float> logits, out;
      REQUIRE(m.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kLast, &logits)
                  .ok());
      for (size_t i = prompt; i < ids.size(); ++i) {
        const Status st = m.forward(*seq, {ids[i]}, {}, LogitsMode::kLast, &logits);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        out.insert(out.end(), logits.begin(), logits.end());
      }
      const model::CudaForwardStats after = model::cuda_total_stats();
      *fused_enqueues = after.fused_step_enqueues - before.fused_step_enqueues;
      *replays = after.graph_replays - before.graph_replays;
      return out;
    };
    uint64_t unfused_enqueues = 0, fused_enqueues = 0, unfused_replays = 0, fused_replays = 0;
    const std::vector<float> a = run(*unfused, &unfused_enqueues, &unfused_replays);
    const std::vector<float> b = run(*fused, &fused_enqueues, &fused_replays);
    CHECK(unfused_enqueues == 0);
    CHECK(fused_enqueues >= 2);  // the plain warm-up step and the captured one (then graph replays)
    CHECK(fused_replays >= 40);
    double max_abs = 0, rms_abs = 0;
    diff(a, b.data(), &max_abs, &rms_abs);
    const double scale = rms(a);
    MESSAGE(family << ": fused vs cuBLAS decode over " << ids.size() - prompt << " steps: max "
                   << 100 * max_abs / scale << "%, RMS " << 100 * rms_abs / scale << "% of logit RMS");
    CHECK(max_abs <= 0.02 * scale);
    CHECK(rms_abs <= 0.005 * scale);
  }
  if (ran == 0) flashscope::testing::mark_skipped();
}

TEST_CASE("cuda families: forward_batch rows give each sequence's own decode step") {
  if (skip_without_gpu()) return;
  const testing::ScopedQ8Rows tiles(0);  // two paths to bf16 rounding (test_model_cuda.cpp's TileSteps)
  int ran = 0;
  for (const Source& src : sources()) {
    const std::string family = src.name;
    CAPTURE(family);
    auto model = load_cuda(src, true);
    if (!model) continue;
    ++ran;
    const int V = model->config().vocab;
    // Prompts of different lengths: some inside gemma3's window, some past it.
    const int lengths[] = {5, 17, 40, 70};
    const int batch = static_cast<int>(std::size(lengths));
    std::vector<Sequence> together, alone;
    for (int i = 0; i < batch; ++i) {
      const std::vector<int32_t> prompt = random_ids(lengths[i], V, 50 + static_cast<uint64_t>(i));
      for (std::vector<Sequence>* set : {&together, &alone}) {
        auto seq = model->new_sequence(128);
        REQUIRE(seq.ok());
        REQUIRE(model->forward(*seq, prompt, {}, LogitsMode::kNone, nullptr).ok());
        set->push_back(std::move(seq).value());
      }
    }
    std::vector<Sequence*> ptrs;
    for (Sequence& s : together) ptrs.push_back(&s);
    double worst_rel = 0;
    for (int step = 0; step < 6; ++step) {
      const std::vector<int32_t> next = random_ids(batch, V, 200 + static_cast<uint64_t>(step));
      std::vector<float> rows;
      const Status st = model->forward_batch(ptrs, next, &rows);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      REQUIRE(rows.size() == static_cast<size_t>(batch) * static_cast<size_t>(V));
      for (int i = 0; i < batch; ++i) {
        std::vector<float> want;
        REQUIRE(model->forward(alone[static_cast<size_t>(i)], {next[static_cast<size_t>(i)]}, {}, LogitsMode::kLast,
                               &want)
                    .ok());
        double max_abs = 0, rms_abs = 0;
        diff(want, rows.data() + static_cast<size_t>(i) * V, &max_abs, &rms_abs);
        worst_rel = std::max(worst_rel, max_abs / rms(want));
        CHECK_MESSAGE(max_abs <= 0.02 * rms(want), "row ", i, " step ", step, ": max |diff| ", max_abs);
      }
    }
    MESSAGE(family << ": batch of " << batch << " vs own steps: worst max |diff| " << 100 * worst_rel
                   << "% of the row's RMS");
  }
  if (ran == 0) flashscope::testing::mark_skipped();
}

TEST_CASE("cuda families: Q8_0 weights kept in their blocks give the bf16 path's logits") {
  if (skip_without_gpu()) return;
  const testing::ScopedQ8Rows tiles(0);  // two paths to bf16 rounding (test_model_cuda.cpp's TileSteps)
  int ran = 0;
  for (const char* family : kFamilies) {
    CAPTURE(family);
    const Source src{family, family, {}};
    auto quant = load_cuda(src, true, "q8_0", WeightFormat::kQuantized);
    auto bf16 = load_cuda(src, true, "q8_0", WeightFormat::kBf16);
    if (!quant || !bf16) continue;
    ++ran;
    CHECK(quant->device_weight_bytes() < bf16->device_weight_bytes());
    const int V = quant->config().vocab;
    // A prompt (the many-row path), then decode steps past gemma3's window
    // (the fused kernels over the blocks, replayed from graphs) and a step of 5.
    const std::vector<int32_t> ids = random_ids(90, V, 31);
    const int prompt = 40;
    auto run = [&](const Model& m, uint64_t* fused_enqueues) {
      const model::CudaForwardStats before = model::cuda_total_stats();
      auto seq = m.new_sequence(128);
      REQUIRE(seq.ok());
      std::vector<float> logits, out;
      Status st = m.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kAll,
                            &logits);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      out = logits;
      for (size_t i = prompt; i + 5 < ids.size(); ++i) {
        st = m.forward(*seq, {ids[i]}, {}, LogitsMode::kLast, &logits);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        out.insert(out.end(), logits.begin(), logits.end());
      }
      st = m.forward(*seq, std::vector<int32_t>(ids.end() - 5, ids.end()), {}, LogitsMode::kAll, &logits);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      out.insert(out.end(), logits.begin(), logits.end());
      *fused_enqueues = model::cuda_total_stats().fused_step_enqueues - before.fused_step_enqueues;
      return out;
    };
    uint64_t quant_enqueues = 0, bf16_enqueues = 0;
    const std::vector<float> a = run(*bf16, &bf16_enqueues);
    const std::vector<float> b = run(*quant, &quant_enqueues);
    REQUIRE(a.size() == b.size());
    CHECK(quant_enqueues >= 2);  // decode steps took the fused kernels over the blocks
    double max_abs = 0, rms_abs = 0;
    diff(a, b.data(), &max_abs, &rms_abs);
    const double scale = rms(a);
    MESSAGE(family << ": Q8_0 in blocks vs bf16 over " << a.size() / static_cast<size_t>(V) << " positions: max "
                   << 100 * max_abs / scale << "%, RMS " << 100 * rms_abs / scale << "% of logit RMS");
    CHECK(max_abs <= 0.07 * scale);
    CHECK(rms_abs <= 0.015 * scale);
  }
  if (ran == 0) flashscope::testing::mark_skipped();
}
