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

}  // namespace flashscope::testing
