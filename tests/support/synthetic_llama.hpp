// Small synthetic llama GGUF models for the engine tests: the runtime's
// builder (flashscope::SyntheticModelSpec, runtime/src/model/synthetic_model.hpp,
// the same one `flashscope-cli make-model` runs) with the knobs the loader's
// error tests use to break any key or tensor on purpose.
//
// Defaults as the tests have always had them: 2 layers, hidden 64, 4 q-heads
// over 2 kv-heads, head_dim 64 with RoPE over all 64 dims, Q4_1 matrices,
// Q8_0 embeddings, a tied LM head, seed 1.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"
#include "model/synthetic_model.hpp"
#include "support/gguf_builder.hpp"

namespace flashscope::testing {

struct SyntheticLlama : SyntheticModelSpec, model::SyntheticBreakage {
  SyntheticLlama() { rope_dim = 64; }

  static GgufBuilder::Bytes random_blocks(GgmlType type, int64_t n, float scale, std::mt19937_64& rng) {
    return model::synthetic_random_blocks(type, n, scale, rng);
  }
  std::vector<std::string> tokens() const { return model::synthetic_vocabulary(vocab); }
  GgufBuilder::Bytes build() const { return model::build_synthetic_llama(*this, *this); }
};

// The synthetic variants the engine suites share: the shapes and weight
// types a backend must handle (head_dim 64 and 128; GQA 2, 3, 8 and none;
// partial RoPE; tied and untied LM heads; the float fallback).
struct SyntheticVariant {
  const char* name;
  SyntheticLlama s;
};

inline std::vector<SyntheticVariant> synthetic_variants() {
  std::vector<SyntheticVariant> v;
  v.push_back({"D64 GQA2, Q4_1 + Q8_0 embeddings, tied (the default model's mix)", SyntheticLlama{}});
  {
    SyntheticLlama s;
    s.hidden = 128;
    s.n_heads = 6;
    s.n_kv_heads = 2;
    s.head_dim = 128;
    s.rope_dim = 128;
    s.ffn = 160;
    s.matrix_type = GgmlType::kQ8_0;
    s.tied = false;
    s.output_type = GgmlType::kF16;
    v.push_back({"D128 GQA3, Q8_0, untied F16 head", s});
  }
  {
    SyntheticLlama s;
    s.hidden = 96;
    s.n_heads = 8;
    s.n_kv_heads = 1;
    s.ffn = 128;
    s.rope_dim = 32;
    s.matrix_type = GgmlType::kQ4_0;
    v.push_back({"D64 MQA (8 q-heads over 1), partial RoPE 32, Q4_0", s});
  }
  {
    SyntheticLlama s;
    s.n_kv_heads = 4;
    s.matrix_type = GgmlType::kF32;
    s.embd_type = GgmlType::kF32;
    v.push_back({"D64 MHA, F32 weights", s});
  }
  {
    SyntheticLlama s;
    s.hidden = 192;
    s.n_heads = 9;
    s.n_kv_heads = 3;
    s.ffn = 256;
    s.vocab = 300;
    s.n_layers = 3;
    v.push_back({"SmolLM2's head layout (9 over 3), 3 layers, vocab 300", s});
  }
  return v;
}

}  // namespace flashscope::testing
