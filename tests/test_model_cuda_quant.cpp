// The CUDA engine with its weights kept in their GGUF blocks
// (WeightFormat::kQuantized) against the same engine with bf16
// weights (kBf16), on the same model:
//  * synthetic models (the shared variants, a Q4_K_M mix whose attn_v and
//    ffn_down are Q6_K in some layers and whose tied embeddings are Q6_K, and
//    Q5_K matrices): a prompt's logits (the many-row path: dequantized slices
//    for cuBLAS), decode steps of one token (the fused kernels over the
//    blocks, replayed from CUDA graphs) and of five tokens;
//  * the weights' device memory: at most 1.1× the file's tensor bytes;
//  * kAuto's LM head in its blocks beside bf16 layers (a synthetic 131072-row
//    vocabulary, and the real Gemma-3-270M when present): the same logits as
//    kBf16 on every path (prompt, decode, batches of 3 and 12), the head's
//    blocks the only extra device bytes;
//  * the real SmolLM2-135M (when present): top-1 agreement with the bf16
//    path over the reference fixture's positions, and the greedy answer to
//    "What is the capital of France?" names Paris.
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
#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/gpu.hpp"
#include "support/json_fixture.hpp"
#include "support/llama_reference.hpp"
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

TEST_CASE("cuda quant: SmolLM2-135M on quantized weights agrees with bf16 and answers Paris") {
  if (skip_without_gpu()) return;
  const char* dir = std::getenv("FLASHSCOPE_MODEL_DIR");
  const std::string path =
      std::string(dir && *dir ? dir : FLASHSCOPE_SOURCE_DIR "/assets/models") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
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
  CHECK(rms_rel <= 0.015);

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

// kAuto on a small model keeps its layers in bf16, and an LM head of 64M
// weights or more in its blocks too (forward_cuda.cpp, auto_head_in_blocks):
// decode steps of up to 8 rows read the blocks (the fused kernel), larger
// ones a bf16 copy (cuBLAS). Both multiply by the bf16 path's weights, so
// every logit row stays within the bounds above of kBf16's, which keeps
// one bf16 head; the device holds the head's blocks on top of kBf16's bytes.
TEST_CASE("cuda quant: kAuto keeps a large vocabulary's LM head in its blocks, kBf16 keeps bf16") {
  if (skip_without_gpu()) return;
  SyntheticLlama s;
  s.n_layers = 2;
  s.hidden = 512;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.ffn = 1024;
  s.vocab = 131072;  // 67M head weights (tied Q8_0 embeddings): above the rule's 64M
  s.seed = 31;
  const auto bytes = s.build();
  const Model automatic = load(bytes, WeightFormat::kAuto);
  const Model bf16 = load(bytes, WeightFormat::kBf16);
  CHECK(automatic.weight_format() == WeightFormat::kBf16);  // the layers: a small model
  const uint64_t head_blocks = static_cast<uint64_t>(s.vocab) * (s.hidden / 32) * 34;  // Q8_0: 34 bytes a 32
  const uint64_t a_bytes = automatic.device_weight_bytes(), b_bytes = bf16.device_weight_bytes();
  MESSAGE("device weights: kAuto " << a_bytes / 1e6 << " MB, kBf16 " << b_bytes / 1e6 << " MB, head blocks "
                                   << head_blocks / 1e6 << " MB");
  CHECK(a_bytes >= b_bytes + head_blocks);
  CHECK(a_bytes <= b_bytes + head_blocks + 65536);  // alignment only: no third copy

  // A prompt (kAll: 17 rows, the bf16 copy), single-token steps and
  // five-token steps (the blocks).
  const std::vector<int32_t> ids = flashscope::testing::random_ids(60, s.vocab, 8);
  const uint64_t fused_before = model::cuda_total_stats().fused_step_enqueues;
  const std::vector<float> a = run(automatic, ids, 17, 20);
  CHECK(model::cuda_total_stats().fused_step_enqueues > fused_before);
  const std::vector<float> b = run(bf16, ids, 17, 20);
  REQUIRE(a.size() == b.size());
  const LogitError e = compare_logits(a, b, static_cast<size_t>(s.vocab));
  MESSAGE("kAuto (head in blocks) vs kBf16: max " << 100 * e.rel() << "%, RMS " << 100 * e.rms_rel()
                                                  << "% of logit RMS; top-1 differs at " << e.argmax_mismatches);
  CHECK(e.rel() <= 0.07);
  CHECK(e.rms_rel() <= 0.015);

  // Batched decode steps of 3 sequences (the blocks) and of 12 (the bf16 copy).
  for (int n : {3, 12}) {
    CAPTURE(n);
    auto step = [&](const Model& m) {
      std::vector<Sequence> seqs;
      std::vector<Sequence*> ptrs;
      std::vector<int32_t> next;
      for (int i = 0; i < n; ++i) {
        auto seq = m.new_sequence(64);
        REQUIRE(seq.ok());
        seqs.push_back(std::move(seq).value());
      }
      for (int i = 0; i < n; ++i) {
        const std::vector<int32_t> prompt(ids.begin() + i, ids.begin() + i + 4);
        REQUIRE(m.forward(seqs[static_cast<size_t>(i)], prompt, {}, LogitsMode::kNone, nullptr).ok());
        ptrs.push_back(&seqs[static_cast<size_t>(i)]);
        next.push_back(ids[static_cast<size_t>(i + 4)]);
      }
      std::vector<float> logits;
      const Status st = m.forward_batch(ptrs, next, &logits);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      return logits;
    };
    const std::vector<float> ab = step(automatic), bb = step(bf16);
    REQUIRE(ab.size() == bb.size());
    const LogitError eb = compare_logits(ab, bb, static_cast<size_t>(s.vocab));
    CHECK(eb.rel() <= 0.07);
    CHECK(eb.rms_rel() <= 0.015);
  }

  // A vocabulary under the rule's size: kAuto is kBf16, byte for byte.
  const auto small = flashscope::testing::synthetic_variants()[0].s.build();
  CHECK(load(small, WeightFormat::kAuto).device_weight_bytes() == load(small, WeightFormat::kBf16).device_weight_bytes());
}

TEST_CASE("cuda quant: Gemma-3-270M under kAuto reads its Q8_0 LM head in place and agrees with kBf16") {
  if (skip_without_gpu()) return;
  const char* dir = std::getenv("FLASHSCOPE_MODEL_DIR");
  const std::string path =
      std::string(dir && *dir ? dir : FLASHSCOPE_SOURCE_DIR "/assets/models") + "/gemma-3-270m-q4_k_m.gguf";
  if (!std::ifstream(path).good()) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh gemma3-270m, or set FLASHSCOPE_MODEL_DIR)");
    flashscope::testing::mark_skipped();
    return;
  }
  ModelOptions o;
  o.device = Device::kCuda;
  o.weights = WeightFormat::kAuto;
  auto automatic = Model::load(path, o);
  REQUIRE_MESSAGE(automatic.ok(), automatic.status().to_string());
  o.weights = WeightFormat::kBf16;
  auto bf16 = Model::load(path, o);
  REQUIRE_MESSAGE(bf16.ok(), bf16.status().to_string());
  const int V = automatic->config().vocab;
  const uint64_t head_blocks = static_cast<uint64_t>(V) * (automatic->config().hidden / 32) * 34;  // Q8_0 in the file
  MESSAGE("Gemma-3-270M device weights: kAuto " << automatic->device_weight_bytes() / 1e6 << " MB, kBf16 "
                                                << bf16->device_weight_bytes() / 1e6 << " MB");
  CHECK(automatic->weight_format() == WeightFormat::kBf16);
  CHECK(automatic->device_weight_bytes() >= bf16->device_weight_bytes() + head_blocks);
  CHECK(automatic->device_weight_bytes() <= bf16->device_weight_bytes() + head_blocks + 65536);

  // Every position of two prompts decoded one token at a time (the blocks),
  // and the first prompt's rows at once (kAll: the bf16 copy).
  const std::vector<std::string> prompts = {"The capital of France is a city of",
                                            "Water boils at 100 degrees Celsius. Ice melts at"};
  int positions = 0, agree = 0;
  double ss = 0, ss_ref = 0;
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    const std::vector<int32_t> ids = automatic->tokenizer().encode(prompts[pi], true);
    for (bool decode : {true, false}) {
      auto all = [&](const Model& m) {
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
      const std::vector<float> a = all(*automatic), b = all(*bf16);
      REQUIRE(a.size() == b.size());
      for (size_t p = 0; p < ids.size(); ++p) {
        const float* ar = a.data() + p * static_cast<size_t>(V);
        const float* br = b.data() + p * static_cast<size_t>(V);
        int aa = 0, ba = 0;
        for (int i = 0; i < V; ++i) {
          if (ar[i] > ar[aa]) aa = i;
          if (br[i] > br[ba]) ba = i;
          const double d = static_cast<double>(ar[i]) - br[i];
          ss += std::isfinite(d) ? d * d : INFINITY;
          ss_ref += static_cast<double>(br[i]) * br[i];
        }
        ++positions;
        agree += aa == ba ? 1 : 0;
      }
    }
  }
  const double rms_rel = std::sqrt(ss / ss_ref);
  MESSAGE("Gemma-3-270M kAuto vs kBf16: top-1 agrees at " << agree << "/" << positions << ", RMS " << 100 * rms_rel
                                                          << "% of logit RMS");
  // The criterion against llama.cpp (95%): the two paths differ only
  // in the order of their sums, so only a near-tie at the top can flip.
  CHECK(positions > 0);
  CHECK(agree >= 0.95 * positions);
  CHECK(rms_rel <= 0.015);
}
