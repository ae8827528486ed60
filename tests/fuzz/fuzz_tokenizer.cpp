// The tokenizer on arbitrary text and arbitrary ids, over vocabularies built
// here: byte-level BPE (all 256 byte tokens, merges up to whole words, a
// control and a user-defined token) with the smollm and the llama-bpe
// pre-tokenizers, and SentencePiece (the 256 <0xNN> tokens, scored pieces up
// to whole words, the same special tokens). The first input byte picks the
// tokenizer and the mode. Checked, what the API promises:
//   - valid UTF-8 text round-trips: decode(encode(text)) == text;
//   - decode() returns valid UTF-8, whatever the ids (unknown ones included);
//   - StreamDecoder: every push() valid UTF-8, and all pushes plus flush()
//     equal decode() of the same ids.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/tokenizer.hpp"
#include "tokenizer/byte_map.hpp"
#include "tokenizer/unicode.hpp"

using namespace flashscope;

namespace {

std::string spell(std::string_view bytes) {
  std::string out;
  for (char c : bytes) tokenizer::utf8_append(tokenizer::byte_to_code_point(static_cast<uint8_t>(c)), out);
  return out;
}

Tokenizer make_tokenizer(PreTokenizer pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(spell(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  // Merges build these words up left to right, each pair a token.
  std::vector<std::string> merges;
  for (const char* word : {" the", " and", "ing", "hello", " world", "\n\n", "123", "é", "\xe4\xbd\xa0\xe5\xa5\xbd"}) {
    const std::string w = word;
    for (size_t n = 2; n <= w.size(); ++n) {
      const std::string left = w.substr(0, n - 1), right = w.substr(n - 1, 1);
      merges.push_back(spell(left) + " " + spell(right));
      tokens.push_back(spell(w.substr(0, n)));
      types.push_back(1);
    }
  }
  tokens.push_back("<|im_start|>");
  types.push_back(3);
  tokens.push_back("<tool>");
  types.push_back(4);
  SpecialTokens sp;
  sp.eos_id = static_cast<int32_t>(tokens.size() - 2);
  TokenizerConfig config;
  config.pre = pre;
  auto t = Tokenizer::create(std::move(tokens), std::move(types), std::move(merges), sp, config);
  if (!t.ok()) __builtin_trap();
  return std::move(t).value();
}

Tokenizer make_spm_tokenizer() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  auto add = [&](std::string t, int32_t type, float score) {
    tokens.push_back(std::move(t));
    types.push_back(type);
    scores.push_back(score);
  };
  add("<unk>", 2, 0);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 6, 0);
  }
  // Every prefix of these words is a piece, longer ones scored higher.
  float score = -100;
  for (const char* word : {"\xe2\x96\x81" "the", "\xe2\x96\x81" "and", "ing", "hello", "\xe2\x96\x81\xe2\x96\x81", "123",
                           "\xc3\xa9", "\xe4\xbd\xa0\xe5\xa5\xbd"}) {
    const std::string w = word;
    for (size_t n = 1; n <= w.size(); ++n) {
      const std::string prefix = w.substr(0, n);
      if (std::find(tokens.begin(), tokens.end(), prefix) == tokens.end()) add(prefix, 1, score += 1);
    }
  }
  add("<s>", 3, 0);
  add("<tool>", 4, 0);
  TokenizerConfig config;
  config.model = TokenizerModel::kSentencePiece;
  config.scores = scores;
  config.add_space_prefix = false;  // so valid text round-trips
  SpecialTokens sp;
  sp.unk_id = 0;
  auto t = Tokenizer::create(std::move(tokens), std::move(types), {}, sp, std::move(config));
  if (!t.ok()) __builtin_trap();
  return std::move(t).value();
}

bool valid_utf8(std::string_view s) {
  std::string out;
  tokenizer::utf8_append_lossy(s, true, out);
  return out == s;
}

void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::string& decoded) {
  StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    if (!valid_utf8(piece)) __builtin_trap();
    streamed += piece;
  }
  streamed += stream.flush();
  if (streamed != decoded) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tokenizers[3] = {make_tokenizer(PreTokenizer::kSmollm),
                                          make_tokenizer(PreTokenizer::kLlama3), make_spm_tokenizer()};
  if (size == 0) return 0;
  const Tokenizer& tok = tokenizers[(data[0] >> 2) % 3];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    // Text.
    const bool parse_special = data[0] & 2;
    const std::vector<int32_t> ids = tok.encode(rest, parse_special);
    auto checked = tok.encode_checked(rest, parse_special);
    if (!checked.ok() || checked.value() != ids) __builtin_trap();  // every byte has a token here
    const std::string decoded = tok.decode(ids);
    if (!valid_utf8(decoded)) __builtin_trap();
    if (valid_utf8(rest) && decoded != rest) __builtin_trap();
    check_stream(tok, ids, decoded);
  } else {
    // Ids, two bytes each, a few of them outside the vocabulary.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < rest.size(); i += 2) {
      const int v = static_cast<uint8_t>(rest[i]) | (static_cast<uint8_t>(rest[i + 1]) << 8);
      ids.push_back(v % (tok.vocab_size() + 8) - 4);
    }
    const std::string decoded = tok.decode(ids);
    if (!valid_utf8(decoded)) __builtin_trap();
    check_stream(tok, ids, decoded);
  }
  return 0;
}
