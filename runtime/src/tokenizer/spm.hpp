// SentencePiece BPE encoding of one text fragment, as llama.cpp's
// llm_tokenizer_spm does for GGUF tokenizer.ggml.model "llama" (Gemma,
// TinyLlama, Llama 2).
//
// The fragment (spaces already replaced by U+2581) starts as one symbol per
// UTF-8 character; a byte that is not valid UTF-8 is grouped by its lead-byte
// length as llama.cpp does (clipped at the end), and so falls back to bytes.
// Every adjacent pair whose joined text is a vocabulary token is a candidate,
// keyed by that token's score: the highest score merges first, the leftmost
// on ties, until no candidate is left. Symbols live in a linked list over the
// initial positions and candidates in a heap; a candidate whose symbols
// changed since it was pushed is skipped when popped. Each final symbol is
// its token, or, when no token spells it (a character outside the
// vocabulary), the <0xNN> tokens of its bytes, or the unknown token for a
// byte without one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flashscope::tokenizer {

struct SpmVocab {
  const std::unordered_map<std::string_view, int32_t>* piece_to_id;
  const std::vector<float>* scores;         // one per token
  const std::array<int32_t, 256>* byte_token;  // id of <0xNN>, or -1
  int32_t unk_id;                            // -1 when none
};

// Appends the ids of `text` to `out`. Returns the offset in `text` of the
// first byte that had neither a token, a byte token nor an unknown token
// (and was dropped), or npos.
size_t spm_encode(const SpmVocab& vocab, std::string_view text, std::vector<int32_t>& out);

// "▁" (U+2581), which stands for a space in SentencePiece vocabularies.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

}  // namespace flashscope::tokenizer
