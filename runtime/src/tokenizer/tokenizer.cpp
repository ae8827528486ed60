// Tokenizer and StreamDecoder: vocabulary tables, special-token splitting,
// the encode pipelines (byte-level BPE: pretokenize.cpp, bpe.cpp;
// SentencePiece: spm.cpp) and decoding.
#include "flashscope/tokenizer.hpp"

#include "flashscope/untrusted.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include "tokenizer/bpe.hpp"
#include "tokenizer/byte_map.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/unicode.hpp"

namespace flashscope {
namespace tokenizer {

namespace {

// Words longer than this skip the cache: they are rare and would crowd it.
constexpr size_t kMaxCachedWordBytes = 64;
// The cache is dropped whole when it reaches this many words (about 4 MB).
constexpr size_t kMaxCachedWords = size_t{1} << 16;

const std::string kEmpty;
constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

// Special tokens by their text, for splitting them out of user text: a trie
// over their bytes. Node 0 is the root; its children are in `root` for speed.
struct SpecialTrie {
  std::array<int32_t, 256> root;
  std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> node
  std::vector<int32_t> token;                    // per node: the token ending here, or -1

  SpecialTrie() { root.fill(-1); token.push_back(-1); }
  int32_t child(int32_t node, uint8_t b) const {
    if (node == 0) return root[b];
    auto it = edges.find((uint64_t(uint32_t(node)) << 8) | b);
    return it == edges.end() ? -1 : it->second;
  }
  void insert(std::string_view text, int32_t id) {
    int32_t node = 0;
    for (char c : text) {
      const uint8_t b = static_cast<uint8_t>(c);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(token.size());
        token.push_back(-1);
        if (node == 0) {
          root[b] = next;
        } else {
          edges.emplace((uint64_t(uint32_t(node)) << 8) | b, next);
        }
      }
      node = next;
    }
    if (token[node] < 0) token[node] = id;  // a duplicate text: the lowest id
  }
};

struct TokenizerData {
  TokenizerModel model = TokenizerModel::kBytePairGpt2;
  PreTokenizerKind pre = PreTokenizerKind::kSmollm;
  PreTokenizer pre_name = PreTokenizer::kSmollm;
  bool ignore_merges = false;     // llama-bpe: a word that is a token is taken whole
  bool add_space_prefix = false;  // SentencePiece
  std::vector<float> scores;      // SentencePiece
  std::vector<std::string> pieces;  // vocabulary spelling
  std::vector<std::string> texts;   // the bytes each token decodes to
  std::vector<TokenType> types;
  // Views into `pieces`, which never change after create().
  std::unordered_map<std::string_view, int32_t> piece_to_id;
  BpeMerges merges;
  // Id of each byte's token (its one-character spelling for byte-level BPE,
  // <0xNN> for SentencePiece), or -1.
  std::array<int32_t, 256> byte_token{};
  SpecialTrie specials;
  // Rank of each special token in the order llama.cpp splits them out:
  // longest text first (equal lengths by id).
  std::vector<int32_t> special_rank;  // per token id; -1 for the others
  bool has_user_defined = false;
  bool has_control = false;  // control or unknown: split out only with parse_special
  bool covers_all_bytes = false;  // every byte has its one-character token
  SpecialTokens special_ids;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> word_cache;

  bool valid_id(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(pieces.size()); }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    const bool cacheable = word.size() <= kMaxCachedWordBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      auto it = word_cache.find(std::string(word));
      if (it != word_cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    ids.reserve(word.size());
    if (ignore_merges) {
      std::string spelled;
      for (char c : word) utf8_append(byte_to_code_point(static_cast<uint8_t>(c)), spelled);
      auto it = piece_to_id.find(spelled);
      if (it != piece_to_id.end()) ids.push_back(it->second);
    }
    if (ids.empty()) {
      for (char c : word) {
        const int32_t id = byte_token[static_cast<uint8_t>(c)];
        if (id >= 0) ids.push_back(id);
      }
      merges.apply(ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (word_cache.size() >= kMaxCachedWords) word_cache.clear();
      word_cache.emplace(std::string(word), std::move(ids));
    }
  }

  // The offset in `text` of the first byte no token spells, or npos.
  size_t find_uncovered(std::string_view text) const {
    if (covers_all_bytes) return std::string_view::npos;
    for (size_t i = 0; i < text.size(); ++i) {
      if (byte_token[static_cast<uint8_t>(text[i])] < 0) return i;
    }
    return std::string_view::npos;
  }

  // Byte-level BPE of text between special tokens. With `check`, returns
  // the offset of the first byte no token spells (in `text`, or, where it
  // was not valid UTF-8, in its U+FFFD form), or npos.
  size_t encode_bpe(std::string_view text, bool check, std::vector<int32_t>& out) const {
    if (text.empty()) return std::string_view::npos;
    std::string replaced;
    if (utf8_replace_invalid(text, replaced)) text = replaced;
    const size_t uncovered = check ? find_uncovered(text) : std::string_view::npos;
    std::vector<std::string_view> words;
    pretokenize(pre, text, words);
    for (std::string_view w : words) encode_word(w, out);
    return uncovered;
  }

  // SentencePiece of text between special tokens; `prefix_space` adds the
  // leading space. Returns the offset of the first dropped byte, or npos.
  size_t encode_spm(std::string_view text, bool prefix_space, std::vector<int32_t>& out) const {
    std::string escaped;
    escaped.reserve(text.size() + 8);
    if (prefix_space) escaped += kSpmSpace;
    for (char c : text) {
      if (c == ' ') {
        escaped += kSpmSpace;
      } else {
        escaped += c;
      }
    }
    const SpmVocab vocab{&piece_to_id, &scores, &byte_token, special_ids.unk_id};
    return spm_encode(vocab, escaped, out);
  }
};

// The byte <0xNN> spells, or -1 when `piece` is not of that form.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      v |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      v |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return v;
}

}  // namespace tokenizer

using tokenizer::TokenizerData;

Tokenizer::Tokenizer() = default;

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {}

Result<TokenizerConfig> tokenizer_config_from_names(const std::string& model, const std::string& pre) {
  TokenizerConfig config;
  if (model == "llama") {
    config.model = TokenizerModel::kSentencePiece;
    return config;
  }
  if (model != "gpt2") {
    return unsupported("tokenizer model " + printable(model) +
                       " (tokenizer.ggml.model) is not supported (supported: gpt2 byte-level BPE, "
                       "llama SentencePiece)");
  }
  config.model = TokenizerModel::kBytePairGpt2;
  if (pre == "smollm") {
    config.pre = PreTokenizer::kSmollm;
  } else if (pre == "gpt-2" || pre == "gpt2") {
    config.pre = PreTokenizer::kGpt2;
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    config.pre = PreTokenizer::kLlama3;
  } else if (pre == "qwen2") {
    config.pre = PreTokenizer::kQwen2;
  } else {
    return unsupported("pre-tokenizer " + (pre.empty() ? std::string("(none)") : printable(pre)) +
                       " (tokenizer.ggml.pre) is not supported for gpt2 vocabularies (supported: smollm, "
                       "gpt-2, llama-bpe, qwen2)");
  }
  return config;
}

Result<Tokenizer> Tokenizer::create(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                                    std::vector<std::string> merges, SpecialTokens specials) {
  return create(std::move(tokens), std::move(token_types), std::move(merges), specials, TokenizerConfig{});
}

namespace {

// create()'s inputs, in the order its errors are reported: the vocabulary,
// its types, the model and (SentencePiece) its scores.
Status check_vocabulary(const std::vector<std::string>& tokens, const std::vector<int32_t>& token_types,
                        const TokenizerConfig& config) {
  if (tokens.empty()) return invalid_argument("tokenizer: the vocabulary is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("tokenizer: more than 2^31-1 tokens");
  }
  if (!token_types.empty() && token_types.size() != tokens.size()) {
    return invalid_argument("tokenizer: " + std::to_string(token_types.size()) + " token types for " +
                            std::to_string(tokens.size()) + " tokens");
  }
  for (size_t i = 0; i < token_types.size(); ++i) {
    if (token_types[i] < 1 || token_types[i] > 6) {
      return invalid_argument("tokenizer: token " + std::to_string(i) + " has type " +
                              std::to_string(token_types[i]) + " (1 normal .. 6 byte)");
    }
  }
  const bool spm = config.model == TokenizerModel::kSentencePiece;
  if (config.model != TokenizerModel::kBytePairGpt2 && !spm) {
    return invalid_argument("tokenizer: unknown TokenizerModel " + std::to_string(static_cast<int>(config.model)));
  }
  if (spm) {
    if (config.scores.size() != tokens.size()) {
      return invalid_argument("tokenizer: " + std::to_string(config.scores.size()) + " scores for " +
                              std::to_string(tokens.size()) + " tokens (SentencePiece needs one per token)");
    }
    for (size_t i = 0; i < config.scores.size(); ++i) {
      if (config.scores[i] != config.scores[i]) {
        return invalid_argument("tokenizer: the score of token " + std::to_string(i) + " is NaN");
      }
    }
  }
  return Status::ok_status();
}

Result<tokenizer::PreTokenizerKind> pre_tokenizer_kind(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kSmollm: return tokenizer::PreTokenizerKind::kSmollm;
    case PreTokenizer::kGpt2: return tokenizer::PreTokenizerKind::kGpt2;
    case PreTokenizer::kLlama3: return tokenizer::PreTokenizerKind::kLlama3;
    case PreTokenizer::kQwen2: return tokenizer::PreTokenizerKind::kQwen2;
    default:
      return invalid_argument("tokenizer: unknown PreTokenizer " + std::to_string(static_cast<int>(pre)));
  }
}

// Every special role names a token of the vocabulary of n, or -1.
Status check_special_roles(const SpecialTokens& specials, int32_t n) {
  const std::pair<const char*, int32_t> roles[] = {{"bos", specials.bos_id},
                                                   {"eos", specials.eos_id},
                                                   {"unk", specials.unk_id},
                                                   {"pad", specials.pad_id}};
  for (const auto& [name, id] : roles) {
    if (id < -1 || id >= n) {
      return invalid_argument(std::string("tokenizer: ") + name + " token id " + std::to_string(id) +
                              " is outside the vocabulary of " + std::to_string(n));
    }
  }
  return Status::ok_status();
}

// What each token decodes to. Control and user-defined tokens are text as
// written; a byte token <0xNN> is its byte. Otherwise SentencePiece spells
// a space "▁", and byte-level BPE spells bytes with bytes_to_unicode
// characters (a character outside that alphabet is kept as its own UTF-8).
// SentencePiece's byte tokens are noted in byte_token as they are met.
void decode_token_texts(TokenizerData& data, bool spm) {
  const int32_t n = static_cast<int32_t>(data.pieces.size());
  data.texts.resize(n);
  data.byte_token.fill(-1);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = data.pieces[id];
    const TokenType type = data.types[id];
    std::string& text = data.texts[id];
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      text = piece;
      continue;
    }
    if (type == TokenType::kByte) {
      const int byte = tokenizer::parse_byte_piece(piece);
      if (byte >= 0) {
        text.assign(1, static_cast<char>(byte));
        if (spm && data.byte_token[byte] < 0) data.byte_token[byte] = id;
        continue;
      }
    }
    if (spm) {
      for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, tokenizer::kSpmSpace.size(), tokenizer::kSpmSpace) == 0) {
          text += ' ';
          i += tokenizer::kSpmSpace.size();
        } else {
          text += piece[i++];
        }
      }
      continue;
    }
    for (size_t i = 0; i < piece.size();) {
      uint32_t cp = 0;
      const size_t len = tokenizer::utf8_decode(piece, i, &cp);
      const int byte = cp == tokenizer::kInvalidCodePoint ? -1 : tokenizer::code_point_to_byte(cp);
      if (byte >= 0) {
        text += static_cast<char>(byte);
      } else {
        text.append(piece, i, len);
      }
      i += len;
    }
  }
}

// piece → id, and (byte-level BPE) the token spelling each byte.
void index_pieces(TokenizerData& data, bool spm) {
  const int32_t n = static_cast<int32_t>(data.pieces.size());
  data.piece_to_id.reserve(n);
  for (int32_t id = 0; id < n; ++id) data.piece_to_id.emplace(data.pieces[id], id);

  if (!spm) {
    for (int b = 0; b < 256; ++b) {
      std::string spelled;
      tokenizer::utf8_append(tokenizer::byte_to_code_point(static_cast<uint8_t>(b)), spelled);
      auto it = data.piece_to_id.find(spelled);
      data.byte_token[b] = it == data.piece_to_id.end() ? -1 : it->second;
    }
  }
  data.covers_all_bytes = std::find(data.byte_token.begin(), data.byte_token.end(), -1) == data.byte_token.end();
}

// The BPE merges by rank; one whose parts or result are not tokens can never
// apply and is left out (see create()'s contract).
Status add_merges(TokenizerData& data, const std::vector<std::string>& merges) {
  data.merges.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return Status(StatusCode::kCorruptData, "tokenizer: merge " + std::to_string(rank) + " " +
                                                  printable(m, 120, '"') +
                                                  " is not two tokens separated by one space");
    }
    const std::string_view left(m.data(), space);
    const std::string_view right(m.data() + space + 1, m.size() - space - 1);
    joined.assign(left);
    joined.append(right);
    auto l = data.piece_to_id.find(left);
    auto r = data.piece_to_id.find(right);
    auto j = data.piece_to_id.find(joined);
    if (l == data.piece_to_id.end() || r == data.piece_to_id.end() || j == data.piece_to_id.end()) {
      continue;  // can never apply; see create()'s contract
    }
    data.merges.add(l->second, r->second, {static_cast<int32_t>(rank), j->second});
  }
  return Status::ok_status();
}

// The special (control, user-defined, unknown) pieces the encoder matches in
// text, ranked longest first.
void rank_specials(TokenizerData& data) {
  const int32_t n = static_cast<int32_t>(data.pieces.size());
  std::vector<int32_t> special_ids;
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = data.types[id];
    if ((type != TokenType::kControl && type != TokenType::kUserDefined && type != TokenType::kUnknown) ||
        data.pieces[id].empty()) {
      continue;
    }
    (type == TokenType::kUserDefined ? data.has_user_defined : data.has_control) = true;
    data.specials.insert(data.pieces[id], id);
    special_ids.push_back(id);
  }
  std::stable_sort(special_ids.begin(), special_ids.end(), [&](int32_t a, int32_t b) {
    return data.pieces[a].size() > data.pieces[b].size();
  });
  data.special_rank.assign(n, -1);
  for (size_t i = 0; i < special_ids.size(); ++i) data.special_rank[special_ids[i]] = static_cast<int32_t>(i);
}

}  // namespace

Result<Tokenizer> Tokenizer::create(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                                    std::vector<std::string> merges, SpecialTokens specials,
                                    TokenizerConfig config) {
  FLASHSCOPE_RETURN_IF_ERROR(check_vocabulary(tokens, token_types, config));
  const bool spm = config.model == TokenizerModel::kSentencePiece;
  auto pre_kind = pre_tokenizer_kind(config.pre);
  if (!pre_kind.ok()) return pre_kind.status();
  const int32_t n = static_cast<int32_t>(tokens.size());
  FLASHSCOPE_RETURN_IF_ERROR(check_special_roles(specials, n));

  auto data = std::make_shared<TokenizerData>();
  data->model = config.model;
  data->pre = *pre_kind;
  data->pre_name = config.pre;
  data->ignore_merges = !spm && config.pre == PreTokenizer::kLlama3;
  data->add_space_prefix = spm && config.add_space_prefix;
  data->scores = std::move(config.scores);
  data->special_ids = specials;
  data->pieces = std::move(tokens);
  data->types.resize(n, TokenType::kNormal);
  for (int32_t i = 0; i < static_cast<int32_t>(token_types.size()); ++i) {
    data->types[i] = static_cast<TokenType>(token_types[i]);
  }
  decode_token_texts(*data, spm);
  index_pieces(*data, spm);
  if (!spm) FLASHSCOPE_RETURN_IF_ERROR(add_merges(*data, merges));
  rank_specials(*data);
  return Tokenizer(std::move(data));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  if (data_) encode_into(text, parse_special, out, nullptr);
  return out;
}

Result<std::vector<int32_t>> Tokenizer::encode_checked(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  if (!data_) return out;
  size_t uncovered = std::string_view::npos;
  encode_into(text, parse_special, out, &uncovered);
  if (uncovered != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<uint8_t>(text[uncovered]));
    return invalid_argument(std::string("tokenizer: byte ") + byte + " at offset " + std::to_string(uncovered) +
                            " has no token in the vocabulary (no byte-level token, <0xNN> token or unknown token spells it)");
  }
  return out;
}

// Special tokens are split out as llama.cpp does: the longest special token
// first, at each of its leftmost non-overlapping occurrences, then the next
// longest in the text left between them, and so on. Every occurrence of
// every eligible special token is found with the trie, then taken in that
// order where its bytes are still free. With `uncovered`, the first byte no
// token spells is reported there (offset into `text`, or the start of the
// fragment it was in; the fragment is still encoded without it).
void Tokenizer::encode_into(std::string_view text, bool parse_special, std::vector<int32_t>& out,
                            size_t* uncovered) const {
  const TokenizerData& d = *data_;
  const bool spm = d.model == TokenizerModel::kSentencePiece;
  out.reserve(text.size() / 3 + 4);
  bool prev_special = true;  // SentencePiece: a space prefix for the text's first fragment
  auto plain = [&](size_t begin, size_t end) {
    if (begin == end) return;  // llama.cpp makes no fragment of nothing
    const std::string_view segment = text.substr(begin, end - begin);
    size_t at;
    if (spm) {
      at = d.encode_spm(segment, d.add_space_prefix && prev_special, out);
      if (at != std::string_view::npos) at = 0;
    } else {
      at = d.encode_bpe(segment, uncovered != nullptr, out);
      if (at >= segment.size()) at = at == std::string_view::npos ? at : 0;
    }
    if (uncovered && *uncovered == std::string_view::npos && at != std::string_view::npos) *uncovered = begin + at;
    prev_special = false;
  };
  if (!d.has_user_defined && !(parse_special && d.has_control)) {
    plain(0, text.size());
    return;
  }

  struct Occurrence {
    int32_t rank;
    uint32_t pos;
    int32_t id;
  };
  std::vector<Occurrence> found;
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t node = d.specials.root[static_cast<uint8_t>(text[i])];
    for (size_t j = i; node >= 0;) {
      const int32_t id = d.specials.token[node];
      if (id >= 0 && (parse_special || d.types[id] == TokenType::kUserDefined)) {
        found.push_back({d.special_rank[id], static_cast<uint32_t>(i), id});
      }
      if (++j == text.size()) break;
      node = d.specials.child(node, static_cast<uint8_t>(text[j]));
    }
  }
  if (found.empty()) {
    plain(0, text.size());
    return;
  }
  std::sort(found.begin(), found.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
  });
  // Taken spans by start (disjoint): an occurrence is free when the span
  // starting before its end ends at or before its start.
  std::map<uint32_t, std::pair<uint32_t, int32_t>> taken;  // start -> (end, id)
  for (const Occurrence& o : found) {
    const uint32_t end = o.pos + static_cast<uint32_t>(d.pieces[o.id].size());
    auto next = taken.lower_bound(end);
    if (next != taken.begin() && std::prev(next)->second.first > o.pos) continue;
    taken.emplace(o.pos, std::make_pair(end, o.id));
  }
  size_t plain_start = 0;
  for (const auto& [pos, span] : taken) {
    plain(plain_start, pos);
    out.push_back(span.second);
    prev_special = true;
    plain_start = span.first;
  }
  plain(plain_start, text.size());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (data_ && data_->valid_id(id)) {
      bytes += data_->texts[id];
    } else {
      bytes += tokenizer::kReplacementChar;
    }
  }
  std::string out;
  out.reserve(bytes.size());
  tokenizer::utf8_append_lossy(bytes, /*final=*/true, out);
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  return data_ && data_->valid_id(id) ? data_->texts[id] : tokenizer::kEmpty;
}

const std::string& Tokenizer::token_piece(int32_t id) const {
  return data_ && data_->valid_id(id) ? data_->pieces[id] : tokenizer::kEmpty;
}

TokenType Tokenizer::token_type(int32_t id) const {
  return data_ && data_->valid_id(id) ? data_->types[id] : TokenType::kUndefined;
}

int32_t Tokenizer::token_id(std::string_view piece) const {
  if (!data_) return -1;
  auto it = data_->piece_to_id.find(piece);
  return it == data_->piece_to_id.end() ? -1 : it->second;
}

int32_t Tokenizer::vocab_size() const { return data_ ? static_cast<int32_t>(data_->pieces.size()) : 0; }
int32_t Tokenizer::bos_id() const { return data_ ? data_->special_ids.bos_id : -1; }
int32_t Tokenizer::eos_id() const { return data_ ? data_->special_ids.eos_id : -1; }
int32_t Tokenizer::unk_id() const { return data_ ? data_->special_ids.unk_id : -1; }
int32_t Tokenizer::pad_id() const { return data_ ? data_->special_ids.pad_id : -1; }
bool Tokenizer::add_bos() const { return data_ && data_->special_ids.add_bos; }
TokenizerModel Tokenizer::model() const { return data_ ? data_->model : TokenizerModel::kBytePairGpt2; }
PreTokenizer Tokenizer::pre_tokenizer() const { return data_ ? data_->pre_name : PreTokenizer::kSmollm; }
bool Tokenizer::is_control(int32_t id) const { return token_type(id) == TokenType::kControl; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : data_(tokenizer.data_) {}

std::string StreamDecoder::push(int32_t id) {
  if (data_ && data_->valid_id(id)) {
    pending_ += data_->texts[id];
  } else {
    pending_ += tokenizer::kReplacementChar;
  }
  std::string out;
  const size_t consumed = tokenizer::utf8_append_lossy(pending_, /*final=*/false, out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tokenizer::utf8_append_lossy(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace flashscope
