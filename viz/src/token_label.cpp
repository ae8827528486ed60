// token_label and the trace lookups (viz/token_label.hpp).
#include "viz/token_label.hpp"

#include <cstdint>
#include <cstdio>

namespace flashscope::viz {
namespace {

// Length of the valid UTF-8 character starting at s[i], 0 when there is none.
size_t utf8_char(const std::string& s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) return 1;
  const size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0) return 0;
  uint32_t cp = c & (0x7Fu >> n);  // the lead byte's payload bits
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string token_label(const std::string& text) {
  if (text.empty()) return "\xE2\x88\x85";  // ∅
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == ' ') {
      out += "\xC2\xB7";  // ·
      ++i;
      continue;
    }
    if (c == '\n') {
      out += "\xE2\x86\xB5";  // ↵
      ++i;
      continue;
    }
    if (c == '\t') {
      out += "\xE2\x86\x92";  // →
      ++i;
      continue;
    }
    const size_t n = utf8_char(text, i);
    const auto byte = static_cast<uint8_t>(c);
    if (n == 0 || byte < 0x20 || byte == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", byte);
      out += buf;
      ++i;
      continue;
    }
    out.append(text, i, n);
    i += n;
  }
  return out;
}

std::string key_token_label(const Trace& t, int key) {
  if (key < 0 || static_cast<size_t>(key) >= t.tokens.keys.size()) return {};
  return token_label(t.tokens.keys[static_cast<size_t>(key)].text);
}

std::string row_token_label(const Trace& t, int row) {
  if (row < 0 || static_cast<size_t>(row) >= t.tokens.row_keys.size()) return {};
  return key_token_label(t, static_cast<int>(t.tokens.row_keys[static_cast<size_t>(row)]));
}

}  // namespace flashscope::viz
