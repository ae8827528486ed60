// Character classes and UTF-8 handling for the tokenizer (see unicode.hpp).
#include "tokenizer/unicode.hpp"

#include <algorithm>

namespace flashscope::tokenizer {

namespace {

// ASCII dominates English text and code; classify it without the search.
constexpr CharClass ascii_class(uint32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
  if (c >= '0' && c <= '9') return CharClass::kNumber;
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::kSpace;
  return CharClass::kOther;
}

enum class SeqState { kComplete, kIncomplete, kInvalid };

// Checks the sequence that starts at p[0] (avail >= 1 bytes) against the
// Unicode table of well-formed UTF-8 (Table 3-7). *len receives the sequence
// length when complete, or the length of the maximal subpart (the bytes that
// form a valid prefix, at least 1) when invalid or incomplete.
SeqState check_sequence(const uint8_t* p, size_t avail, size_t* len) {
  const uint8_t b0 = p[0];
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0x80) {
    *len = 1;
    return SeqState::kComplete;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *len = 1;  // C0, C1, F5..FF, or a stray continuation byte
    return SeqState::kInvalid;
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= avail) {
      *len = k;
      return SeqState::kIncomplete;
    }
    const uint8_t b = p[k];
    const bool ok = (k == 1) ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *len = k;
      return SeqState::kInvalid;
    }
  }
  *len = need;
  return SeqState::kComplete;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 0x80) return ascii_class(cp);
  // First range whose last >= cp; cp is in it if first <= cp.
  const UnicodeRange* end = kUnicodeRanges + kUnicodeRangeCount;
  const UnicodeRange* it = std::lower_bound(
      kUnicodeRanges, end, cp, [](const UnicodeRange& r, uint32_t v) { return r.last < v; });
  if (it != end && it->first <= cp) return it->cls;
  return CharClass::kOther;
}

size_t utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  size_t len = 0;
  if (check_sequence(p, s.size() - i, &len) != SeqState::kComplete) {
    *cp = kInvalidCodePoint;
    return 1;
  }
  switch (len) {
    case 1: *cp = p[0]; break;
    case 2: *cp = (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F); break;
    case 3: *cp = (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F); break;
    default:
      *cp = (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
            (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
      break;
  }
  return len;
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_append_lossy(std::string_view in, bool final, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  size_t i = 0;
  size_t run_start = 0;  // start of the valid bytes not yet copied
  while (i < in.size()) {
    if (p[i] < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    size_t len = 0;
    const SeqState state = check_sequence(p + i, in.size() - i, &len);
    if (state == SeqState::kComplete) {
      i += len;
      continue;
    }
    out.append(in.data() + run_start, i - run_start);
    if (state == SeqState::kIncomplete && !final) return i;  // wait for more bytes
    out += kReplacement;
    i += len;
    run_start = i;
  }
  out.append(in.data() + run_start, i - run_start);
  return i;
}

bool utf8_replace_invalid(std::string_view in, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  size_t i = 0;
  while (i < in.size()) {  // find the first byte that is not strictly valid
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    if (check_sequence(p + i, in.size() - i, &len) != SeqState::kComplete) break;
    i += len;
  }
  if (i == in.size()) return false;
  out.assign(in.data(), i);
  // From here llama.cpp's decoder (unicode_cpt_from_utf8): a lead byte and
  // the continuation bytes it asks for make a code point, whatever its value
  // (so an overlong form becomes its shortest one and a surrogate stays);
  // anything else is U+FFFD for one byte.
  while (i < in.size()) {
    const uint8_t b = p[i];
    size_t need = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      need = 2, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      need = 3, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      need = 4, cp = b & 0x07;
    }
    bool ok = need != 0 && i + need <= in.size();
    for (size_t k = 1; ok && k < need; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (!ok) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (cp > 0x10FFFF) {
      out += kReplacement;  // llama.cpp aborts here; one U+FFFD for the sequence
    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
      out.append(in.data() + i, need);  // kept as written, as llama.cpp re-encodes it
    } else {
      utf8_append(cp, out);
    }
    i += need;
  }
  return true;
}

}  // namespace flashscope::tokenizer
