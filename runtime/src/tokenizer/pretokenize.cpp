// The byte-level BPE pre-tokenizers, their regexes matched by hand (see
// pretokenize.hpp for the rules).
#include "tokenizer/pretokenize.hpp"

#include <cstdint>

#include "tokenizer/unicode.hpp"

namespace flashscope::tokenizer {

namespace {

// One character of the input: where it starts and its class. A sentinel unit
// at the end holds text.size(), so unit i spans [u[i].offset, u[i+1].offset).
struct Unit {
  size_t offset;
  uint32_t cp;
  CharClass cls;
};

// The end (exclusive unit index) of the GPT-2 regex match that starts at
// unit i of the piece [i, e). Every alternative is tried in the regex's
// order; the first that matches wins, as in a backtracking engine.
size_t match_gpt2(const std::vector<Unit>& u, size_t i, size_t e) {
  const uint32_t c = u[i].cp;
  // 's|'t|'re|'ve|'m|'ll|'d
  if (c == '\'' && i + 1 < e) {
    const uint32_t c1 = u[i + 1].cp;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < e) {
      const uint32_t c2 = u[i + 2].cp;
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
  }
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': an optional U+0020, then a run of
  // one non-space class. The space is taken only when such a run follows it.
  size_t start = i;
  if (c == ' ' && i + 1 < e && u[i + 1].cls != CharClass::kSpace) start = i + 1;
  const CharClass k = u[start].cls;
  if (k != CharClass::kSpace) {
    size_t j = start + 1;
    while (j < e && u[j].cls == k) ++j;
    return j;
  }
  // '\s+(?!\S)|\s+': a whitespace run at the end of the piece is taken whole;
  // before a non-space, the lookahead makes the first alternative give back
  // the run's last character (which may then prefix the next word), unless
  // the run is a single character, which '\s+' takes alone.
  size_t r = i + 1;
  while (r < e && u[r].cls == CharClass::kSpace) ++r;
  if (r == e) return e;
  if (r - i >= 2) return r - 1;
  return r;
}

bool is_cr_lf(uint32_t c) { return c == '\r' || c == '\n'; }

// ASCII lower case of c (other code points unchanged), for the (?i:)
// contractions.
uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// The end of the Llama 3 / Qwen2 regex match that starts at unit i of the
// piece [i, e); max_digits is 3 (llama-bpe) or 1 (qwen2).
size_t match_llama3(const std::vector<Unit>& u, size_t i, size_t e, size_t max_digits) {
  const uint32_t c = u[i].cp;
  const CharClass k = u[i].cls;
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c == '\'' && i + 1 < e) {
    const uint32_t c1 = ascii_lower(u[i + 1].cp);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < e) {
      const uint32_t c2 = ascii_lower(u[i + 2].cp);
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t start = e;
  if (k == CharClass::kLetter) {
    start = i;
  } else if (k != CharClass::kNumber && !is_cr_lf(c) && i + 1 < e && u[i + 1].cls == CharClass::kLetter) {
    start = i + 1;
  }
  if (start != e) {
    size_t j = start + 1;
    while (j < e && u[j].cls == CharClass::kLetter) ++j;
    return j;
  }
  // \p{N}{1,3} (qwen2: \p{N})
  if (k == CharClass::kNumber) {
    size_t j = i + 1;
    while (j < e && j - i < max_digits && u[j].cls == CharClass::kNumber) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  start = i;
  if (c == ' ' && i + 1 < e && u[i + 1].cls == CharClass::kOther) start = i + 1;
  if (u[start].cls == CharClass::kOther) {
    size_t j = start + 1;
    while (j < e && u[j].cls == CharClass::kOther) ++j;
    while (j < e && is_cr_lf(u[j].cp)) ++j;
    return j;
  }
  // Here u[i] is whitespace. '\s*[\r\n]+': through the run's last CR or LF.
  size_t r = i + 1;
  while (r < e && u[r].cls == CharClass::kSpace) ++r;
  for (size_t p = r; p > i; --p) {
    if (is_cr_lf(u[p - 1].cp)) return p;
  }
  // '\s+(?!\S)|\s+' as in match_gpt2.
  if (r == e) return e;
  if (r - i >= 2) return r - 1;
  return r;
}

void split_llama3(std::string_view text, const std::vector<Unit>& u, size_t b, size_t e, size_t max_digits,
                  std::vector<std::string_view>& out) {
  size_t i = b;
  while (i < e) {
    const size_t j = match_llama3(u, i, e, max_digits);
    out.push_back(text.substr(u[i].offset, u[j].offset - u[i].offset));
    i = j;
  }
}

void split_gpt2(std::string_view text, const std::vector<Unit>& u, size_t b, size_t e,
                std::vector<std::string_view>& out) {
  size_t i = b;
  while (i < e) {
    const size_t j = match_gpt2(u, i, e);
    out.push_back(text.substr(u[i].offset, u[j].offset - u[i].offset));
    i = j;
  }
}

}  // namespace

void pretokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& out) {
  std::vector<Unit> units;
  units.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_decode(text, i, &cp);
    const CharClass cls = cp == kInvalidCodePoint ? CharClass::kOther : char_class(cp);
    units.push_back({i, cp, cls});
    i += len;
  }
  const size_t n = units.size();
  units.push_back({text.size(), 0, CharClass::kOther});

  switch (kind) {
    case PreTokenizerKind::kGpt2: split_gpt2(text, units, 0, n, out); return;
    case PreTokenizerKind::kLlama3: split_llama3(text, units, 0, n, 3, out); return;
    case PreTokenizerKind::kQwen2: split_llama3(text, units, 0, n, 1, out); return;
    case PreTokenizerKind::kSmollm: break;
  }

  // Step 1 (\p{N} isolated): each number character is a piece; the runs
  // between them go through step 2 separately.
  size_t chunk = 0;
  for (size_t i = 0; i < n; ++i) {
    if (units[i].cls != CharClass::kNumber) continue;
    split_gpt2(text, units, chunk, i, out);
    out.push_back(text.substr(units[i].offset, units[i + 1].offset - units[i].offset));
    chunk = i + 1;
  }
  split_gpt2(text, units, chunk, n, out);
}

}  // namespace flashscope::tokenizer
