// Tokenizer tests. The first part needs no model: a hand-made byte vocabulary
// exercises merge order, the bytes_to_unicode spelling, special tokens,
// lossy decoding and the stream decoder; the pre-tokenizer is checked on
// splits that depend on Unicode classes (expected pieces produced with HF
// tokenizers' Digits + ByteLevel pre-tokenizer). The second part loads the
// default model's vocabulary from its GGUF and checks every string of
// tests/data/tokenizer_smollm2.json (scripts/make_tokenizer_fixture.py)
// against the reference ids; it skips with a message when the model is absent
// (scripts/fetch_model.sh fetches it; FLASHSCOPE_MODEL_DIR overrides the
// folder as it does for that script).
#include <doctest/doctest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/tokenizer.hpp"
#include "support/json_fixture.hpp"
#include "support/model_path.hpp"
#include "support/skip.hpp"
#include "tokenizer/byte_map.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/unicode.hpp"

using flashscope::SpecialTokens;
using flashscope::StatusCode;
using flashscope::StreamDecoder;
using flashscope::Tokenizer;
using flashscope::TokenType;

namespace {

// --- helpers ------------------------------------------------------------------

// Independent of the library's validator on purpose: a strict UTF-8 check
// (no overlongs, surrogates or values above U+10FFFF).
bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 2, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4, cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

std::string spell_byte(uint8_t b) {
  std::string s;
  flashscope::tokenizer::utf8_append(flashscope::tokenizer::byte_to_code_point(b), s);
  return s;
}

// A vocabulary whose token i < 256 is byte i (spelled with bytes_to_unicode),
// followed by `extra` tokens written in plain text and spelled here.
std::vector<std::string> byte_vocab(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(spell_byte(static_cast<uint8_t>(b)));
  for (const std::string& t : extra) {
    std::string spelled;
    for (char c : t) spelled += spell_byte(static_cast<uint8_t>(c));
    tokens.push_back(spelled);
  }
  return tokens;
}

// "a b" merges from plain-text halves.
std::vector<std::string> spelled_merges(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<std::string> merges;
  for (const auto& [l, r] : pairs) {
    std::string m;
    for (char c : l) m += spell_byte(static_cast<uint8_t>(c));
    m += ' ';
    for (char c : r) m += spell_byte(static_cast<uint8_t>(c));
    merges.push_back(m);
  }
  return merges;
}

Tokenizer make(std::vector<std::string> tokens, std::vector<std::string> merges, std::vector<int32_t> types = {}) {
  auto r = Tokenizer::create(std::move(tokens), std::move(types), std::move(merges), SpecialTokens{});
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  return std::move(r).value();
}

std::vector<std::string> pieces_of(const std::string& text) {
  std::vector<std::string_view> views;
  flashscope::tokenizer::pretokenize_smollm(text, views);
  return {views.begin(), views.end()};
}

// Decodes ids one at a time; checks that each piece is valid UTF-8.
std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, bool* all_valid,
                       bool* held_back = nullptr) {
  StreamDecoder sd(tok);
  std::string out;
  *all_valid = true;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    *all_valid = *all_valid && is_valid_utf8(piece);
    if (held_back && sd.pending_bytes() > 0) *held_back = true;
    out += piece;
  }
  const std::string tail = sd.flush();
  *all_valid = *all_valid && is_valid_utf8(tail);
  return out + tail;
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// The model's tokenizer, built the way a loader would: GGUF keys -> vectors.
flashscope::Result<Tokenizer> load_model_tokenizer(const std::string& path) {
  auto file = flashscope::GgufFile::open(path);
  if (!file.ok()) return file.status();
  const flashscope::GgufFile& f = file.value();
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  auto types64 = f.get_int_array("tokenizer.ggml.token_type");
  if (!types64.ok()) return types64.status();
  auto merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  std::vector<int32_t> types(types64.value().begin(), types64.value().end());
  SpecialTokens sp;
  auto id_of = [&](const char* key) -> int32_t {
    auto v = f.get_int(key);
    return v.ok() ? static_cast<int32_t>(v.value()) : -1;
  };
  sp.bos_id = id_of("tokenizer.ggml.bos_token_id");
  sp.eos_id = id_of("tokenizer.ggml.eos_token_id");
  sp.unk_id = id_of("tokenizer.ggml.unknown_token_id");
  sp.pad_id = id_of("tokenizer.ggml.padding_token_id");
  auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  sp.add_bos = add_bos.ok() && add_bos.value();
  return Tokenizer::create(std::move(tokens).value(), std::move(types), std::move(merges).value(), sp);
}

}  // namespace

// --- no model needed ------------------------------------------------------------

TEST_CASE("tokenizer: bytes_to_unicode is GPT-2's map and its inverse") {
  using flashscope::tokenizer::byte_to_code_point;
  using flashscope::tokenizer::code_point_to_byte;
  CHECK(byte_to_code_point(' ') == 0x120);   // "Ġ"
  CHECK(byte_to_code_point('\n') == 0x10A);  // "Ċ"
  CHECK(byte_to_code_point('\t') == 0x109);
  CHECK(byte_to_code_point(0) == 0x100);
  CHECK(byte_to_code_point('!') == '!');
  CHECK(byte_to_code_point('~') == '~');
  CHECK(byte_to_code_point(0x7F) == 0x121);  // DEL: the 34th shifted byte
  CHECK(byte_to_code_point(0xA0) == 0x142);  // NBSP
  CHECK(byte_to_code_point(0xA1) == 0xA1);
  CHECK(byte_to_code_point(0xAD) == 0x143);  // soft hyphen: the last shifted byte
  CHECK(byte_to_code_point(0xFF) == 0xFF);
  std::vector<bool> seen(0x144, false);
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_code_point(static_cast<uint8_t>(b));
    REQUIRE(cp < 0x144);
    CHECK_FALSE(seen[cp]);
    seen[cp] = true;
    CHECK(code_point_to_byte(cp) == b);
  }
  CHECK(code_point_to_byte(0x20) == -1);   // a real space is not in the alphabet
  CHECK(code_point_to_byte(0x144) == -1);
  CHECK(code_point_to_byte(0x4E2D) == -1);
}

TEST_CASE("tokenizer: character classes follow Unicode categories, not ASCII") {
  using flashscope::tokenizer::CharClass;
  using flashscope::tokenizer::char_class;
  CHECK(char_class('a') == CharClass::kLetter);
  CHECK(char_class(0xE9) == CharClass::kLetter);    // é
  CHECK(char_class(0x4E2D) == CharClass::kLetter);  // 中 (Lo)
  CHECK(char_class(0x02B0) == CharClass::kLetter);  // ʰ (Lm)
  CHECK(char_class(0x0301) == CharClass::kOther);   // combining acute (Mn)
  CHECK(char_class('7') == CharClass::kNumber);
  CHECK(char_class(0x0663) == CharClass::kNumber);  // Arabic-Indic three (Nd)
  CHECK(char_class(0x00BD) == CharClass::kNumber);  // ½ (No)
  CHECK(char_class(0x216B) == CharClass::kNumber);  // Ⅻ (Nl)
  CHECK(char_class(0x1D7D8) == CharClass::kNumber); // 𝟘
  CHECK(char_class(0x3000) == CharClass::kSpace);   // ideographic space (Zs)
  CHECK(char_class(0x00A0) == CharClass::kSpace);   // NBSP (Zs)
  CHECK(char_class(0x2028) == CharClass::kSpace);   // Zl
  CHECK(char_class(0x0085) == CharClass::kSpace);   // NEL: in Oniguruma's \s
  CHECK(char_class(0x001C) == CharClass::kOther);   // Python's isspace says yes; \s says no
  CHECK(char_class(0x200B) == CharClass::kOther);   // zero width space is Cf
  CHECK(char_class(0x1F600) == CharClass::kOther);  // 😀 (So)
  CHECK(char_class(0x110000) == CharClass::kOther);
}

TEST_CASE("tokenizer: the smollm pre-tokenizer splits like the reference") {
  // Expected pieces from tokenizers 0.23.3: Sequence[Digits(individual_digits=True),
  // ByteLevel(add_prefix_space=False, use_regex=True)].pre_tokenize_str.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"Hello world! 123", {"Hello", " world", "!", " ", "1", "2", "3"}},
      {"  1", {"  ", "1"}},  // digits first: the run before 1 ends its piece
      {"x  1", {"x", "  ", "1"}},
      {"don't", {"don", "'t"}},
      {"DON'T", {"DON", "'", "T"}},  // contractions are lower case only
      {"they're here", {"they", "'re", " here"}},
      {"it's's", {"it", "'s", "'s"}},
      {" 's", {" '", "s"}},
      {"h\u00e9llo w\u00f6rld", {"h\u00e9llo", " w\u00f6rld"}},
      {"\u4e2d\u6587abc \u65e5\u672c", {"\u4e2d\u6587abc", " \u65e5\u672c"}},  // CJK are letters
      {"\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", {"\u041f\u0440\u0438\u0432\u0435\u0442", " \u043c\u0438\u0440"}},
      {"a\u3000b", {"a", "\u3000", "b"}},
      {"a \u3000b", {"a", " ", "\u3000", "b"}},
      {"\u0663\u0664", {"\u0663", "\u0664"}},  // Arabic-Indic digits split one by one
      {"x\u00bdy", {"x", "\u00bd", "y"}},     // ½ is a number
      {"e\u0301", {"e", "\u0301"}},            // a combining mark is not a letter
      {"a\u0085 b", {"a", "\u0085", " b"}},
      {"x\x1cy", {"x", "\x1c", "y"}},
      {"a  \tb", {"a", "  ", "\t", "b"}},
      {"hello   world", {"hello", "  ", " world"}},
      {"end  ", {"end", "  "}},
      {" !!", {" !!"}},
      {" ?!x", {" ?!", "x"}},
      {"\n\nx", {"\n", "\n", "x"}},
      {"a\r\nb", {"a", "\r", "\n", "b"}},
      {"\U0001F44D\U0001F3FDok", {"\U0001F44D\U0001F3FD", "ok"}},
      {"", {}},
  };
  for (const auto& [text, want] : cases) {
    CAPTURE(text);
    CHECK(pieces_of(text) == want);
  }
  // Invalid UTF-8 bytes are 'other' characters; nothing is lost.
  CHECK(pieces_of("\xff\xfe" "ab \xc3") == std::vector<std::string>{"\xff\xfe", "ab", " \xc3"});
}

TEST_CASE("tokenizer: merges apply by rank, leftmost first on ties") {
  const auto tokens = byte_vocab({"ab", "bc", "abc", "aa", "aaaa"});
  const int32_t ab = 256, bc = 257, abc = 258, aa = 259, aaaa = 260;
  const int32_t a = 'a', b = 'b', c = 'c';

  // "b c" outranks "a b": abc -> a + bc -> abc.
  Tokenizer t1 = make(tokens, spelled_merges({{"b", "c"}, {"a", "b"}, {"a", "bc"}}));
  CHECK(t1.encode("abc", false) == std::vector<int32_t>{abc});
  // Without "a bc" the word stops at a + bc, even though "ab" is a token.
  Tokenizer t2 = make(tokens, spelled_merges({{"b", "c"}, {"a", "b"}}));
  CHECK(t2.encode("abc", false) == std::vector<int32_t>{a, bc});
  // The other order gives ab + c.
  Tokenizer t3 = make(tokens, spelled_merges({{"a", "b"}, {"b", "c"}}));
  CHECK(t3.encode("abc", false) == std::vector<int32_t>{ab, c});
  // Ties go to the leftmost pair.
  Tokenizer t4 = make(tokens, spelled_merges({{"a", "a"}, {"aa", "aa"}}));
  CHECK(t4.encode("aaa", false) == std::vector<int32_t>{aa, a});
  CHECK(t4.encode("aaaa", false) == std::vector<int32_t>{aaaa});
  CHECK(t4.encode("aaaaa", false) == std::vector<int32_t>{aaaa, a});
  CHECK(t4.encode("aab", false) == std::vector<int32_t>{aa, b});
  // Merges never cross pre-tokenizer pieces.
  CHECK(t4.encode("a a", false) == std::vector<int32_t>{a, ' ', a});
  // A merge whose parts or join is not in the vocabulary is ignored.
  Tokenizer t5 = make(tokens, spelled_merges({{"c", "c"}, {"a", "b"}}));
  CHECK(t5.encode("ccab", false) == std::vector<int32_t>{c, c, ab});
}

TEST_CASE("tokenizer: a byte without a token is dropped and its neighbours may merge") {
  // HF's BPE without an unknown token skips such characters the same way.
  std::vector<std::string> tokens = byte_vocab({"ab"});
  tokens['x'] = "<no-x>";  // byte 'x' has no one-character token now
  Tokenizer t = make(tokens, spelled_merges({{"a", "b"}}));
  CHECK(t.encode("axb", false) == std::vector<int32_t>{256});
  CHECK(t.decode(t.encode("axb", false)) == "ab");
}

TEST_CASE("tokenizer: special tokens") {
  std::vector<std::string> tokens = byte_vocab();
  tokens.push_back("<ctl>");   // 256 control
  tokens.push_back("<ctl2>");  // 257 control, shares a prefix with 256
  tokens.push_back("<ctl");    // 258 control, a prefix of both
  tokens.push_back("<usr>");   // 259 user-defined
  std::vector<int32_t> types(tokens.size(), 1);
  types[256] = types[257] = types[258] = 3;
  types[259] = 4;
  Tokenizer t = make(tokens, {}, types);

  CHECK(t.encode("a<ctl>b", true) == std::vector<int32_t>{'a', 256, 'b'});
  CHECK(t.encode("<ctl2><ctl>", true) == std::vector<int32_t>{257, 256});  // longest at a position
  CHECK(t.encode("<ctl", true) == std::vector<int32_t>{258});
  CHECK(t.encode("<ctl3", true) == std::vector<int32_t>{258, '3'});
  CHECK(t.encode("<<ctl>", true) == std::vector<int32_t>{'<', 256});
  // Without parse_special control tokens are text; user-defined ones are still split out.
  const std::vector<int32_t> plain = t.encode("<ctl>", false);
  CHECK(plain.size() == 5);
  CHECK(t.decode(plain) == "<ctl>");
  CHECK(t.encode("<usr>x<ctl>", false).front() == 259);
  CHECK(t.encode("<usr>", true) == std::vector<int32_t>{259});
  // Special tokens decode to their text as written.
  CHECK(t.decode({'h', 256, 'i', 259}) == "h<ctl>i<usr>");
  CHECK(t.token_text(257) == "<ctl2>");
  CHECK(t.is_control(256));
  CHECK_FALSE(t.is_control(259));
  CHECK(t.token_type(259) == TokenType::kUserDefined);
  CHECK(t.token_id("<ctl2>") == 257);
  CHECK(t.token_id("nope") == -1);
}

TEST_CASE("tokenizer: decode replaces invalid UTF-8 like from_utf8_lossy") {
  Tokenizer t = make(byte_vocab(), {});
  auto ids = [](const std::string& bytes) {
    std::vector<int32_t> v;
    for (char c : bytes) v.push_back(static_cast<uint8_t>(c));
    return v;
  };
  CHECK(t.decode(ids("\xe2\x82\xac")) == "\xe2\x82\xac");       // €
  CHECK(t.decode(ids("\xe2\x82")) == "\xef\xbf\xbd");           // one U+FFFD per maximal subpart
  CHECK(t.decode(ids("\xe2\x82" "a")) == "\xef\xbf\xbd" "a");
  CHECK(t.decode(ids("\xff\xfe")) == "\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(t.decode(ids("\xed\xa0\x80")) == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  CHECK(t.decode(ids("\xc0\xaf")) == "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong
  CHECK(t.decode({-1, 'a', 100000}) == "\xef\xbf\xbd" "a\xef\xbf\xbd");          // bad ids
  CHECK(t.token_text(-1).empty());
  // Every byte string encodes and decodes back exactly when it is valid UTF-8.
  const std::string text = "h\xc3\xa9llo \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 12";
  CHECK(t.decode(t.encode(text, true)) == text);
}

TEST_CASE("tokenizer: the stream decoder holds back partial characters") {
  Tokenizer t = make(byte_vocab(), {});
  StreamDecoder sd(t);
  // € is E2 82 AC: nothing until the last byte.
  CHECK(sd.push(0xE2).empty());
  CHECK(sd.pending_bytes() == 1);
  CHECK(sd.push(0x82).empty());
  CHECK(sd.push(0xAC) == "\xe2\x82\xac");
  CHECK(sd.pending_bytes() == 0);
  // A byte that can never start a character is replaced at once.
  CHECK(sd.push(0xFF) == "\xef\xbf\xbd");
  // A sequence cut by a byte that cannot continue it: U+FFFD, then the byte.
  CHECK(sd.push(0xE2).empty());
  CHECK(sd.push('a') == "\xef\xbf\xbd" "a");
  // An incomplete tail becomes U+FFFD only at flush.
  CHECK(sd.push(0xF0).empty());
  CHECK(sd.push(0x9F).empty());
  CHECK(sd.flush() == "\xef\xbf\xbd");
  CHECK(sd.flush().empty());
  CHECK(sd.push(0xE4).empty());
  sd.reset();
  CHECK(sd.push('z') == "z");

  // Random byte streams: every piece is valid UTF-8 and the pieces add up to
  // decode(). Bytes are drawn mostly from lead and continuation ranges so
  // that partial and broken characters are common.
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> ids(rng() % 12);
    for (int32_t& id : ids) {
      const uint32_t r = rng() % 10;
      id = r < 2 ? static_cast<int32_t>('a' + rng() % 26)
                 : r < 6 ? static_cast<int32_t>(0x80 + rng() % 64)
                         : static_cast<int32_t>(0xC0 + rng() % 64);
    }
    bool valid = false;
    const std::string streamed = stream_all(t, ids, &valid);
    CAPTURE(trial);
    CHECK(valid);
    CHECK(streamed == t.decode(ids));
  }
}

TEST_CASE("tokenizer: create validates its input") {
  auto fails_with = [](StatusCode code, std::vector<std::string> tokens, std::vector<int32_t> types,
                       std::vector<std::string> merges, SpecialTokens sp, const char* mentions) {
    auto r = Tokenizer::create(std::move(tokens), std::move(types), std::move(merges), sp);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == code);
    CHECK_MESSAGE(r.status().message().find(mentions) != std::string::npos, r.status().message());
  };
  fails_with(StatusCode::kInvalidArgument, {}, {}, {}, {}, "empty");
  fails_with(StatusCode::kInvalidArgument, {"a", "b"}, {1}, {}, {}, "1 token types for 2 tokens");
  SpecialTokens bad_eos;
  bad_eos.eos_id = 2;
  fails_with(StatusCode::kInvalidArgument, {"a", "b"}, {}, {}, bad_eos, "eos token id 2");
  fails_with(StatusCode::kCorruptData, {"a", "b", "ab"}, {}, {"a b", "ab"}, {}, "merge 1 \"ab\"");
  fails_with(StatusCode::kCorruptData, {"a", "b", "ab"}, {}, {"a  b"}, {}, "merge 0");

  Tokenizer empty;
  CHECK(empty.vocab_size() == 0);
  CHECK(empty.encode("hello", true).empty());
  CHECK(empty.eos_id() == -1);
}

TEST_CASE("tokenizer: copies share the vocabulary and encode concurrently") {
  Tokenizer t = make(byte_vocab({"ab", "abab"}), spelled_merges({{"a", "b"}, {"ab", "ab"}}));
  const std::string text = "abab ab abab abab xyz ababab 123";
  const std::vector<int32_t> want = t.encode(text, false);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      Tokenizer copy = t;
      for (int rep = 0; rep < 200; ++rep) got[k] = copy.encode(text, false);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == want);
}

// --- the default model ------------------------------------------------------------

TEST_CASE("tokenizer: SmolLM2 GGUF vocabulary matches the reference fixture") {
  const std::string path = flashscope::testing::default_model_path();
  if (!file_exists(path)) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  auto loaded = load_model_tokenizer(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  const Tokenizer& tok = loaded.value();
  CHECK(tok.vocab_size() == 49152);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_id() == 2);
  CHECK_FALSE(tok.add_bos());
  CHECK(tok.token_piece(0) == "<|endoftext|>");
  CHECK(tok.token_piece(1) == "<|im_start|>");
  CHECK(tok.token_piece(2) == "<|im_end|>");
  CHECK(tok.is_control(0));
  CHECK(tok.is_control(2));
  CHECK(tok.token_text(198) == "\n");
  CHECK(tok.token_text(905) == " world");

  // REFERENCE.md's third-party vectors, confirmed by the reference tokenizer
  // when the fixture was made.
  CHECK(tok.encode("Hello world! 123", true) == std::vector<int32_t>{19556, 905, 17, 216, 33, 34, 35});
  CHECK(tok.encode("\n", true) == std::vector<int32_t>{198});

  const std::string fixture_path = std::string(FLASHSCOPE_SOURCE_DIR) + "/tests/data/tokenizer_smollm2.json";
  const nlohmann::json root = flashscope::testing::read_json_fixture(fixture_path);
  const auto& cases = root.at("cases");
  REQUIRE(cases.size() >= 200);

  size_t passed = 0;
  size_t index = 0;
  for (const auto& c : cases) {
    const std::string& text = c.at("text").get_ref<const std::string&>();
    const bool parse_special = c.at("parse_special").get<bool>();
    std::vector<int32_t> want;
    for (const auto& id : c.at("ids")) want.push_back(id.get<int32_t>());
    // "decoded": present where decoding the ids does not give the text back.
    const bool has_decoded = c.contains("decoded") && c.at("decoded").is_string();
    const std::string& want_text = has_decoded ? c.at("decoded").get_ref<const std::string&>() : text;
    CAPTURE(index);
    CAPTURE(text);
    CAPTURE(parse_special);

    const std::vector<int32_t> ids = tok.encode(text, parse_special);
    const std::string back = tok.decode(ids);
    bool stream_valid = false;
    const std::string streamed = stream_all(tok, ids, &stream_valid);
    CHECK(ids == want);
    CHECK(back == want_text);
    CHECK(stream_valid);
    CHECK(streamed == back);
    if (ids == want && back == want_text && stream_valid && streamed == back) ++passed;
    ++index;
  }
  MESSAGE(passed << " of " << cases.size() << " fixture strings match the reference");
  CHECK(passed == cases.size());
}

TEST_CASE("tokenizer: SmolLM2 streams emoji and CJK split across tokens") {
  const std::string path = flashscope::testing::default_model_path();
  if (!file_exists(path)) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  auto loaded = load_model_tokenizer(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  const Tokenizer& tok = loaded.value();
  const std::vector<std::string> texts = {
      "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family",  // 👨‍👩‍👧‍👦
      "\U0001F3F3\uFE0F\u200D\U0001F308",                                   // 🏳️‍🌈
      "\u6771\u4eac\u30bf\u30ef\u30fc\u306f333\u30e1\u30fc\u30c8\u30eb",    // 東京タワーは333メートル
      "\U00020000\U0002A6A5 rare CJK",
      "\u0928\u092E\u0938\u094D\u0924\u0947 \U0001F44D\U0001F3FD",
  };
  for (const std::string& text : texts) {
    CAPTURE(text);
    const std::vector<int32_t> ids = tok.encode(text, false);
    // The test only means something if some token ends inside a character.
    bool some_token_partial = false;
    for (int32_t id : ids) some_token_partial = some_token_partial || !is_valid_utf8(tok.token_text(id));
    CHECK(some_token_partial);
    bool valid = false;
    bool held_back = false;
    const std::string streamed = stream_all(tok, ids, &valid, &held_back);
    CHECK(valid);
    CHECK(held_back);
    CHECK(streamed == text);
  }
}
