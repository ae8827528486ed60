// The CPU LLM engine: config parsing and validation, tensor checks with the
// messages a user sees, the quantized matmul kernels, the forward pass
// against a naive float reference written here, KV-cache behaviour
// (incremental decode = full recompute, errors leave the cache unchanged),
// and the default model's logits against HF transformers (fixture made by
// scripts/make_reference_logits.py; skipped when the model is absent).
//
// Synthetic models (tests/support/synthetic_llama.hpp) are tiny llama GGUFs
// with random weight blocks: 2 layers, hidden 64, 4 q-heads over 2 kv-heads
// (GQA 2), head_dim 64 (written as key_length, since hidden / heads = 16),
// FFN 96, vocab 100.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_load.hpp"
#include "backends/cpu/quant_matmul.hpp"
#include "attention/cpu/decode_attention.hpp"
#include "flashscope/device.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/llama_reference.hpp"
#include "support/model_path.hpp"
#include "support/random.hpp"
#include "support/json_fixture.hpp"
#include "support/skip.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::GgmlType;
using flashscope::GgufFile;
using flashscope::LogitsMode;
using flashscope::Model;
using flashscope::ModelConfig;
using flashscope::Sequence;
using flashscope::StatusCode;
using flashscope::testing::SyntheticLlama;

namespace {

Model load_synthetic(const SyntheticLlama& s) {
  auto file = GgufFile::from_buffer(s.build());
  REQUIRE_MESSAGE(file.ok(), file.status().to_string());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

// The status of loading a synthetic model (for the error cases).
flashscope::Status load_status(const SyntheticLlama& s) {
  auto file = GgufFile::from_buffer(s.build());
  if (!file.ok()) return file.status();
  return Model::from_gguf(std::move(file).value()).status();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The naive reference (every weight dequantized, plain loops, double) is
// tests/support/llama_reference.hpp, shared with the CUDA engine's tests.
using flashscope::testing::LogitError;
using flashscope::testing::load_reference;
using flashscope::testing::reference_forward;
using flashscope::testing::RefModel;
LogitError compare(const std::vector<float>& got, const std::vector<std::vector<double>>& ref) {
  return flashscope::testing::compare_logits(got, ref);
}

// max |a[i] − b[i]| over a's size; b points at as many values.
double max_abs_diff(const std::vector<float>& a, const float* b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

using flashscope::testing::random_ids;

std::vector<float> run_all(const Model& m, const std::vector<int32_t>& ids) {
  auto seq = m.new_sequence();
  REQUIRE(seq.ok());
  std::vector<float> logits;
  const flashscope::Status s = m.forward(*seq, ids, {}, LogitsMode::kAll, &logits);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return logits;
}

}  // namespace

// --- config ---------------------------------------------------------------------

TEST_CASE("model config: read from llama GGUF keys") {
  SyntheticLlama s;
  s.rope_base = 50000.0f;
  s.rope_dim = 32;
  s.tied = false;
  auto file = GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto c = ModelConfig::from_gguf(file.value());
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  CHECK(c->architecture == "llama");
  CHECK(c->name == "synthetic");
  CHECK(c->n_layers == 2);
  CHECK(c->hidden == 64);
  CHECK(c->n_heads == 4);
  CHECK(c->n_kv_heads == 2);
  CHECK(c->head_dim == 64);
  CHECK(c->ffn == 96);
  CHECK(c->vocab == 100);
  CHECK(c->context_length == 512);
  CHECK(c->rope_base == 50000.0f);
  CHECK(c->rope_dim == 32);
  CHECK(c->rms_eps == doctest::Approx(1e-5f));
  CHECK_FALSE(c->tied_embeddings);
}

TEST_CASE("model config: optional keys take llama.cpp's defaults") {
  SyntheticLlama s;
  s.hidden = 128;
  s.n_heads = 2;
  s.n_kv_heads = 2;
  s.skip_keys = {"llama.attention.head_count_kv", "llama.attention.key_length", "llama.attention.value_length",
                 "llama.rope.dimension_count", "llama.rope.freq_base", "llama.vocab_size"};
  auto file = GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto c = ModelConfig::from_gguf(file.value());
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  CHECK(c->n_kv_heads == 2);     // = head_count
  CHECK(c->head_dim == 64);      // hidden / head_count
  CHECK(c->rope_dim == 64);      // = head_dim
  CHECK(c->rope_base == 10000.0f);
  CHECK(c->vocab == 100);        // from tokenizer.ggml.tokens
  CHECK(c->tied_embeddings);
  CHECK(load_status(s).ok());
}

TEST_CASE("model config: the default model's values come from its GGUF") {
  const std::string path = flashscope::testing::default_model_path();
  if (!std::ifstream(path).good()) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  auto model = Model::load(path);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  const ModelConfig& c = model->config();
  CHECK(c.n_layers == 30);
  CHECK(c.hidden == 576);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.ffn == 1536);
  CHECK(c.vocab == 49152);
  CHECK(c.context_length == 8192);
  CHECK(c.rope_base == 100000.0f);
  CHECK(c.rope_dim == 64);
  CHECK(c.tied_embeddings);
  CHECK(model->tokenizer().vocab_size() == 49152);
  CHECK(model->stop_tokens() == std::vector<int32_t>{2, 0});  // eos <|im_end|>, then <|endoftext|>
  CHECK(contains(model->chat_template(), "<|im_start|>"));
  // Weights stay in their blocks: about the file's size, far from 135M floats.
  CHECK(model->weight_bytes() > 90'000'000);
  CHECK(model->weight_bytes() < 100'000'000);
}

// --- errors a user sees -------------------------------------------------------------

TEST_CASE("model load: bad or mismatched GGUFs are refused with the tensor or key named") {
  struct Case {
    const char* what;
    std::function<void(SyntheticLlama&)> edit;
    StatusCode code;
    std::vector<std::string> message_has;
  };
  const std::vector<Case> cases = {
      {"architecture", [](SyntheticLlama& s) { s.string_override["general.architecture"] = "gpt2"; },
       StatusCode::kUnsupported, {"architecture 'gpt2'", "llama"}},
      {"missing key", [](SyntheticLlama& s) { s.skip_keys = {"llama.block_count"}; }, StatusCode::kCorruptData,
       {"llama.block_count"}},
      {"missing eps", [](SyntheticLlama& s) { s.skip_keys = {"llama.attention.layer_norm_rms_epsilon"}; },
       StatusCode::kCorruptData, {"layer_norm_rms_epsilon"}},
      {"head_dim", [](SyntheticLlama& s) { s.head_dim = 48; s.rope_dim = 48; }, StatusCode::kUnsupported,
       {"head_dim 48"}},
      {"gqa ratio", [](SyntheticLlama& s) { s.n_kv_heads = 3; }, StatusCode::kCorruptData, {"head_count_kv 3"}},
      {"rope dims", [](SyntheticLlama& s) { s.rope_dim = 80; }, StatusCode::kCorruptData, {"dimension_count 80"}},
      {"rope scaling", [](SyntheticLlama& s) {
         s.extra = [](flashscope::testing::GgufBuilder& b) { b.add_string("llama.rope.scaling.type", "yarn"); };
       }, StatusCode::kUnsupported, {"rope scaling 'yarn'"}},
      {"missing tensor", [](SyntheticLlama& s) { s.skip_tensors = {"blk.1.ffn_up.weight"}; },
       StatusCode::kCorruptData, {"'blk.1.ffn_up.weight' is missing"}},
      {"missing norm", [](SyntheticLlama& s) { s.skip_tensors = {"output_norm.weight"}; }, StatusCode::kCorruptData,
       {"'output_norm.weight' is missing"}},
      {"wrong shape", [](SyntheticLlama& s) { s.shape_override["blk.0.attn_k.weight"] = {64, 192}; },
       StatusCode::kCorruptData, {"'blk.0.attn_k.weight'", "[64, 192]", "expected [64, 128]"}},
      {"wrong embedding rows", [](SyntheticLlama& s) { s.shape_override["token_embd.weight"] = {64, 99}; },
       StatusCode::kCorruptData, {"'token_embd.weight'", "expected [64, 100]"}},
      {"wrong norm", [](SyntheticLlama& s) { s.shape_override["blk.0.ffn_norm.weight"] = {32}; },
       StatusCode::kCorruptData, {"'blk.0.ffn_norm.weight'", "[32]"}},
      {"unsupported type", [](SyntheticLlama& s) { s.type_override["blk.1.attn_v.weight"] = GgmlType::kQ8_K; s.hidden = 256; },
       StatusCode::kUnsupported, {"'blk.1.attn_v.weight'", "Q8_K"}},
      {"bias on Q only", [](SyntheticLlama& s) {  // llama's biases are optional, but all three or none
         s.extra = [](flashscope::testing::GgufBuilder& b) {
           b.add_tensor("blk.0.attn_q.bias", GgmlType::kF32, {256}, std::vector<uint8_t>(1024, 0));
         };
       }, StatusCode::kCorruptData, {"'blk.0.attn_k.bias' is missing", "Q, K and V biases"}},
      {"bias of the wrong size", [](SyntheticLlama& s) {
         s.extra = [](flashscope::testing::GgufBuilder& b) {
           b.add_tensor("blk.0.attn_q.bias", GgmlType::kF32, {128}, std::vector<uint8_t>(512, 0));
         };
       }, StatusCode::kCorruptData, {"'blk.0.attn_q.bias'", "expected [256]"}},
      {"tokenizer model", [](SyntheticLlama& s) { s.string_override["tokenizer.ggml.model"] = "t5"; },
       StatusCode::kUnsupported, {"tokenizer model 't5'", "gpt2", "llama"}},
      {"SentencePiece without scores", [](SyntheticLlama& s) { s.string_override["tokenizer.ggml.model"] = "llama"; },
       StatusCode::kCorruptData, {"tokenizer.ggml.scores"}},
      {"pre-tokenizer", [](SyntheticLlama& s) { s.string_override["tokenizer.ggml.pre"] = "deepseek-coder"; },
       StatusCode::kUnsupported, {"'deepseek-coder'", "smollm", "llama-bpe", "qwen2"}},
      {"vocab mismatch", [](SyntheticLlama& s) {
         s.skip_keys = {"llama.vocab_size"};
         s.extra = [](flashscope::testing::GgufBuilder& b) { b.add_u32("llama.vocab_size", 120); };
       }, StatusCode::kCorruptData, {"'token_embd.weight'", "expected [64, 120]"}},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    SyntheticLlama s;
    c.edit(s);
    const flashscope::Status st = load_status(s);
    CAPTURE(st.to_string());
    CHECK(st.code() == c.code);
    for (const std::string& m : c.message_has) CHECK_MESSAGE(contains(st.message(), m), m);
  }
}

TEST_CASE("model load: a missing file and a CUDA request fail cleanly") {
  auto missing = Model::load("/nonexistent/model.gguf");
  CHECK(missing.status().code() == StatusCode::kIoError);
  SyntheticLlama s;
  auto file = GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  flashscope::ModelOptions o;
  o.device = flashscope::Device::kCuda;
  // Without a CUDA device (or build) the CUDA backend is refused cleanly; with
  // one, tests/test_model_cuda.cpp covers the load.
  if (!flashscope::cuda_available())
    CHECK(Model::from_gguf(std::move(file).value(), o).status().code() == StatusCode::kUnsupported);
  CHECK_FALSE(Model().loaded());
  Sequence empty;
  std::vector<float> logits;
  CHECK(Model().forward(empty, {1}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("model load: the weight format kAuto resolves by the model's size, a named one is kept") {
  using flashscope::WeightFormat;
  SyntheticLlama s;  // a few thousand weights: far below kAutoBf16MaxWeights
  for (WeightFormat asked : {WeightFormat::kAuto, WeightFormat::kQuantized, WeightFormat::kBf16}) {
    INFO(flashscope::weight_format_name(asked));
    auto file = GgufFile::from_buffer(s.build());
    REQUIRE(file.ok());
    flashscope::ModelOptions o;
    CHECK(o.weights == WeightFormat::kAuto);  // the default
    o.weights = asked;
    auto model = Model::from_gguf(std::move(file).value(), o);
    REQUIRE_MESSAGE(model.ok(), model.status().to_string());
    CHECK(model->weight_format() == (asked == WeightFormat::kAuto ? WeightFormat::kBf16 : asked));
  }
  CHECK(Model().weight_format() == WeightFormat::kAuto);  // nothing loaded, nothing resolved
  for (const char* name : {"auto", "quantized", "bf16"}) {
    WeightFormat f = WeightFormat::kBf16;
    REQUIRE(flashscope::parse_weight_format(name, &f));
    CHECK(std::string(flashscope::weight_format_name(f)) == name);
  }
  WeightFormat f = WeightFormat::kQuantized;
  CHECK_FALSE(flashscope::parse_weight_format("q4", &f));
  CHECK(f == WeightFormat::kQuantized);
  auto file = GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  flashscope::ModelOptions o;
  o.weights = static_cast<WeightFormat>(7);
  CHECK(Model::from_gguf(std::move(file).value(), o).status().code() == StatusCode::kInvalidArgument);
}

// --- quantized matmul kernels --------------------------------------------------------

TEST_CASE("quant matmul: every weight type against dequantize-then-dot, every build this CPU runs") {
  using flashscope::cpu::BlockQ8;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37;  // odd, not a tile multiple
  // 256: one K-quant super-block; 768: three, so block offsets past the first are used;
  // 1280: 40 blocks, past the 16-token GEMM's column segment (32 blocks, quant_matmul_t16.cpp)
  for (const int64_t cols : {int64_t{256}, int64_t{768}, int64_t{1280}})
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                        GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_K, GgmlType::kQ6_K,
                        GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ5_K}) {
    const std::string type_name = flashscope::ggml_type_name(type);
    CAPTURE(type_name);
    CAPTURE(cols);
    const auto bytes = SyntheticLlama::random_blocks(type, rows * cols, 1.0f, rng);
    flashscope::cpu::QuantMatrix w{type, rows, cols, bytes.size() / static_cast<uint64_t>(rows), bytes.data()};
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    REQUIRE(flashscope::dequantize_row(type, bytes.data(), wf.data(), rows * cols).ok());
    // decode, a tail, one full token tile, tiles + tail; two 16-token tiles (VNNI: quant_matmul_t16.hpp) + a 4-tile + 1
    for (int n : {1, 3, 4, 9, 37}) {
      CAPTURE(n);
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (float& v : x) v = normal(rng);
      std::vector<BlockQ8> xq(static_cast<size_t>(n * cols / 32));
      for (int t = 0; t < n; ++t) flashscope::cpu::quantize_row_q8(x.data() + t * cols, xq.data() + t * cols / 32, cols);
      // The exact answer for what each kernel multiplies: the Q8 types see the
      // quantized activations, the float fallback the floats.
      const bool q8 = flashscope::cpu::matmul_uses_q8(type);
      std::vector<double> want(static_cast<size_t>(n * rows));
      double scale = 0;
      for (int t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double acc = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const BlockQ8& b = xq[static_cast<size_t>(t * cols / 32 + c / 32)];
            const double xv = q8 ? static_cast<double>(b.d) * b.qs[c % 32] : x[static_cast<size_t>(t * cols + c)];
            acc += static_cast<double>(wf[static_cast<size_t>(r * cols + c)]) * xv;
          }
          want[static_cast<size_t>(t * rows + r)] = acc;
          scale = std::max(scale, std::fabs(acc));
        }
      }
      std::vector<flashscope::cpu::TileQ8> tiles(static_cast<size_t>(n / 4 * cols / 32));
      flashscope::cpu::pack_q8_tiles(xq.data(), n, cols / 32, tiles.data());
      for (auto isa : {flashscope::cpu::CpuIsa::kPortable, flashscope::cpu::CpuIsa::kAvx2,
                       flashscope::cpu::CpuIsa::kAvx512Vnni, flashscope::cpu::CpuIsa::kNeonDot}) {
        flashscope::cpu::set_cpu_isa(isa);
        if (flashscope::cpu::active_cpu_isa() != isa) continue;  // not on this CPU
        const std::string isa_name = flashscope::cpu::cpu_isa_name(flashscope::cpu::active_cpu_isa());
        CAPTURE(isa_name);
        for (bool use_tiles : {false, true}) {
          CAPTURE(use_tiles);
          std::vector<float> y(static_cast<size_t>(n * rows), -1.0f);
          REQUIRE(flashscope::cpu::matmul(w, x.data(), cols, xq.data(), use_tiles ? tiles.data() : nullptr, n, y.data(),
                                          rows)
                      .ok());
          double max_err = 0;
          for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, std::fabs(y[i] - want[i]));
          // Integer sums are exact; what is left is float accumulation of 8-256
          // scaled block sums (and fp16 scales widened exactly): a few ulps of
          // the largest output.
          CHECK(max_err <= 1e-5 * scale);
        }
      }
      flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
    }
  }
  MESSAGE("vector kernels on this CPU: " << std::string(flashscope::cpu::cpu_isa_name(flashscope::cpu::detected_cpu_isa())));
}

TEST_CASE("quant matmul: Q8 activations round to nearest within half a step") {
  std::vector<float> x(64);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& v : x) v = normal(rng);
  x[5] = 0.0f;
  std::vector<flashscope::cpu::BlockQ8> q(2);
  flashscope::cpu::quantize_row_q8(x.data(), q.data(), 64);
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    int sum = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + j)]));
    CHECK(q[static_cast<size_t>(b)].d == doctest::Approx(amax / 127.0f));
    for (int j = 0; j < 32; ++j) {
      CHECK(std::fabs(q[static_cast<size_t>(b)].qs[j] * q[static_cast<size_t>(b)].d - x[static_cast<size_t>(b * 32 + j)]) <=
            0.5f * q[static_cast<size_t>(b)].d * 1.0001f);
      sum += q[static_cast<size_t>(b)].qs[j];
    }
    CHECK(q[static_cast<size_t>(b)].sum == sum);
  }
  std::vector<float> zeros(32, 0.0f);
  flashscope::cpu::quantize_row_q8(zeros.data(), q.data(), 32);
  CHECK(q[0].d == 0.0f);
  CHECK(q[0].sum == 0);
  // A NaN activation: the portable quantizer keeps it as a NaN scale (no int8 holds a NaN), so the
  // block's products are NaN rather than a made-up number.
  const flashscope::cpu::CpuIsa isa = flashscope::cpu::active_cpu_isa();
  flashscope::cpu::set_cpu_isa(flashscope::cpu::CpuIsa::kPortable);
  x[40] = std::numeric_limits<float>::quiet_NaN();
  flashscope::cpu::quantize_row_q8(x.data(), q.data(), 64);
  flashscope::cpu::set_cpu_isa(isa);
  CHECK(!std::isnan(q[0].d));
  CHECK(std::isnan(q[1].d));
  CHECK(q[1].sum == 0);
}

TEST_CASE("quant matmul: each build of the Q8 activation quantizer gives the portable one's bits") {
  using flashscope::cpu::BlockQ8;
  using flashscope::cpu::CpuIsa;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Blocks of: random values at scales 1e-30..1e30, all zeros, exact .5
  // ties (amax 127: 1/d = 1), a lone non-zero, and -0.0.
  const int64_t blocks = 40;
  std::vector<float> x(static_cast<size_t>(blocks * 32));
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = std::pow(10.0f, static_cast<float>(b % 13) * 5.0f - 30.0f);
    for (int j = 0; j < 32; ++j) x[static_cast<size_t>(b * 32 + j)] = normal(rng) * scale;
  }
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(64 + j)] = static_cast<float>(j % 2 ? j : -j) - 0.5f;
  x[64] = 127.0f;
  std::fill(x.begin() + 96, x.begin() + 128, -0.0f);
  x[100] = -3.0f;
  std::vector<std::vector<BlockQ8>> out;
  std::vector<std::string> names;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    flashscope::cpu::set_cpu_isa(isa);
    if (flashscope::cpu::active_cpu_isa() != isa) continue;  // not on this CPU
    names.push_back(flashscope::cpu::cpu_isa_name(isa));
    out.emplace_back(static_cast<size_t>(blocks));
    flashscope::cpu::quantize_row_q8(x.data(), out.back().data(), blocks * 32);
  }
  flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
  REQUIRE(!out.empty());
  CHECK(out[0][2].qs[0] == 127);
  CHECK(out[0][2].qs[1] == 0);   // 0.5 rounds to even
  CHECK(out[0][2].qs[2] == -2);  // -2.5 too
  for (size_t v = 1; v < out.size(); ++v) {
    CAPTURE(names[v]);
    for (int64_t b = 0; b < blocks; ++b) {
      CAPTURE(b);
      const BlockQ8& want = out[0][static_cast<size_t>(b)];
      const BlockQ8& got = out[v][static_cast<size_t>(b)];
      CHECK(std::memcmp(&got.d, &want.d, sizeof want.d) == 0);
      CHECK(got.sum == want.sum);
      CHECK(std::memcmp(got.qs, want.qs, sizeof want.qs) == 0);
    }
  }
  MESSAGE("quantizer builds compared on this CPU: " << out.size());
}

TEST_CASE("quant matmul: the AVX-512 VNNI kernels give the AVX2 kernels' bits") {
  using flashscope::cpu::CpuIsa;
  using flashscope::cpu::BlockQ8;
  if (flashscope::cpu::detected_cpu_isa() != CpuIsa::kAvx512Vnni) {
    MESSAGE("skipped: this CPU has no AVX-512 VNNI");
    return;
  }
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 13;  // odd rows
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                        GgmlType::kQ5_K}) {
    const std::string type_name = flashscope::ggml_type_name(type);
    CAPTURE(type_name);
    // 3 blocks: the one-token kernels' pair loop and its tail; 2 super-blocks for the K-quants.
    const bool k_quant = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K;
    const int64_t cols = k_quant ? 512 : 96;
    const auto bytes = SyntheticLlama::random_blocks(type, rows * cols, 1.0f, rng);
    const flashscope::cpu::QuantMatrix w{type, rows, cols, bytes.size() / static_cast<uint64_t>(rows), bytes.data()};
    for (int n : {1, 4, 9}) {
      CAPTURE(n);
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (float& v : x) v = normal(rng);
      std::vector<BlockQ8> xq(static_cast<size_t>(n * cols / 32));
      for (int t = 0; t < n; ++t) flashscope::cpu::quantize_row_q8(x.data() + t * cols, xq.data() + t * cols / 32, cols);
      std::vector<flashscope::cpu::TileQ8> tiles(static_cast<size_t>(n / 4 * cols / 32));
      flashscope::cpu::pack_q8_tiles(xq.data(), n, cols / 32, tiles.data());
      for (bool use_tiles : {false, true}) {
        CAPTURE(use_tiles);
        std::vector<float> y[2];
        int k = 0;
        for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
          flashscope::cpu::set_cpu_isa(isa);
          y[k].assign(static_cast<size_t>(n * rows), -1.0f);
          REQUIRE(flashscope::cpu::matmul(w, x.data(), cols, xq.data(), use_tiles ? tiles.data() : nullptr, n,
                                          y[k].data(), rows)
                      .ok());
          ++k;
        }
        CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
      }
    }
  }
  flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
}

TEST_CASE("quant matmul: the arm64 dot-product kernels give the portable kernels' bits") {
  using flashscope::cpu::BlockQ8;
  using flashscope::cpu::CpuIsa;
  if (flashscope::cpu::detected_cpu_isa() != CpuIsa::kNeonDot) {
    MESSAGE("skipped: this CPU has no arm64 dot-product instructions (scripts/test_arm64.sh runs it under qemu)");
    return;
  }
  std::mt19937_64 rng(19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37, cols = 1280;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1}) {
    const std::string type_name = flashscope::ggml_type_name(type);
    CAPTURE(type_name);
    const auto bytes = SyntheticLlama::random_blocks(type, rows * cols, 1.0f, rng);
    flashscope::cpu::QuantMatrix w{type, rows, cols, bytes.size() / static_cast<uint64_t>(rows), bytes.data()};
    for (int n : {1, 5}) {
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (float& v : x) v = normal(rng);
      std::vector<BlockQ8> xq(static_cast<size_t>(n * cols / 32));
      for (int t = 0; t < n; ++t) flashscope::cpu::quantize_row_q8(x.data() + t * cols, xq.data() + t * cols / 32, cols);
      std::vector<float> y[2];
      int i = 0;
      for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kNeonDot}) {
        flashscope::cpu::set_cpu_isa(isa);
        REQUIRE(flashscope::cpu::active_cpu_isa() == isa);
        y[i].assign(static_cast<size_t>(n * rows), -1.0f);
        REQUIRE(flashscope::cpu::matmul(w, x.data(), cols, xq.data(), nullptr, n, y[i].data(), rows).ok());
        ++i;
      }
      flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
      CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("thread advisor: answers within [1, max] and 1 for a single thread") {
  flashscope::cpu::ThreadAdvisor advisor;
  CHECK(advisor.advise(1) == 1);
  for (int i = 0; i < 3; ++i) {
    const int t = advisor.advise(4);
    CHECK(t >= 1);
    CHECK(t <= 4);
  }
}

// --- forward against the naive reference -----------------------------------------------

// Tolerances, as fractions of the reference logits' RMS (about 5 here), for
// the max and the RMS of |engine − reference| over every logit of every
// position (37 × 100 values):
//   kFloatBounds — F32/F16/BF16 weights, float activations. The engine's only
//     roundings are q, k, v (the bf16 cache) and the attention output in
//     bf16, 2^-9 relative per element, random in sign. Observed: RMS 0.26%,
//     max 1.1%. Bounds: RMS 0.6%, max 2.5%.
//   kQ8Bounds — weights of a Q8 type: every matmul input is also rounded to
//     1/127 of its 32-block's max, an error of step/sqrt(12) ≈ 0.6% of the
//     input's RMS per matmul for Gaussian-like blocks (max ≈ 2.5 RMS); about
//     9 matmul stages in series (2 layers × QKV, O, gate/up, down, + head)
//     add in quadrature to ≈ 1.7%. Observed: RMS 1.25–1.55%, max 5.3–8.5%
//     (the max of 3700 samples sits near 4-5 RMS). Bounds: RMS 3%, max 12%.
// A reference that rounds its own activations the same way does not get
// closer: the bf16 attention perturbs inputs enough to move ~10% of values
// across a rounding boundary, which costs as much as the rounding itself.
// Kernel bugs are caught exactly by the matmul test above; RoPE on NeoX
// halves instead of GGUF pairs fails every variant here (checked by
// mutating the engine), and a cache offset bug fails the decode test below.
struct Bounds {
  double max_rel, rms_rel;
};
constexpr Bounds kFloatBounds = {0.025, 0.006};
constexpr Bounds kQ8Bounds = {0.12, 0.03};

TEST_CASE("forward: a synthetic model matches the float reference, every weight type") {
  struct Variant {
    const char* name;
    GgmlType matrix, embd;
    bool tied;
    int rope_dim;
    Bounds bounds;
  };
  const Variant variants[] = {
      {"F32 (no activation quantization)", GgmlType::kF32, GgmlType::kF32, true, 64, kFloatBounds},
      {"Q4_1 + Q8_0 embeddings (the default model's mix)", GgmlType::kQ4_1, GgmlType::kQ8_0, true, 64, kQ8Bounds},
      {"Q4_0, untied F16 output", GgmlType::kQ4_0, GgmlType::kF16, false, 64, kQ8Bounds},
      {"Q8_0, partial rotary (rope_dim 32)", GgmlType::kQ8_0, GgmlType::kQ8_0, true, 32, kQ8Bounds},
      {"Q5_0", GgmlType::kQ5_0, GgmlType::kQ8_0, true, 64, kQ8Bounds},
      {"Q5_1", GgmlType::kQ5_1, GgmlType::kQ8_0, true, 64, kQ8Bounds},
      {"F16 / BF16 embeddings (float fallback)", GgmlType::kF16, GgmlType::kBF16, true, 64, kFloatBounds},
  };
  const std::vector<int32_t> ids = random_ids(37, 100, 11);
  for (const Variant& v : variants) {
    const std::string variant = v.name;
    CAPTURE(variant);
    SyntheticLlama s;
    s.matrix_type = v.matrix;
    s.embd_type = v.embd;
    s.output_type = GgmlType::kF16;
    s.tied = v.tied;
    s.rope_dim = v.rope_dim;
    const auto bytes = s.build();
    const RefModel ref = load_reference(bytes);
    auto file = GgufFile::from_buffer(bytes);
    REQUIRE(file.ok());
    auto model = Model::from_gguf(std::move(file).value());
    REQUIRE_MESSAGE(model.ok(), model.status().to_string());
    const LogitError e = compare(run_all(*model, ids), reference_forward(ref, ids));
    MESSAGE(variant << ": max |err| " << e.max_abs << " = " << 100 * e.rel() << "% of logit RMS " << e.ref_rms
                    << ", RMS err " << 100 * e.rms_rel() << "%, argmax mismatches " << e.argmax_mismatches << "/"
                    << ids.size());
    CHECK(e.rel() <= v.bounds.max_rel);
    CHECK(e.rms_rel() <= v.bounds.rms_rel);
  }
}

TEST_CASE("forward: prefill longer than one chunk (128) matches the reference") {
  SyntheticLlama s;
  const auto bytes = s.build();
  const RefModel ref = load_reference(bytes);
  const Model model = load_synthetic(s);
  const std::vector<int32_t> ids = random_ids(150, 100, 5);
  const LogitError e = compare(run_all(model, ids), reference_forward(ref, ids));
  MESSAGE("150 tokens: max |err| " << 100 * e.rel() << "%, RMS err " << 100 * e.rms_rel() << "% of logit RMS");
  CHECK(e.rel() <= kQ8Bounds.max_rel);
  CHECK(e.rms_rel() <= kQ8Bounds.rms_rel);
}

// K-quant matrices with rows of whole 256-element super-blocks: a prompt's
// full 16-token tiles take the per-256 activation kernels
// (quant_matmul_kquant.hpp), its last tokens the per-32 ones, and every
// decode step the one-token per-256 ones (quant_matmul_kdot.hpp); all
// against the float reference.
TEST_CASE("forward: a K-quant model (the Q4_K_M mix, 256-wide rows) matches the reference in prefill and decode") {
  SyntheticLlama s;
  s.hidden = 256;
  s.ffn = 512;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.matrix_type = GgmlType::kQ4_K;
  s.more_bits_type = GgmlType::kQ6_K;  // attn_v / ffn_down of both layers
  s.embd_type = GgmlType::kQ6_K;      // the tied LM head
  const auto bytes = s.build();
  const RefModel ref = load_reference(bytes);
  const Model model = load_synthetic(s);
  const std::vector<int32_t> ids = random_ids(45, 100, 17);
  const std::vector<std::vector<double>> want = reference_forward(ref, ids);
  for (const std::string path : {"prefill (2 tiles + 13 tokens)", "decode"}) {
    CAPTURE(path);
    std::vector<float> got;
    if (path[0] == 'p') {
      got = run_all(model, ids);
    } else {
      auto seq = model.new_sequence();
      REQUIRE(seq.ok());
      std::vector<float> logits;
      for (int32_t id : ids) {
        REQUIRE(model.forward(*seq, {id}, {}, LogitsMode::kLast, &logits).ok());
        got.insert(got.end(), logits.begin(), logits.end());
      }
    }
    const LogitError e = compare(got, want);
    MESSAGE("Q4_K_M mix, " << path << ": max |err| " << 100 * e.rel() << "%, RMS err " << 100 * e.rms_rel()
                           << "% of logit RMS, argmax mismatches " << e.argmax_mismatches << "/" << ids.size());
    CHECK(e.rel() <= kQ8Bounds.max_rel);
    CHECK(e.rms_rel() <= kQ8Bounds.rms_rel);
  }
}

// --- the KV cache ----------------------------------------------------------------------

// A sequence's cache is a PagedKvCache of pages of 256 tokens: a prompt
// chunk whose keys span two pages (gathered for the tiled pass) and decode
// steps over both pages (read where they lie) must find every key in its
// place, RoPE position and causal alignment included.
TEST_CASE("forward: a context across two pages of the cache (256 tokens), prompt and decode steps, matches the reference") {
  SyntheticLlama s;
  const auto bytes = s.build();
  const RefModel ref = load_reference(bytes);
  const Model model = load_synthetic(s);
  const std::vector<int32_t> ids = random_ids(300, 100, 13);
  auto seq = model.new_sequence();
  REQUIRE(seq.ok());
  std::vector<float> got, logits;
  size_t done = 0;
  // 250 tokens (page 0), then 40 (keys 0..289: both pages; 80 rows per kv-head, the tiled path).
  for (int n : {250, 40}) {
    const std::vector<int32_t> part(ids.begin() + static_cast<long>(done), ids.begin() + static_cast<long>(done + n));
    const flashscope::Status st = model.forward(*seq, part, {}, LogitsMode::kAll, &logits);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    got.insert(got.end(), logits.begin(), logits.end());
    done += static_cast<size_t>(n);
  }
  for (; done < ids.size(); ++done) {  // decode steps over both pages
    REQUIRE(model.forward(*seq, {ids[done]}, {}, LogitsMode::kLast, &logits).ok());
    got.insert(got.end(), logits.begin(), logits.end());
  }
  const LogitError e = compare(got, reference_forward(ref, ids));
  MESSAGE("300 tokens over two pages: max |err| " << 100 * e.rel() << "%, RMS err " << 100 * e.rms_rel()
                                                  << "% of logit RMS");
  CHECK(e.rel() <= kQ8Bounds.max_rel);
  CHECK(e.rms_rel() <= kQ8Bounds.rms_rel);
}

// Decode must reproduce a full recompute: this pins the cache offsets, the
// RoPE positions and the causal alignment. A few rows per kv-head (here up
// to 32 tokens: 4 q-heads over 2 kv-heads) run the decode attention path,
// more the tiled prefill path, and the two differ in float arithmetic (the
// tiled path rounds P to bf16 as the GPU does; decode keeps it in float).
// With the portable kernels every token's arithmetic is otherwise the same
// whichever way the tokens arrive (per-token activation quantization, a
// row's attention independent of the rows beside it), so runs that stay on
// one attention path agree to float noise. The AVX2 build sums 4-token
// tiles in prefill in another order than single tokens in decode, and a
// run that crosses attention paths differs by float rounding too; either
// difference is amplified by the Q8 rounding of later activations to about
// the size of that rounding (the kQ8Bounds above), which is what it is held to.
TEST_CASE("forward: incremental decode gives the logits of a full recompute") {
  using flashscope::cpu::CpuIsa;
  const Model model = load_synthetic(SyntheticLlama{});
  const std::vector<int32_t> ids = random_ids(70, 100, 21);  // crosses a 64-key attention block
  const size_t V = 100;
  const int group = model.config().n_heads / model.config().n_kv_heads;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    flashscope::cpu::set_cpu_isa(isa);
    const std::string isa_name = flashscope::cpu::cpu_isa_name(flashscope::cpu::active_cpu_isa());
    CAPTURE(isa_name);
    const std::vector<float> full = run_all(model, ids);  // 140 rows per kv-head: the tiled path
    double ss = 0;
    for (float l : full) ss += static_cast<double>(l) * l;
    const double rms = std::sqrt(ss / static_cast<double>(full.size()));
    const double cross_bound = kQ8Bounds.max_rel * rms;
    const double same_bound = flashscope::cpu::active_cpu_isa() == CpuIsa::kPortable ? 1e-4 : cross_bound;

    // Every token alone (the decode path throughout) against the full recompute.
    std::vector<float> steps(ids.size() * V);
    {
      auto seq = model.new_sequence();
      REQUIRE(seq.ok());
      std::vector<float> logits;
      double max_diff = 0;
      for (size_t t = 0; t < ids.size(); ++t) {
        REQUIRE(model.forward(*seq, {ids[t]}, {}, LogitsMode::kLast, &logits).ok());
        std::copy(logits.begin(), logits.begin() + static_cast<long>(V), steps.begin() + static_cast<long>(t * V));
        for (size_t i = 0; i < V; ++i)
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[i] - full[t * V + i])));
      }
      MESSAGE(isa_name << ": token by token vs full recompute, max |diff| " << max_diff << " (logit RMS " << rms
                       << ")");
      CHECK(max_diff <= cross_bound);
    }

    // Prefill in pieces, then one token at a time, against token by token:
    // pieces of up to 32 tokens stay on the decode path, 40 crosses to the tiled one.
    for (const std::vector<int>& pieces : {std::vector<int>{10}, std::vector<int>{3, 29, 5}, std::vector<int>{40}}) {
      auto seq = model.new_sequence();
      REQUIRE(seq.ok());
      std::vector<float> logits;
      size_t done = 0;
      bool tiled = false;
      for (int p : pieces) {
        std::vector<int32_t> part(ids.begin() + static_cast<long>(done), ids.begin() + static_cast<long>(done + p));
        REQUIRE(model.forward(*seq, part, {}, LogitsMode::kLast, &logits).ok());
        done += static_cast<size_t>(p);
        tiled = tiled || p * group > flashscope::cpu::kDecodeMaxRows;
      }
      double max_diff = 0;
      for (; done < ids.size(); ++done) {
        REQUIRE(model.forward(*seq, {ids[done]}, {}, LogitsMode::kLast, &logits).ok());
        for (size_t i = 0; i < V; ++i)
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[i] - steps[done * V + i])));
      }
      CHECK(seq->n_tokens() == 70);
      CHECK(seq->tokens() == ids);
      MESSAGE(isa_name << ": pieces" << std::string(tiled ? " (tiled prefix)" : "") << " vs token by token, max |diff| "
                       << max_diff);
      CHECK(max_diff <= (tiled ? cross_bound : same_bound));
    }
  }
  flashscope::cpu::set_cpu_isa(flashscope::cpu::detected_cpu_isa());
}

TEST_CASE("forward: explicit positions, truncate and clear") {
  const Model model = load_synthetic(SyntheticLlama{});
  const std::vector<int32_t> ids = random_ids(12, 100, 2);
  const std::vector<float> full = run_all(model, ids);
  auto seq = model.new_sequence(32);
  REQUIRE(seq.ok());
  std::vector<float> logits;
  std::vector<int32_t> pos(12);
  for (int i = 0; i < 12; ++i) pos[static_cast<size_t>(i)] = i;
  REQUIRE(model.forward(*seq, ids, pos, LogitsMode::kLast, &logits).ok());
  // The same token tiles as the full run; only the LM head runs one row
  // instead of twelve (another summation order): float noise.
  CHECK(max_abs_diff(logits, full.data() + full.size() - 100) <= 1e-4);

  // Drop the last 4 and run them again: same logits.
  REQUIRE(seq->truncate(8).ok());
  CHECK(seq->n_tokens() == 8);
  REQUIRE(model.forward(*seq, std::vector<int32_t>(ids.begin() + 8, ids.end()), {}, LogitsMode::kLast, &logits).ok());
  CHECK(max_abs_diff(logits, full.data() + full.size() - 100) <= 1e-4);
  CHECK(seq->truncate(13).code() == StatusCode::kInvalidArgument);

  seq->clear();
  CHECK(seq->n_tokens() == 0);
  REQUIRE(model.forward(*seq, ids, {}, LogitsMode::kNone, nullptr).ok());
  CHECK(seq->n_tokens() == 12);
}

TEST_CASE("forward: a prompt longer than the context, or a full cache, is refused and changes nothing") {
  const Model model = load_synthetic(SyntheticLlama{});
  auto seq = model.new_sequence(16);
  REQUIRE(seq.ok());
  CHECK(seq->capacity() == 16);
  std::vector<float> logits = {42.0f};

  const flashscope::Status too_long = model.forward(*seq, random_ids(17, 100, 1), {}, LogitsMode::kLast, &logits);
  CHECK(too_long.code() == StatusCode::kInvalidArgument);
  CHECK(contains(too_long.message(), "17 tokens do not fit the context of 16"));
  CHECK(seq->n_tokens() == 0);
  CHECK(logits == std::vector<float>{42.0f});

  const std::vector<int32_t> ids = random_ids(16, 100, 3);
  REQUIRE(model.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + 12), {}, LogitsMode::kNone, nullptr).ok());
  const flashscope::Status full = model.forward(*seq, random_ids(5, 100, 4), {}, LogitsMode::kLast, &logits);
  CHECK(full.code() == StatusCode::kInvalidArgument);
  CHECK(contains(full.message(), "context is full: 12 of 16"));
  CHECK(contains(full.message(), "4 fit"));
  CHECK(seq->n_tokens() == 12);

  // Still usable, and as if the failed call never happened: the logits of a
  // fresh sequence given the same two calls (one call of all 16 tokens
  // would group them into other matmul tiles, another summation order).
  REQUIRE(model.forward(*seq, std::vector<int32_t>(ids.begin() + 12, ids.end()), {}, LogitsMode::kLast, &logits).ok());
  auto fresh = model.new_sequence(16);
  REQUIRE(fresh.ok());
  std::vector<float> fresh_logits;
  REQUIRE(model.forward(*fresh, std::vector<int32_t>(ids.begin(), ids.begin() + 12), {}, LogitsMode::kNone, nullptr).ok());
  REQUIRE(model.forward(*fresh, std::vector<int32_t>(ids.begin() + 12, ids.end()), {}, LogitsMode::kLast, &fresh_logits)
              .ok());
  double max_diff = 0;
  for (size_t i = 0; i < 100; ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[i] - fresh_logits[i])));
  CHECK(max_diff <= 1e-4);
  CHECK(model.forward(*seq, {1}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("forward: malformed calls are refused before any work") {
  const Model model = load_synthetic(SyntheticLlama{});
  auto seq = model.new_sequence();
  REQUIRE(seq.ok());
  std::vector<float> logits;
  CHECK(model.forward(*seq, {}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward(*seq, {100}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward(*seq, {-1}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward(*seq, {1, 2}, {0}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward(*seq, {1}, {-3}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward(*seq, {1}, {}, LogitsMode::kLast, nullptr).code() == StatusCode::kInvalidArgument);
  Sequence empty;
  CHECK(model.forward(empty, {1}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  const Model other = load_synthetic(SyntheticLlama{});
  CHECK(other.forward(*seq, {1}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(seq->n_tokens() == 0);
}

// --- the default model against HF transformers --------------------------------------------

// Fixture: tests/data/smollm2_reference_logits.json (scripts/make_reference_logits.py):
// transformers' LlamaForCausalLM in float64 on the same GGUF's dequantized
// weights, top-10 ids and logits at every position of 4 prompts (5 to 132
// tokens; the longest crosses the engine's 128-token prefill chunk).
//
// What may differ, and the bounds (logits of this model span about -5..+25
// at the top-10; the test prints what it observes):
//   The engine rounds the activations entering each of its 211 matmuls to 8
//   bits per 32-block (llama.cpp's Q8 scheme) and keeps q/k/v/o in bf16; the
//   reference does neither. With the Q8 rounding switched off (an experiment,
//   float activations into the same Q4_1 weights) the engine agrees to 0.14
//   max and 200/200 top-1: the rest below is the cost of Q8 activations
//   (a block's scale is set by its largest value, so a block holding one
//   outlier rounds its other 31 values coarsely).
//   Observed with Q8, over the AVX2 and the portable kernels (different
//   float summation orders, so different roundings downstream): raw top-10
//   error RMS 0.21-0.24, max 1.30-1.56; centered (mean error at the position
//   removed: the softmax ignores a common shift) RMS 0.11, max 0.60-0.79;
//   top-1 equal at 191-193 of 200 positions, the others all with a
//   reference top-2 gap of at most 0.175.
//   Bounds, about 1.3-2x the observation: raw RMS 0.4, max 2.0; centered RMS
//   0.2, max 1.2; top-1 equal wherever the reference's top-2 gap is at least
//   kTieGap = 0.25 (the difference of two logits carries about sqrt(2) × the
//   centered error, RMS 0.15, so near-ties may swap). A real bug (RoPE,
//   head mapping, tokenizer, cache offset) moves logits by several units and
//   changes most argmaxes.
TEST_CASE("forward: SmolLM2-135M logits match HF transformers on the same GGUF") {
  struct Bound {
    double max_abs, rms;
  };
  constexpr Bound kRawBound = {2.0, 0.4};
  constexpr Bound kCenteredBound = {1.2, 0.2};
  constexpr double kTieGap = 0.25;
  const std::string path = flashscope::testing::default_model_path();
  if (!std::ifstream(path).good()) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  const nlohmann::json fixture =
      flashscope::testing::read_json_fixture(FLASHSCOPE_SOURCE_DIR "/tests/data/smollm2_reference_logits.json");

  auto model = Model::load(path);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  const int V = model->config().vocab;
  double worst = 0, sum_sq = 0, worst_centered = 0, sum_sq_centered = 0, widest_swapped_gap = 0;
  int positions = 0, top1_equal = 0, near_ties = 0, n_err = 0;
  for (const auto& c : fixture.at("cases")) {
    std::vector<int32_t> ids;
    for (const auto& v : c.at("ids")) ids.push_back(v.get<int32_t>());
    CAPTURE(c.at("text").get<std::string>());
    // The fixture's ids come from transformers' GGUF tokenizer; ours agrees on these prompts.
    CHECK(model->tokenizer().encode(c.at("text").get<std::string>(), true) == ids);
    const std::vector<float> logits = run_all(*model, ids);
    for (const auto& p : c.at("positions")) {
      const int pos = p.at("pos").get<int>();
      CAPTURE(pos);
      const float* row = logits.data() + static_cast<size_t>(pos) * static_cast<size_t>(V);
      const auto& top_ids = p.at("top_ids");
      const auto& top_logits = p.at("top_logits");
      REQUIRE(top_ids.size() == 10);
      for (size_t k = 0; k < top_ids.size(); ++k) {
        const double err = std::fabs(row[top_ids[k].get<size_t>()] - top_logits[k].get<double>());
        worst = std::max(worst, err);
        sum_sq += err * err;
        ++n_err;
        CHECK(err <= kRawBound.max_abs);
      }
      // The same errors less their mean at this position: a shift common to
      // all logits does not change the softmax, so this is what sampling sees.
      double mean = 0;
      for (size_t k = 0; k < top_ids.size(); ++k) mean += row[top_ids[k].get<size_t>()] - top_logits[k].get<double>();
      mean /= static_cast<double>(top_ids.size());
      for (size_t k = 0; k < top_ids.size(); ++k) {
        const double err = std::fabs(row[top_ids[k].get<size_t>()] - top_logits[k].get<double>() - mean);
        worst_centered = std::max(worst_centered, err);
        sum_sq_centered += err * err;
        CHECK(err <= kCenteredBound.max_abs);
      }
      const int argmax = static_cast<int>(std::max_element(row, row + V) - row);
      const double gap = top_logits[0].get<double>() - top_logits[1].get<double>();
      near_ties += gap < kTieGap;
      if (argmax == top_ids[0].get<int>()) {
        ++top1_equal;
      } else {
        widest_swapped_gap = std::max(widest_swapped_gap, gap);
        CHECK(gap < kTieGap);
      }
      ++positions;
    }
  }
  const double rms = std::sqrt(sum_sq / n_err), rms_centered = std::sqrt(sum_sq_centered / n_err);
  MESSAGE("SmolLM2 vs HF float64: " << positions << " positions, top-1 equal at " << top1_equal
                                    << " (the others' reference top-2 gaps are at most " << widest_swapped_gap << "; "
                                    << near_ties << " positions have gaps under " << kTieGap
                                    << "); top-10 logit error max " << worst << ", RMS " << rms
                                    << "; centered max " << worst_centered << ", RMS " << rms_centered);
  CHECK(rms <= kRawBound.rms);
  CHECK(rms_centered <= kCenteredBound.rms);
  CHECK(positions > 150);
}
