// What `generate` and `chat` share: finding the default model and reading
// the sampling flags, so both commands behave the same.
#pragma once

#include <optional>
#include <string>

#include "args.hpp"
#include "flashscope/engine.hpp"

namespace flashscope::cli {

// The flags the sampling options take (value flags of Args).
inline const char* const kSamplingFlags[] = {"temp",           "top-k",            "top-p",
                                             "min-p",          "repeat-penalty",   "presence-penalty",
                                             "frequency-penalty", "dry-multiplier", "seed"};

// -m PATH, else flashscope::find_default_model(). Empty when none exists.
std::string resolve_model_path(const Args& args);
// The message printed when the default model is missing.
std::string missing_model_message(const char* command);
// What the bench commands run on: the model resolve_model_path names, loaded
// with `options` (its path in *path). nullopt with the error printed.
std::optional<Model> load_model_or_print(const Args& args, const ModelOptions& options, const char* command,
                                         std::string* path);
// The device a model runs on, for a report: the GPU's name, or "cpu".
std::string device_display_name(Device device);

// --temp (default 0.7), --top-k 40, --top-p 0.95, --min-p 0.05,
// --repeat-penalty 1.0, --presence-penalty 0, --frequency-penalty 0,
// --dry-multiplier 0.8 (DRY's base 1.75 and allowed length 2), --seed
// (default: from the clock). A value out of range (--temp < 0, --top-k < 0,
// --top-p outside (0, 1], --min-p outside [0, 1], --repeat-penalty <= 0, the
// presence and frequency penalties outside [-2, 2], --dry-multiplier outside
// [0, 100], --seed < 0) is an error
// of args naming the flag.
SamplingParams parse_sampling(Args& args);
// The model's recommended sampling (Model::sampling_defaults: its
// general.sampling.* keys, else its card) for each of those the user did not
// give as a flag. Returns where it came from ("" when nothing was taken).
std::string apply_model_sampling(const Args& args, const Model& model, SamplingParams* s);
// -n / --n-predict: at least 1. --ctx: 0 (the model's context length) or more;
// whether it fits the model is check_ctx_fits's, once the model is loaded.
int parse_n_predict(Args& args, int fallback);
int parse_ctx(Args& args);
// -t / --threads: 0 (the default count) to kMaxThreads; more than the
// machine's hardware threads is allowed (a note says it is slower).
int parse_threads(Args& args, const char* command);
// --weights auto|quantized|bf16 (default auto: ModelOptions' choice by the
// model's size): how a CUDA model keeps its weights (ModelOptions::weights);
// another value is an error of args.
WeightFormat parse_weights(Args& args);
// The usage line of --weights, shared by the commands that take it.
inline constexpr const char* kWeightsUsage =
    "  --weights auto|quantized|bf16  cuda: weights kept in their GGUF blocks or expanded to bf16\n"
    "                        (default auto: bf16 for small models, the blocks for large ones)\n";

// --kv-type bf16|q8_0 (default bf16): the KV cache's element type
// (ModelOptions::kv_type); another value is an error of args.
KvType parse_kv_type_flag(Args& args);
inline constexpr const char* kKvTypeUsage =
    "  --kv-type bf16|q8_0   cpu: KV cache elements in bf16 (default) or q8_0 (int8 blocks of 32 with a\n"
    "                        scale: about half the bytes a long context's decode step reads)\n";

// False, with "--ctx must be at most the model's context length" printed,
// when ctx exceeds what the model was trained on.
bool check_ctx_fits(int ctx, const Model& model, const char* command);

// The chat format of `generate --chat` and `chat`: --chat-template FILE, else
// the model's template (ChatFormat::for_model). Prints its notice (a
// fallback, plain completion) to stderr as "flashscope-cli COMMAND: note:
// ...". False, with the error printed, when the file cannot be read.
bool chat_format_from_args(const Args& args, const Model& model, const char* command, ChatFormat* out);

// Rewrites short flags (-m, -p, -n, -t, -h) to their long names for Args.
std::vector<std::string> expand_short_flags(int argc, char** argv);

}  // namespace flashscope::cli
