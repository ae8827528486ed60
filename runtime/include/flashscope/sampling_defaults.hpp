// The sampling a model's makers recommend for it: the GGUF's own
// general.sampling.* keys (llama.cpp's names) where the file has them, else
// the model card's recommendation for the families known here, else none.
#pragma once

#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/sampling.hpp"

namespace flashscope {

struct SamplingDefaults {
  SamplingParams params;             // SamplingParams{} with the recommended fields set
  std::vector<std::string> fields;   // which fields were set, by SamplingParams' names
  std::string source;                // "gguf metadata", "SmolLM2 model card", or empty: none known
  std::vector<std::string> ignored;  // general.sampling.* keys with an unusable value (type, range)
};

// Model::sampling_defaults() holds what this returned at load.
// Reads general.sampling.temp, .top_k, .top_p, .min_p, .penalty_repeat and
// .penalty_last_n (an unusable value is skipped and named in `ignored`; a
// top_k <= 0 means all tokens). Without any of them, a model named SmolLM2
// (general.basename or general.name) gets its card's temperature 0.2 and
// top-p 0.9.
SamplingDefaults sampling_defaults(const GgufFile& file);

}  // namespace flashscope
