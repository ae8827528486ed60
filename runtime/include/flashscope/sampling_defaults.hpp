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

// FlashScope's sampling for a reply whose caller sets nothing and whose
// model recommends nothing: temperature 0.7, top-k 40, top-p 0.95, min-p
// 0.05, no repetition/presence/frequency penalty, DRY 0.8 (base 1.75,
// allowed length 2, the whole conversation), seed 0. SamplingParams{} stays
// the neutral struct (greedy, nothing applied); this is the one place the
// defaults of the CLI, the server, the app and the C ABI's sessions come from.
SamplingParams engine_sampling_defaults();

// The sampling a reply gets when its caller sets nothing:
// engine_sampling_defaults() with the fields `model` recommends (its
// `fields`) taken from model.params. Callers override what their user set.
SamplingParams default_sampling(const SamplingDefaults& model);

}  // namespace flashscope
