// The tokenizer a GGUF file describes: tokenizer.ggml.model, .pre, .tokens,
// .token_type, .scores, .merges, the special token ids, add_bos_token and
// add_space_prefix. The model layer loads it with the weights; tests load it
// alone (a vocabulary can be checked without the architecture's code).
#pragma once

#include "flashscope/gguf.hpp"
#include "flashscope/tokenizer.hpp"

namespace flashscope::tokenizer {

// `vocab` is the model's vocabulary size (the token list must have that many
// entries), or -1 to take the token list's length. Errors: kUnsupported for
// a model or pre-tokenizer that is not implemented (naming those that are),
// kCorruptData for keys of the wrong type or size, ids outside the
// vocabulary, a token type outside 1..6.
Result<Tokenizer> load_gguf_tokenizer(const GgufFile& f, int64_t vocab = -1);

}  // namespace flashscope::tokenizer
