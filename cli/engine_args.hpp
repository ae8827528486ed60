// What `generate` and `chat` share: finding the default model and reading
// the sampling flags, so both commands behave the same.
#pragma once

#include <string>

#include "args.hpp"
#include "flashscope/engine.hpp"

namespace flashscope::cli {

// The flags the sampling options take (value flags of Args).
inline const char* const kSamplingFlags[] = {"temp", "top-k", "top-p", "min-p", "repeat-penalty", "seed"};

// -m PATH, else flashscope::find_default_model(). Empty when none exists.
std::string resolve_model_path(const Args& args);
// The message printed when the default model is missing.
std::string missing_model_message(const char* command);

// --temp (default 0.7), --top-k 40, --top-p 0.95, --min-p 0.05,
// --repeat-penalty 1.0, --seed (default: from the clock).
SamplingParams parse_sampling(Args& args);

// The chat format of `generate --chat` and `chat`: --chat-template FILE, else
// the model's template (ChatFormat::for_model). Prints its notice (a
// fallback, plain completion) to stderr as "flashscope-cli COMMAND: note:
// ...". False, with the error printed, when the file cannot be read.
bool chat_format_from_args(const Args& args, const Model& model, const char* command, ChatFormat* out);

// Rewrites short flags (-m, -p, -n, -t, -h) to their long names for Args.
std::vector<std::string> expand_short_flags(int argc, char** argv);

}  // namespace flashscope::cli
