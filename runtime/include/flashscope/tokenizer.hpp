// Tokenizers of the GGUF vocabularies the engine runs, built from plain
// vectors so they do not depend on where the vocabulary came from (the GGUF
// keys tokenizer.ggml.* map onto create(); tokenizer/gguf_tokenizer.hpp reads
// them from a file). Two models (tokenizer.ggml.model):
//
// "gpt2": byte-level BPE. Encoding, in order (as llama.cpp, and HF tokenizers
// with the model's tokenizer.json):
//   1. special tokens are split out of the text as single tokens (below);
//   2. the pre-tokenizer (tokenizer.ggml.pre) splits the rest into words:
//      "smollm": every \p{N} alone, then the GPT-2 regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      "gpt-2": the GPT-2 regex alone;
//      "llama-bpe" (Llama 3) and "qwen2": case-insensitive contractions,
//        letters with one optional leading non-letter, numbers in runs of
//        1-3 digits (qwen2: one digit), punctuation runs with trailing
//        newlines, newline runs, then spaces;
//      all with real Unicode classes;
//   3. each word's bytes become their one-character tokens (GPT-2's
//      bytes_to_unicode spelling) and merge by rank, lowest first ("llama-bpe"
//      first takes a word that is itself a token whole, as Llama 3's
//      tokenizer.json says with ignore_merges).
//   Text that is not valid UTF-8 is encoded as llama.cpp does: each byte that
//   is not part of a UTF-8 sequence becomes U+FFFD (tokenizer/unicode.hpp,
//   utf8_replace_invalid, has the details).
//
// "llama": SentencePiece BPE (Gemma, TinyLlama, Llama 2). Each text fragment
// between special tokens gets a leading space when add_space_prefix is set
// and it starts the text or follows a special token; spaces become U+2581
// "▁"; characters merge pairwise, the pair whose joined text is the token
// with the highest score first (leftmost on ties), until no pair joins into a
// token; a character no token spells becomes its <0xNN> byte tokens (byte
// fallback; the unknown token where a byte token is missing). Bytes that are
// not valid UTF-8 go through byte fallback too, as in llama.cpp.
//
// Special tokens (both models): control (type 3) and unknown (type 2) tokens
// only when parse_special is true (so user text can never inject a control
// token unless the caller asks for it), user-defined tokens (type 4) always.
// As in llama.cpp, the longest special token is split out first, everywhere
// in the text, then the next longest in what is left.
// No BOS is added: prepend bos_id() yourself when add_bos() says so.
//
// Decoding maps each token back to its bytes (byte-level characters to
// bytes; "▁" to a space and <0xNN> to its byte for SentencePiece; control and
// user-defined tokens decode to their text as written). A UTF-8 character may
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

// tokenizer.ggml.model.
enum class TokenizerModel : int32_t {
  kBytePairGpt2 = 0,   // "gpt2": byte-level BPE with merges
  kSentencePiece = 1,  // "llama": SentencePiece BPE with scores and byte fallback
};

// tokenizer.ggml.pre for byte-level BPE (SentencePiece has none).
enum class PreTokenizer : int32_t {
  kSmollm = 0,  // "smollm": digits alone, then the GPT-2 regex
  kGpt2 = 1,    // "gpt-2": the GPT-2 regex
  kLlama3 = 2,  // "llama-bpe": Llama 3 regex, digits in runs of 1-3, ignore_merges
  kQwen2 = 3,   // "qwen2": Llama 3 regex with single digits
};

// How to tokenize: what create() needs beyond the vocabulary. The default is
// the "smollm" byte-level BPE, what the four-argument create() builds.
struct TokenizerConfig {
  TokenizerModel model = TokenizerModel::kBytePairGpt2;
  PreTokenizer pre = PreTokenizer::kSmollm;
  // SentencePiece: tokenizer.ggml.scores, one per token (higher merges first).
  std::vector<float> scores;
  // SentencePiece: tokenizer.ggml.add_space_prefix (llama.cpp's default true).
  bool add_space_prefix = true;
};

// The config of GGUF tokenizer.ggml.model / tokenizer.ggml.pre names
// (pre may be empty for "llama"). kUnsupported names what is supported.
// Scores are left empty.
Result<TokenizerConfig> tokenizer_config_from_names(const std::string& model, const std::string& pre);

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
  // Any model and pre-tokenizer. For SentencePiece, `merges` is ignored
  // (may be empty) and tokens are spelled as the vocabulary does ("▁the",
  // "<0x0A>"); config.scores must have one score per token
  // (kInvalidArgument otherwise, or for a score that is NaN).
  static Result<Tokenizer> create(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                                  std::vector<std::string> merges, SpecialTokens specials,
                                  TokenizerConfig config);

  // An empty tokenizer (vocab_size() == 0): encodes to nothing. Exists for
  // Result<Tokenizer>; use create().
  Tokenizer();

  // Token ids of `text` (any bytes: invalid UTF-8 is handled as llama.cpp
  // does, see the top of this file). Never adds BOS or EOS. A byte whose
  // token is missing from the vocabulary (no byte-level character, no <0xNN>
  // token and no unknown token) is dropped, as HF's BPE and llama.cpp do
  // (encode_checked reports it).
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
  // encode(), but a byte no token spells is an error (kInvalidArgument
  // naming the byte and, for byte-level BPE, its offset) instead of being
  // dropped. Byte-level vocabularies (GPT-2 style, SmolLM2's) and
  // SentencePiece ones with byte fallback spell all 256 bytes, so this fails
  // only for a vocabulary that lacks some; llama.cpp drops them too.
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
  TokenizerModel model() const;
  PreTokenizer pre_tokenizer() const;
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
