// The byte-level BPE pre-tokenizers: they split text into the words BPE
// merges within.
//
// "smollm" (llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM; HF's
// Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]):
//
//   1. \p{N}: every number character becomes a piece of its own; the text
//      between them is kept as pieces too.
//   2. each piece from step 1 is split again, on its own (lookahead stops at
//      the piece's end), by the GPT-2 regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// "gpt-2" is step 2 alone.
//
// "llama-bpe" (Llama 3) and "qwen2" split with
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// where qwen2 has \p{N} (one digit) for \p{N}{1,3}.
//
// Each regex is matched by hand, alternative by alternative in its order, with
// the classes of unicode.hpp (which match the reference engine for every
// code point). Contractions are case-sensitive ASCII, as in the regex. Bytes
// that are not valid UTF-8 count as one 'other' character each, so any byte
// string splits without loss: the pieces always concatenate to the input.
#pragma once

#include <string_view>
#include <vector>

namespace flashscope::tokenizer {

enum class PreTokenizerKind { kSmollm, kGpt2, kLlama3, kQwen2 };

// Appends the pieces of `text` to `out` (views into `text`).
void pretokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& out);
inline void pretokenize_smollm(std::string_view text, std::vector<std::string_view>& out) {
  pretokenize(PreTokenizerKind::kSmollm, text, out);
}

}  // namespace flashscope::tokenizer
