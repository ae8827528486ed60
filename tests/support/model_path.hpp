// Where the tests look for a real model file: $FLASHSCOPE_MODEL_DIR/<file>,
// else this checkout's assets/models/<file> (scripts/fetch_model.sh fetches
// there). The library's search (find_default_model() in model.hpp) walks up
// from the executable instead; the tests fix the checkout at build time so a
// build tree outside the repository still finds the models, and they get the
// path even when the file is absent, to name it in their skip message.
// tests/c_api_test.c writes the same rule in C.
#pragma once

#include <cstdlib>
#include <string>

#include "flashscope/model.hpp"

namespace flashscope::testing {

inline std::string model_file(const std::string& name) {
  const char* dir = std::getenv("FLASHSCOPE_MODEL_DIR");
  return std::string(dir && *dir ? dir : FLASHSCOPE_SOURCE_DIR "/assets/models") + "/" + name;
}

// SmolLM2-135M-Instruct Q4_1 (kDefaultModelFile).
inline std::string default_model_path() { return model_file(kDefaultModelFile); }

// Gemma-3-270M Q4_K_M (`scripts/fetch_model.sh gemma3-270m`).
inline std::string gemma_model_path() { return model_file("gemma-3-270m-q4_k_m.gguf"); }

}  // namespace flashscope::testing
