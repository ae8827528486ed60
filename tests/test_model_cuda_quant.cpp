// The CUDA engine with its weights kept in their GGUF blocks
// (WeightFormat::kQuantized) against the same engine with bf16
// weights (kBf16), on the same model:
//  * synthetic models (the shared variants, a Q4_K_M mix whose attn_v and
//    ffn_down are Q6_K in some layers and whose tied embeddings are Q6_K, and
//    Q5_K matrices): a prompt's logits (the many-row path: dequantized slices
//    for cuBLAS), decode steps of one token (the fused kernels over the
//    blocks, replayed from CUDA graphs) and of five tokens;
//  * the weights' device memory: at most 1.1× the file's tensor bytes;
//  * the real SmolLM2-135M (when present): top-1 agreement with the bf16
//    path over the reference fixture's positions, and the greedy answer to
//    "What is the capital of France?" names Paris;
//  * both again with the int8 GEMV taking the decode steps (its own bounds,
//    beside its case: its inputs are rounded to int8).
//
// Bounds. Each path is within kCudaBounds of the float64 reference
// (test_model_cuda.cpp: max 7%, RMS 1.5% of the logit RMS, about twice what
// bf16 rounding gives); both paths multiply by the same weights (every
// quantized kernel rounds the dequantized value to bf16, as the bf16 load
// does), so the two differ only in the order of their sums, by less than
// that bound. A wrong nibble, scale or row
// of one block type moves logits by tens of percent. Top-1 agreement on the
// real model: at least 98% of positions (the criterion).
//
// Without a CUDA device every case says it was skipped and passes.
// On the GPU machine: flashscope-tests -tc="cuda quant*"
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/model_ops_cuda.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/gpu.hpp"
#include "support/json_fixture.hpp"
#include "support/llama_reference.hpp"
#include "support/model_path.hpp"
#include "support/q8_steps.hpp"
#include "support/random.hpp"
#include "support/synthetic_llama.hpp"

using namespace flashscope;
using flashscope::testing::compare_logits;
using flashscope::testing::LogitError;
using flashscope::testing::SyntheticLlama;
using flashscope::testing::skip_without_gpu;

namespace {

Model load(const std::vector<uint8_t>& bytes, WeightFormat weights) {
  auto file = GgufFile::from_buffer(bytes);
  REQUIRE_MESSAGE(file.ok(), file.status().to_string());
  ModelOptions o;
  o.device = Device::kCuda;
  o.weights = weights;
  auto model = Model::from_gguf(std::move(file).value(), o);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

// A prompt's logits (kAll), then `steps` decode steps of one token and two of five, their last logits.
std::vector<float> run(const Model& m, const std::vector<int32_t>& ids, int prompt, int steps) {
  auto seq = m.new_sequence(256);
  REQUIRE(seq.ok());
  std::vector<float> logits, out;
  Status s = m.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kAll, &logits);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  out = logits;
  size_t at = static_cast<size_t>(prompt);
  for (int i = 0; i < steps; ++i, ++at) {
    s = m.forward(*seq, {ids[at]}, {}, LogitsMode::kLast, &logits);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    out.insert(out.end(), logits.begin(), logits.end());
  }
  for (int i = 0; i < 2; ++i, at += 5) {
    s = m.forward(*seq, std::vector<int32_t>(ids.begin() + at, ids.begin() + at + 5), {}, LogitsMode::kAll, &logits);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

std::vector<flashscope::testing::SyntheticVariant> quant_variants() {
  auto v = flashscope::testing::synthetic_variants();
  {
    SyntheticLlama s;
    s.n_layers = 8;
    s.hidden = 256;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ffn = 512;
    s.vocab = 300;
    s.matrix_type = GgmlType::kQ4_K;
    s.more_bits_type = GgmlType::kQ6_K;
    s.embd_type = GgmlType::kQ6_K;
    s.seed = 21;
    v.push_back({"Q4_K_M mix: Q4_K, Q6_K attn_v/ffn_down in some layers, Q6_K tied embeddings", s});
  }
  {
    SyntheticLlama s;
    s.n_layers = 3;
    s.hidden = 256;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.head_dim = 128;
    s.rope_dim = 128;
    s.ffn = 768;
    s.vocab = 200;
    s.matrix_type = GgmlType::kQ5_K;
    s.tied = false;
    s.output_type = GgmlType::kQ5_0;
    s.embd_type = GgmlType::kQ4_0;
    s.seed = 22;
    v.push_back({"Q5_K matrices, Q4_0 embeddings, untied Q5_0 head, D128", s});
  }
  return v;
}

}  // namespace

TEST_CASE("cuda quant: quantized weights give the bf16 path's logits, in at most 1.1x the file's bytes") {
  if (skip_without_gpu()) return;
  // The tiles' bf16 inputs, to the bf16 path's bounds; the int8 GEMV (the
  // default on one-row steps) has its own bounds below.
  testing::ScopedQ8Rows tiles(0);
  for (const auto& v : quant_variants()) {
    const std::string variant = v.name;
    CAPTURE(variant);
    const auto bytes = v.s.build();
    const Model quant = load(bytes, WeightFormat::kQuantized);
    const Model bf16 = load(bytes, WeightFormat::kBf16);
    CHECK(quant.device_weight_bytes() > 0);
    CHECK(static_cast<double>(quant.device_weight_bytes()) <= 1.1 * static_cast<double>(quant.weight_bytes()));
    if (v.s.matrix_type != GgmlType::kF32 && v.s.matrix_type != GgmlType::kF16 && v.s.matrix_type != GgmlType::kBF16)
      CHECK(quant.device_weight_bytes() < bf16.device_weight_bytes());
    const std::vector<int32_t> ids = flashscope::testing::random_ids(60, v.s.vocab, 5);
    const uint64_t fused_before = model::cuda_total_stats().fused_step_enqueues;
    const std::vector<float> q = run(quant, ids, 17, 20);
    CHECK(model::cuda_total_stats().fused_step_enqueues > fused_before);  // decode steps took the fused kernels
    const std::vector<float> b = run(bf16, ids, 17, 20);
    REQUIRE(q.size() == b.size());
    const LogitError e = compare_logits(q, b, static_cast<size_t>(v.s.vocab));
    const size_t positions = q.size() / static_cast<size_t>(v.s.vocab);
    MESSAGE(variant << ": quantized vs bf16 over " << positions << " positions: max " << 100 * e.rel() << "%, RMS "
                    << 100 * e.rms_rel() << "% of logit RMS; top-1 differs at " << e.argmax_mismatches);
    CHECK(e.rel() <= 0.07);
    CHECK(e.rms_rel() <= 0.015);
  }
}

// The int8 GEMV (kernels/model/quant_gemv_q8.cuh) takes every few-row step
// (1..8 rows) in this scope.
class Q8Steps : public testing::ScopedQ8Rows {
 public:
  Q8Steps() : ScopedQ8Rows(8) {}
};

// Bounds of the int8 GEMV's decode steps against the bf16 path: its inputs
// are rounded to int8 per block of 32 (uniform within amax/254 an element:
// about 0.5% RMS of a Gaussian block's values) where the bf16 path rounds
// them to bf16 (within 2^-9 relative: about 0.11% RMS), so the logits move
// up to ~5x what bf16 rounding moves them; the bf16 path's own bounds
// (kCudaBounds: 7% max, 1.5% RMS, twice what bf16 rounding gives) scaled by
// 5: 35% max, 7.5% RMS. A wrong block, scale or row moves them by tens of
// percent RMS; the real model's top-1 agreement (98%) is the sharper check.
TEST_CASE("cuda quant: the int8 GEMV's decode steps stay near the bf16 path's logits") {
  if (skip_without_gpu()) return;
  Q8Steps q8;
  for (const auto& v : quant_variants()) {
    const std::string variant = v.name;
    CAPTURE(variant);
    const auto bytes = v.s.build();
    const Model quant = load(bytes, WeightFormat::kQuantized);
    const Model bf16 = load(bytes, WeightFormat::kBf16);
    const std::vector<int32_t> ids = flashscope::testing::random_ids(60, v.s.vocab, 5);
    const std::vector<float> q = run(quant, ids, 17, 20);
    const std::vector<float> b = run(bf16, ids, 17, 20);
    REQUIRE(q.size() == b.size());
    const LogitError e = compare_logits(q, b, static_cast<size_t>(v.s.vocab));
    const size_t positions = q.size() / static_cast<size_t>(v.s.vocab);
    MESSAGE(variant << ": int8 GEMV vs bf16 over " << positions << " positions: max " << 100 * e.rel() << "%, RMS "
                    << 100 * e.rms_rel() << "% of logit RMS; top-1 differs at " << e.argmax_mismatches);
    CHECK(e.rel() <= 0.35);
    CHECK(e.rms_rel() <= 0.075);
  }
}

namespace {

// SmolLM2-135M on quantized weights against bf16 (top-1 over the fixture's
// positions, prompt and decode) and its greedy answer; RMS bound rms_bound.
void smollm2_agrees(double rms_bound) {
  const std::string path = testing::default_model_path();
  if (!std::ifstream(path).good()) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh, or set FLASHSCOPE_MODEL_DIR)");
    flashscope::testing::mark_skipped();
    return;
  }
  ModelOptions o;
  o.device = Device::kCuda;
  o.weights = WeightFormat::kQuantized;  // kAuto would keep this small model in bf16
  auto quant = Model::load(path, o);
  REQUIRE_MESSAGE(quant.ok(), quant.status().to_string());
  o.weights = WeightFormat::kBf16;
  auto bf16 = Model::load(path, o);
  REQUIRE_MESSAGE(bf16.ok(), bf16.status().to_string());
  MESSAGE("SmolLM2-135M weights: file " << quant->weight_bytes() / 1e6 << " MB, quantized on the device "
                                        << quant->device_weight_bytes() / 1e6 << " MB, bf16 "
                                        << bf16->device_weight_bytes() / 1e6 << " MB");
  CHECK(static_cast<double>(quant->device_weight_bytes()) <= 1.1 * static_cast<double>(quant->weight_bytes()));

  const nlohmann::json fixture =
      testing::read_json_fixture(FLASHSCOPE_SOURCE_DIR "/tests/data/smollm2_reference_logits.json");
  const int V = quant->config().vocab;
  int positions = 0, agree = 0;
  double worst = 0, ss = 0, ss_ref = 0;
  for (const auto& c : fixture.at("cases")) {
    std::vector<int32_t> ids;
    for (const auto& t : c.at("ids")) ids.push_back(t.get<int32_t>());
    // Every position: the prompt's rows, then the same tokens decoded one at a time.
    auto all = [&](const Model& m, bool decode) {
      auto seq = m.new_sequence(static_cast<int>(ids.size()) + 1);
      REQUIRE(seq.ok());
      std::vector<float> out, logits;
      if (!decode) {
        REQUIRE(m.forward(*seq, ids, {}, LogitsMode::kAll, &out).ok());
        return out;
      }
      for (int32_t id : ids) {
        REQUIRE(m.forward(*seq, {id}, {}, LogitsMode::kLast, &logits).ok());
        out.insert(out.end(), logits.begin(), logits.end());
      }
      return out;
    };
    for (bool decode : {false, true}) {
      const std::vector<float> q = all(*quant, decode), b = all(*bf16, decode);
      for (size_t p = 0; p < ids.size(); ++p) {
        const float* qr = q.data() + p * static_cast<size_t>(V);
        const float* br = b.data() + p * static_cast<size_t>(V);
        int qa = 0, ba = 0;
        for (int i = 0; i < V; ++i) {
          if (qr[i] > qr[qa]) qa = i;
          if (br[i] > br[ba]) ba = i;
          const double d = static_cast<double>(qr[i]) - br[i];
          worst = std::max(worst, std::isfinite(d) ? std::fabs(d) : INFINITY);
          ss += d * d;
          ss_ref += static_cast<double>(br[i]) * br[i];
        }
        ++positions;
        agree += qa == ba ? 1 : 0;
      }
    }
  }
  const double rms_rel = std::sqrt(ss / ss_ref);
  MESSAGE("SmolLM2-135M quantized vs bf16: top-1 agrees at " << agree << "/" << positions << ", max |d| " << worst
                                                             << ", RMS " << 100 * rms_rel << "% of logit RMS");
  CHECK(positions > 0);
  CHECK(agree >= 0.98 * positions);
  CHECK(rms_rel <= rms_bound);

  const std::string prompt =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  auto session = Session::create(*quant, SessionOptions{256});
  REQUIRE(session.ok());
  GenerateParams gp;
  gp.max_tokens = 24;
  gp.sampling.temperature = 0.0f;
  std::string answer;
  auto stats = session->generate(quant->tokenizer().encode(prompt, true), gp, [&](const TokenEvent& e) {
    answer += e.text;
    return true;
  });
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  MESSAGE("SmolLM2-135M (quantized weights, greedy): " << answer);
  CHECK(answer.find("Paris") != std::string::npos);
}

}  // namespace

TEST_CASE("cuda quant: SmolLM2-135M on quantized weights agrees with bf16 and answers Paris") {
  if (skip_without_gpu()) return;
  testing::ScopedQ8Rows tiles(0);  // the tiles' bf16 inputs, to the bf16 path's bound
  smollm2_agrees(0.015);
}

TEST_CASE("cuda quant: SmolLM2-135M with the int8 GEMV's decode steps agrees with bf16 and answers Paris") {
  if (skip_without_gpu()) return;
  Q8Steps q8;
  smollm2_agrees(0.075);  // the int8 GEMV's bound above
}
