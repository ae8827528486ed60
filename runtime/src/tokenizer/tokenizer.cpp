// Tokenizer and StreamDecoder: vocabulary tables, special-token splitting,
// the encode pipeline (pretokenize.cpp, bpe.cpp) and decoding.
#include "flashscope/tokenizer.hpp"

#include "flashscope/untrusted.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "tokenizer/bpe.hpp"
#include "tokenizer/byte_map.hpp"
#include "tokenizer/pretokenize.hpp"
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

struct TokenizerData {
  std::vector<std::string> pieces;  // vocabulary spelling
  std::vector<std::string> texts;   // the bytes each token decodes to
  std::vector<TokenType> types;
  // Views into `pieces`, which never change after create().
  std::unordered_map<std::string_view, int32_t> piece_to_id;
  BpeMerges merges;
  std::array<int32_t, 256> byte_token{};  // id of each byte's one-character token, or -1
  // Control and user-defined tokens by their first byte, longest first, so
  // the first that matches at a position is the longest.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte;
  bool has_user_defined = false;
  bool has_control = false;
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
    for (char c : word) {
      const int32_t id = byte_token[static_cast<uint8_t>(c)];
      if (id >= 0) ids.push_back(id);
    }
    merges.apply(ids);
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

  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<std::string_view> words;
    pretokenize_smollm(text, words);
    for (std::string_view w : words) encode_word(w, out);
  }
};

}  // namespace tokenizer

using tokenizer::TokenizerData;

Tokenizer::Tokenizer() = default;

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {}

Result<Tokenizer> Tokenizer::create(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                                    std::vector<std::string> merges, SpecialTokens specials) {
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
  const int32_t n = static_cast<int32_t>(tokens.size());
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

  auto data = std::make_shared<TokenizerData>();
  data->special_ids = specials;
  data->pieces = std::move(tokens);
  data->types.resize(n, TokenType::kNormal);
  for (int32_t i = 0; i < static_cast<int32_t>(token_types.size()); ++i) {
    data->types[i] = static_cast<TokenType>(token_types[i]);
  }

  // What each token decodes to. Control and user-defined tokens are text as
  // written; the rest spell bytes with bytes_to_unicode characters (a
  // character outside that alphabet is kept as its own UTF-8).
  data->texts.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = data->pieces[id];
    const TokenType type = data->types[id];
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      data->texts[id] = piece;
      continue;
    }
    std::string& text = data->texts[id];
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

  data->piece_to_id.reserve(n);
  for (int32_t id = 0; id < n; ++id) data->piece_to_id.emplace(data->pieces[id], id);

  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    tokenizer::utf8_append(tokenizer::byte_to_code_point(static_cast<uint8_t>(b)), spelled);
    auto it = data->piece_to_id.find(spelled);
    data->byte_token[b] = it == data->piece_to_id.end() ? -1 : it->second;
  }
  data->covers_all_bytes =
      std::find(data->byte_token.begin(), data->byte_token.end(), -1) == data->byte_token.end();

  data->merges.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return Status(StatusCode::kCorruptData, "tokenizer: merge " + std::to_string(rank) + " " + printable(m, 120, '"') +
                                                  " is not two tokens separated by one space");
    }
    const std::string_view left(m.data(), space);
    const std::string_view right(m.data() + space + 1, m.size() - space - 1);
    joined.assign(left);
    joined.append(right);
    auto l = data->piece_to_id.find(left);
    auto r = data->piece_to_id.find(right);
    auto j = data->piece_to_id.find(joined);
    if (l == data->piece_to_id.end() || r == data->piece_to_id.end() || j == data->piece_to_id.end()) {
      continue;  // can never apply; see create()'s contract
    }
    data->merges.add(l->second, r->second, {static_cast<int32_t>(rank), j->second});
  }

  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = data->types[id];
    if ((type != TokenType::kControl && type != TokenType::kUserDefined) || data->pieces[id].empty()) {
      continue;
    }
    (type == TokenType::kControl ? data->has_control : data->has_user_defined) = true;
    data->specials_by_first_byte[static_cast<uint8_t>(data->pieces[id][0])].push_back(id);
  }
  for (auto& ids : data->specials_by_first_byte) {
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return data->pieces[a].size() > data->pieces[b].size();
    });
  }
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
                            " has no token in the vocabulary (no byte-level token spells it)");
  }
  return out;
}

// Leftmost special token first; at one position the longest. With
// `uncovered`, the first byte no token spells is reported there (and its
// segment still encoded without it).
void Tokenizer::encode_into(std::string_view text, bool parse_special, std::vector<int32_t>& out,
                            size_t* uncovered) const {
  const TokenizerData& d = *data_;
  out.reserve(text.size() / 3 + 4);
  auto plain = [&](size_t begin, size_t end) {
    const std::string_view segment = text.substr(begin, end - begin);
    if (uncovered && *uncovered == std::string_view::npos) {
      const size_t at = d.find_uncovered(segment);
      if (at != std::string_view::npos) *uncovered = begin + at;
    }
    d.encode_plain(segment, out);
  };
  if (!d.has_user_defined && !(parse_special && d.has_control)) {
    plain(0, text.size());
    return;
  }
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    int32_t match = -1;
    for (int32_t id : d.specials_by_first_byte[static_cast<uint8_t>(text[i])]) {
      if (!parse_special && d.types[id] == TokenType::kControl) continue;
      const std::string& piece = d.pieces[id];
      if (text.compare(i, piece.size(), piece) == 0) {
        match = id;
        break;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    plain(plain_start, i);
    out.push_back(match);
    i += d.pieces[match].size();
    plain_start = i;
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
