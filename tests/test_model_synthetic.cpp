// Synthetic llama models as users make them: flashscope::build_synthetic_model
// / write_synthetic_model and `flashscope-cli make-model` write GGUF files
// that Model::load reads back with the asked-for shape and types and that
// generate text; the same spec always gives the same bytes; specs the engine
// could not run are refused naming the field.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"

#if FLASHSCOPE_TEST_CLI
#include "commands.hpp"
#include "support/temp_path.hpp"
#endif

using namespace flashscope;

namespace {

std::string temp_path(const char* name) { return flashscope::testing::temp_path("test", std::string(name) + ".gguf"); }

// Loads the file, checks its shape against spec, and generates n tokens greedily.
void check_loads_and_generates(const std::string& path, const SyntheticModelSpec& spec, int n = 6) {
  auto model = Model::load(path);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  const ModelConfig& c = model->config();
  CHECK(c.n_layers == spec.n_layers);
  CHECK(c.hidden == spec.hidden);
  CHECK(c.n_heads == spec.n_heads);
  CHECK(c.n_kv_heads == spec.n_kv_heads);
  CHECK(c.head_dim == spec.head_dim);
  CHECK(c.ffn == spec.ffn);
  CHECK(c.vocab == spec.vocab);
  CHECK(c.context_length == spec.context);
  CHECK(c.rope_dim == (spec.rope_dim > 0 ? spec.rope_dim : spec.head_dim));
  CHECK(c.tied_embeddings == spec.tied);
  auto file = GgufFile::open(path);
  REQUIRE(file.ok());
  const GgufTensor* q = file->find_tensor("blk.0.attn_q.weight");
  REQUIRE(q != nullptr);
  CHECK(q->type == spec.matrix_type);

  auto session = Session::create(*model, SessionOptions{64});
  REQUIRE(session.ok());
  GenerateParams gp;
  gp.max_tokens = n;
  gp.stop_tokens = {-1};
  const std::vector<int32_t> prompt = model->tokenizer().encode("Hello there", false);
  REQUIRE(!prompt.empty());
  int seen = 0;
  auto stats = session->generate(prompt, gp, [&](const TokenEvent& e) {
    seen += e.token >= 0;
    return true;
  });
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  CHECK(stats->generated_tokens == n);
  CHECK(seen == n);
}

}  // namespace

TEST_CASE("synthetic models: written files load with their shape and types and generate") {
  std::vector<std::pair<const char*, SyntheticModelSpec>> specs;
  specs.push_back({"default", SyntheticModelSpec{}});
  {
    SyntheticModelSpec s;
    s.n_layers = 3;
    s.hidden = 256;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.head_dim = 128;
    s.ffn = 512;
    s.vocab = 300;
    s.context = 1024;
    s.matrix_type = GgmlType::kQ6_K;
    s.embd_type = GgmlType::kBF16;
    s.tied = false;
    s.output_type = GgmlType::kQ4_K;
    s.seed = 9;
    specs.push_back({"D128 GQA4, Q6_K matrices, BF16 embeddings, untied Q4_K head", s});
  }
  {
    SyntheticModelSpec s;
    s.hidden = 96;
    s.n_heads = 3;
    s.n_kv_heads = 3;
    s.ffn = 64;
    s.rope_dim = 32;
    s.matrix_type = GgmlType::kF16;
    s.embd_type = GgmlType::kQ5_0;
    specs.push_back({"MHA, F16 matrices, Q5_0 embeddings, partial RoPE", s});
  }
  for (const auto& [name, spec] : specs) {
    CAPTURE(name);
    const std::string path = temp_path("synthetic");
    const Status w = write_synthetic_model(spec, path);
    REQUIRE_MESSAGE(w.ok(), w.to_string());
    check_loads_and_generates(path, spec);
    // The same spec, the same bytes (tests and GPU runs can name a model by its flags).
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto again = build_synthetic_model(spec);
    REQUIRE(again.ok());
    CHECK(on_disk == again.value());
    std::remove(path.c_str());
  }
  SyntheticModelSpec a, b;
  b.seed = 2;
  CHECK(build_synthetic_model(a).value() != build_synthetic_model(b).value());
}

TEST_CASE("synthetic models: specs the engine cannot run are refused naming the field") {
  auto refused = [](void (*edit)(SyntheticModelSpec&), const char* word) {
    SyntheticModelSpec s;
    edit(s);
    auto r = build_synthetic_model(s);
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK_MESSAGE(r.status().message().find(word) != std::string::npos, r.status().message());
  };
  refused([](SyntheticModelSpec& s) { s.head_dim = 48; }, "head_dim");  // no attention path runs 48
  refused([](SyntheticModelSpec& s) { s.n_kv_heads = 3; }, "kv-heads");
  refused([](SyntheticModelSpec& s) { s.n_layers = 0; }, "layers");
  refused([](SyntheticModelSpec& s) { s.hidden = 48; }, "blocks");              // Q4_1 rows of 48: not whole blocks
  refused([](SyntheticModelSpec& s) { s.matrix_type = GgmlType::kQ8_K; }, "Q8_K");  // not multiplied by the engine
  refused([](SyntheticModelSpec& s) { s.rope_dim = 80; }, "rope_dim");
  CHECK(write_synthetic_model(SyntheticModelSpec{}, "/nonexistent-dir/x.gguf").code() == StatusCode::kIoError);
}

#if FLASHSCOPE_TEST_CLI
TEST_CASE("make-model: the command writes the model its flags describe, and refuses bad flags") {
  const std::string path = temp_path("make_model");
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return cli::cmd_make_model(static_cast<int>(argv.size()), argv.data());
  };
  REQUIRE(run({"--out", path, "--layers", "3", "--dim", "128", "--heads", "8", "--kv-heads", "2", "--head-dim", "128",
               "--ffn", "192", "--vocab", "120", "--context", "256", "--type", "q8_0", "--untied", "--output-type",
               "f16", "--seed", "5"}) == 0);
  SyntheticModelSpec spec;
  spec.n_layers = 3;
  spec.hidden = 128;
  spec.n_heads = 8;
  spec.n_kv_heads = 2;
  spec.head_dim = 128;
  spec.ffn = 192;
  spec.vocab = 120;
  spec.context = 256;
  spec.matrix_type = GgmlType::kQ8_0;
  spec.tied = false;
  spec.output_type = GgmlType::kF16;
  spec.seed = 5;
  check_loads_and_generates(path, spec);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(on_disk == build_synthetic_model(spec).value());
  std::remove(path.c_str());

  CHECK(run({"--layers", "2"}) == 2);                              // no --out
  CHECK(run({"--out", path, "--head-dim", "48"}) == 2);            // refused spec
  CHECK(run({"--out", path, "--type", "q9_9"}) == 2);              // unknown type
  CHECK(run({"--out", path, "--preset", "huge"}) == 2);
  CHECK(run({"--out", "/nonexistent-dir/x.gguf"}) == 1);           // cannot write
}

#endif  // FLASHSCOPE_TEST_CLI

TEST_CASE("synthetic models: head_dim 32, 96 and 256 load and generate on the CPU") {
  for (int d : {32, 96, 256}) {
    INFO("head_dim ", d);
    SyntheticModelSpec spec;
    spec.head_dim = d;
    spec.hidden = 128;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    const std::string path = temp_path("head_dim");
    REQUIRE(write_synthetic_model(spec, path).ok());
    check_loads_and_generates(path, spec, 3);
    std::remove(path.c_str());
  }
}

#if FLASHSCOPE_TEST_CLI
TEST_CASE("make-model: --preset qwen3-0.6b and gemma3-270m write their families' shapes, which run on the CPU") {
  const std::string path = temp_path("make_model_preset");
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return cli::cmd_make_model(static_cast<int>(argv.size()), argv.data());
  };
  // Fewer layers and a small vocabulary keep the files small; every other number is the preset's.
  {
    REQUIRE(run({"--out", path, "--preset", "qwen3-0.6b", "--layers", "2", "--vocab", "300"}) == 0);
    SyntheticModelSpec spec;
    spec.n_layers = 2;
    spec.hidden = 1024;
    spec.n_heads = 16;
    spec.n_kv_heads = 8;
    spec.head_dim = 128;
    spec.ffn = 3072;
    spec.vocab = 300;
    spec.context = 8192;
    check_loads_and_generates(path, spec, 2);
    auto model = Model::load(path);
    REQUIRE(model.ok());
    CHECK(model->config().arch == Architecture::kQwen3);
    CHECK(model->config().qk_norm);
    CHECK(model->config().rope_base == 1000000.0f);
    CHECK(model->config().rms_eps == 1e-6f);
  }
  {
    // Seven layers: layer 5 is gemma3's global one, the others slide.
    REQUIRE(run({"--out", path, "--preset", "gemma3-270m", "--layers", "7", "--vocab", "300"}) == 0);
    SyntheticModelSpec spec;
    spec.n_layers = 7;
    spec.hidden = 640;
    spec.n_heads = 4;
    spec.n_kv_heads = 1;
    spec.head_dim = 256;
    spec.ffn = 2048;
    spec.vocab = 300;
    spec.context = 8192;
    check_loads_and_generates(path, spec, 2);
    auto model = Model::load(path);
    REQUIRE(model.ok());
    const ModelConfig& c = model->config();
    CHECK(c.arch == Architecture::kGemma3);
    CHECK(c.qk_norm);
    CHECK(c.post_norms);
    CHECK(c.sliding_window == 512);
    for (int l = 0; l < 7; ++l) {
      INFO("layer ", l);
      CHECK(c.layer(l).window == (l == 5 ? 0 : 512));
      CHECK(c.layer(l).rope_base == (l == 5 ? 1000000.0f : 10000.0f));
    }
  }
  {
    // Q4_K_M on dim 640: llama.cpp's fallback for rows that are not whole super-blocks.
    REQUIRE(run({"--out", path, "--preset", "gemma3-270m", "--layers", "2", "--vocab", "300", "--type", "q4_k_m"}) ==
            0);
    auto file = GgufFile::open(path);
    REQUIRE(file.ok());
    auto type_of = [&](const std::string& name) {
      const GgufTensor* t = file->find_tensor(name);
      REQUIRE(t != nullptr);
      return t->type;
    };
    CHECK(type_of("token_embd.weight") == GgmlType::kQ8_0);         // Q6_K, 640 columns
    CHECK(type_of("blk.1.attn_q.weight") == GgmlType::kQ5_0);       // Q4_K, 640 columns
    CHECK(type_of("blk.1.ffn_up.weight") == GgmlType::kQ5_0);
    CHECK(type_of("blk.1.attn_output.weight") == GgmlType::kQ4_K);  // 4 x 256 columns
    CHECK(type_of("blk.1.ffn_down.weight") == GgmlType::kQ6_K);     // 2048 columns, more bits (last layer)
    auto model = Model::load(path);
    REQUIRE_MESSAGE(model.ok(), model.status().to_string());
    auto session = Session::create(*model, SessionOptions{64});
    REQUIRE(session.ok());
    GenerateParams gp;
    gp.max_tokens = 2;
    gp.stop_tokens = {-1};
    auto stats = session->generate(model->tokenizer().encode("Hi", false), gp, [](const TokenEvent&) { return true; });
    REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
    CHECK(stats->generated_tokens == 2);
  }
  std::remove(path.c_str());
}
#endif  // FLASHSCOPE_TEST_CLI

#if FLASHSCOPE_TEST_CLI
TEST_CASE("make-model: --preset llama3.2-1b and qwen3-1.7b write the shapes #21 benchmarks, in Q4_K_M and Q8_0, which run on the CPU") {
  const std::string path = temp_path("make_model_1b");
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return cli::cmd_make_model(static_cast<int>(argv.size()), argv.data());
  };
  struct Preset {
    const char* name;
    Architecture arch;
    int hidden, n_heads, n_kv_heads, head_dim, ffn;
    float rope_base, rms_eps;
  };
  const Preset presets[] = {
      {"llama3.2-1b", Architecture::kLlama, 2048, 32, 8, 64, 8192, 500000.0f, 1e-5f},
      {"qwen3-1.7b", Architecture::kQwen3, 2048, 16, 8, 128, 6144, 1000000.0f, 1e-6f},
  };
  for (const Preset& pr : presets)
    for (const char* type : {"q4_k_m", "q8_0"}) {
      INFO(pr.name, " ", type);
      // Two layers and a small vocabulary keep the file small; every other number is the preset's.
      REQUIRE(run({"--out", path, "--preset", pr.name, "--layers", "2", "--vocab", "300", "--type", type}) == 0);
      auto file = GgufFile::open(path);
      REQUIRE(file.ok());
      auto type_of = [&](const std::string& name) {
        const GgufTensor* t = file->find_tensor(name);
        REQUIRE(t != nullptr);
        return t->type;
      };
      const bool mix = std::string(type) == "q4_k_m";
      // Every row is whole super-blocks (2048, 6144, 8192 columns): no fallback types.
      CHECK(type_of("token_embd.weight") == (mix ? GgmlType::kQ6_K : GgmlType::kQ8_0));
      for (int l = 0; l < 2; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        CHECK(type_of(b + "attn_q.weight") == (mix ? GgmlType::kQ4_K : GgmlType::kQ8_0));
        CHECK(type_of(b + "ffn_up.weight") == (mix ? GgmlType::kQ4_K : GgmlType::kQ8_0));
        const GgmlType more_bits = synthetic_use_more_bits(l, 2) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
        CHECK(type_of(b + "attn_v.weight") == (mix ? more_bits : GgmlType::kQ8_0));
        CHECK(type_of(b + "ffn_down.weight") == (mix ? more_bits : GgmlType::kQ8_0));
      }
      auto model = Model::load(path);
      REQUIRE_MESSAGE(model.ok(), model.status().to_string());
      const ModelConfig& c = model->config();
      CHECK(c.arch == pr.arch);
      CHECK(c.qk_norm == (pr.arch == Architecture::kQwen3));
      CHECK(c.n_layers == 2);
      CHECK(c.hidden == pr.hidden);
      CHECK(c.n_heads == pr.n_heads);
      CHECK(c.n_kv_heads == pr.n_kv_heads);
      CHECK(c.head_dim == pr.head_dim);
      CHECK(c.ffn == pr.ffn);
      CHECK(c.vocab == 300);
      CHECK(c.rope_base == pr.rope_base);
      CHECK(c.rms_eps == pr.rms_eps);
      auto session = Session::create(*model, SessionOptions{64});
      REQUIRE(session.ok());
      GenerateParams gp;
      gp.max_tokens = 3;
      gp.stop_tokens = {-1};
      auto stats = session->generate(model->tokenizer().encode("Hi", false), gp, [](const TokenEvent&) { return true; });
      REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
      CHECK(stats->generated_tokens == 3);
    }
  std::remove(path.c_str());
}
#endif  // FLASHSCOPE_TEST_CLI

#if FLASHSCOPE_TEST_CLI
TEST_CASE("make-model: --type q4_k_m writes llama.cpp's mix, and the model runs") {
  // llama.cpp's use_more_bits over 16 layers: the first and last eighth, every third between.
  std::vector<int> more;
  for (int i = 0; i < 16; ++i)
    if (synthetic_use_more_bits(i, 16)) more.push_back(i);
  CHECK(more == std::vector<int>{0, 1, 4, 7, 10, 13, 14, 15});

  const std::string path = temp_path("make_model_q4_k_m");
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return cli::cmd_make_model(static_cast<int>(argv.size()), argv.data());
  };
  REQUIRE(run({"--out", path, "--layers", "8", "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
               "--vocab", "300", "--type", "q4_k_m"}) == 0);
  auto file = GgufFile::open(path);
  REQUIRE(file.ok());
  auto type_of = [&](const std::string& name) {
    const GgufTensor* t = file->find_tensor(name);
    REQUIRE(t != nullptr);
    return t->type;
  };
  CHECK(type_of("token_embd.weight") == GgmlType::kQ6_K);  // tied: the LM head
  for (int l = 0; l < 8; ++l) {
    INFO("layer ", l);
    const std::string p = "blk." + std::to_string(l) + ".";
    const GgmlType more_bits = synthetic_use_more_bits(l, 8) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    CHECK(type_of(p + "attn_q.weight") == GgmlType::kQ4_K);
    CHECK(type_of(p + "attn_k.weight") == GgmlType::kQ4_K);
    CHECK(type_of(p + "attn_v.weight") == more_bits);
    CHECK(type_of(p + "attn_output.weight") == GgmlType::kQ4_K);
    CHECK(type_of(p + "ffn_gate.weight") == GgmlType::kQ4_K);
    CHECK(type_of(p + "ffn_down.weight") == more_bits);
  }
  CHECK(type_of("blk.2.attn_v.weight") == GgmlType::kQ4_K);  // 8 layers: 0, 7 and (i - 1) % 3 == 2
  CHECK(type_of("blk.3.attn_v.weight") == GgmlType::kQ6_K);
  // The file type llama.cpp's quantizer writes for the mix, which llama-bench names the file by: without
  // it llama.cpp guesses, and Gemma-3's fallback rows read as "all F32".
  auto file_type = [&] {
    auto f = GgufFile::open(path);
    REQUIRE(f.ok());
    auto t = f->get_int("general.file_type");
    REQUIRE(t.ok());
    return *t;
  };
  CHECK(file_type() == 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  // Q5_K matrices (q5_k_m) are written, load and run on the CPU too.
  REQUIRE(run({"--out", path, "--layers", "2", "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
               "--vocab", "300", "--type", "q5_k_m"}) == 0);
  CHECK(file_type() == 17);  // LLAMA_FTYPE_MOSTLY_Q5_K_M
  SyntheticModelSpec spec;
  spec.n_layers = 2;
  spec.hidden = 256;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn = 512;
  spec.vocab = 300;
  spec.matrix_type = GgmlType::kQ5_K;
  check_loads_and_generates(path, spec);
  std::remove(path.c_str());
}
#endif  // FLASHSCOPE_TEST_CLI
