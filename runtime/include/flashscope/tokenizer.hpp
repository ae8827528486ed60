// Byte-level BPE tokenizer (GGUF tokenizer.ggml.model "gpt2") with the
// "smollm" pre-tokenizer, built from plain vectors so it does not depend on
// where the vocabulary came from (the GGUF keys tokenizer.ggml.tokens,
// token_type, merges and the special token ids map onto create()).
//
// Encoding, in order (the same as HF tokenizers with the model's
// tokenizer.json, and llama.cpp's "smollm" pre-type):
//   1. special tokens are split out of the text as single tokens, leftmost
//      first and the longest at one position: user-defined tokens (type 4)
//      always, control tokens (type 3, e.g. <|im_start|>) only when
//      parse_special is true (so user text can never inject a control token
//      unless the caller asks for it);
//   2. every \p{N} character becomes a piece of its own, then the GPT-2
//      regex splits the rest ('s|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
//      |\s+(?!\S)|\s+), with real Unicode classes;
//   3. each piece's bytes become their one-character tokens (GPT-2's
//      bytes_to_unicode spelling) and merge by rank, lowest first.
// No BOS is added: prepend bos_id() yourself when add_bos() says so.
//
// Decoding maps each token's characters back to bytes (control and user-
// defined tokens decode to their text as written). A UTF-8 character may
// span tokens, so decode() replaces what is not valid UTF-8 with U+FFFD
// (exactly as HF's ByteLevel decoder does) and StreamDecoder holds bytes back
// until the character they start is complete.
//
// A Tokenizer is immutable after create() apart from an internal word cache
// (locked), so one object may encode and decode from several threads.
// Copies are cheap and share the vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>: matched in text only with parse_special
  kUserDefined = 4,  // always matched in text as one token
  kUnused = 5,
  kByte = 6,
};

// Ids of the tokens with a role; -1 where the vocabulary has none.
struct SpecialTokens {
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token: callers prepend bos_id
};

namespace tokenizer {
struct TokenizerData;
}

class Tokenizer {
 public:
  // tokens[i] is token i as the vocabulary spells it (bytes_to_unicode form,
  // "Ġworld" for " world"). token_types[i] is its TokenType value; an empty
  // vector means all normal. merges are "left right" strings, rank = index.
  // Errors: kInvalidArgument for an empty vocabulary, a token_types size
  // other than 0 or tokens.size(), a type outside 1..6 (kNormal..kByte),
  // or a special id outside the vocabulary;
  // kCorruptData for a merge that is not two tokens joined by one space.
  // Merges naming tokens that are not in the vocabulary (or whose join is
  // not) can never apply and are ignored; for a duplicate token string the
  // lowest id wins, as for a duplicate merge the lowest rank.
  static Result<Tokenizer> create(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                                  std::vector<std::string> merges, SpecialTokens specials);

  // An empty tokenizer (vocab_size() == 0): encodes to nothing. Exists for
  // Result<Tokenizer>; use create().
  Tokenizer();

  // Token ids of `text` (any bytes: invalid UTF-8 is encoded byte by byte
  // and round-trips through the byte tokens). Never adds BOS or EOS. A byte
  // whose one-character token is missing from the vocabulary is dropped, as
  // HF's BPE does without an unknown token (encode_checked reports it).
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
  // encode(), but a byte no token spells is an error (kInvalidArgument
  // naming the byte and its offset) instead of being dropped. Byte-level
  // vocabularies (GPT-2 style, SmolLM2's) spell all 256 bytes, so this
  // fails only for a vocabulary that lacks some; llama.cpp drops them too.
  Result<std::vector<int32_t>> encode_checked(std::string_view text, bool parse_special) const;

  // The text of `ids`, valid UTF-8: invalid or incomplete byte sequences
  // become U+FFFD (one per maximal invalid subpart, as Rust's
  // from_utf8_lossy and so HF's decode). Control and user-defined tokens are
  // included as their text. An id outside the vocabulary decodes to U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const;

  // The bytes token `id` stands for; may be part of a UTF-8 character. Empty
  // for ids outside the vocabulary.
  const std::string& token_text(int32_t id) const;
  // The token as the vocabulary spells it ("Ġworld"); empty when out of range.
  const std::string& token_piece(int32_t id) const;
  // kUndefined for ids outside the vocabulary.
  TokenType token_type(int32_t id) const;
  // The id of a vocabulary spelling ("<|im_end|>", "Ġworld"), or -1.
  int32_t token_id(std::string_view piece) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool add_bos() const;
  // Control tokens (<|endoftext|>, <|im_end|>, ...): what a generation loop
  // treats as "not text".
  bool is_control(int32_t id) const;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const tokenizer::TokenizerData> data);
  void encode_into(std::string_view text, bool parse_special, std::vector<int32_t>& out, size_t* uncovered) const;
  std::shared_ptr<const tokenizer::TokenizerData> data_;
};

// Turns generated token ids into text as they arrive, never returning part
// of a UTF-8 character: bytes that start an incomplete character are held
// until the bytes that complete it come. A byte sequence that can no longer
// become valid is returned as U+FFFD right away (the stream cannot wait
// forever); an incomplete tail becomes U+FFFD only at flush(). So the
// concatenation of every push() and the final flush() equals
// tokenizer.decode(all ids), and each returned string is valid UTF-8.
// Keeps the tokenizer's vocabulary alive on its own.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer);

  // The complete text that token `id` finishes (often empty or a whole
  // token; for emoji and CJK split across tokens, the characters they end).
  std::string push(int32_t id);
  // Whatever is held back, with an incomplete character as U+FFFD; the
  // decoder is empty afterwards and can start a new stream.
  std::string flush();
  // Drops what is held back without returning it.
  void reset() { pending_.clear(); }
  // Bytes held back waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::shared_ptr<const tokenizer::TokenizerData> data_;
  std::string pending_;
};

}  // namespace flashscope
