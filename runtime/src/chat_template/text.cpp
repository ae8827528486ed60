#include "chat_template/text.hpp"

#include <algorithm>

namespace flashscope::chat_template::text {

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    const auto c = static_cast<unsigned char>(s[k]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
    bool ok = len > 0 && k + static_cast<size_t>(len) <= s.size();
    for (int j = 1; ok && j < len; ++j) {
      const auto cc = static_cast<unsigned char>(s[k + static_cast<size_t>(j)]);
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    if (!ok) {
      // A stray byte stands for itself; 0xDC80.. (Python's surrogateescape)
      // keeps it apart from a real code point so encode() restores the byte.
      out.push_back(0xdc00u + c);
      ++k;
      continue;
    }
    out.push_back(cp);
    k += static_cast<size_t>(len);
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xdc80u && cp <= 0xdcffu) {
    out += static_cast<char>(cp - 0xdc00u);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) append_utf8(out, cps[k]);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

namespace {

template <typename Pred>
std::string strip_if(std::string_view s, Side side, Pred drop) {
  if (s.empty()) return {};
  const std::vector<uint32_t> cps = decode(s);
  size_t b = 0, e = cps.size();
  if (side != Side::kRight) {
    while (b < e && drop(cps[b])) ++b;
  }
  if (side != Side::kLeft) {
    while (e > b && drop(cps[e - 1])) --e;
  }
  return encode(cps, b, e);
}

}  // namespace

std::string strip(std::string_view s, Side side) {
  // ASCII fast path: most text has no non-ASCII whitespace at its ends.
  size_t b = 0, e = s.size();
  auto ascii_space = [](unsigned char c) { return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20); };
  if (side != Side::kRight) {
    while (b < e && ascii_space(static_cast<unsigned char>(s[b]))) ++b;
  }
  if (side != Side::kLeft) {
    while (e > b && ascii_space(static_cast<unsigned char>(s[e - 1]))) --e;
  }
  const bool left_clean = side == Side::kRight || b == e || static_cast<unsigned char>(s[b]) < 0x80;
  const bool right_clean = side == Side::kLeft || b == e || static_cast<unsigned char>(s[e - 1]) < 0x80;
  if (left_clean && right_clean) return std::string(s.substr(b, e - b));
  return strip_if(s.substr(b, e - b), side, is_space);
}

std::string strip_chars(std::string_view s, std::string_view chars, Side side) {
  const std::vector<uint32_t> set = decode(chars);
  return strip_if(s, side, [&](uint32_t cp) { return std::find(set.begin(), set.end(), cp) != set.end(); });
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t max_split) {
  const std::vector<uint32_t> cps = decode(s);
  std::vector<std::string> out;
  size_t k = 0;
  while (k < cps.size()) {
    while (k < cps.size() && is_space(cps[k])) ++k;
    if (k == cps.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      // The rest, with its trailing whitespace stripped, is the last piece.
      size_t e = cps.size();
      while (e > k && is_space(cps[e - 1])) --e;
      out.push_back(encode(cps, k, e));
      break;
    }
    size_t e = k;
    while (e < cps.size() && !is_space(cps[e])) ++e;
    out.push_back(encode(cps, k, e));
    k = e;
  }
  return out;
}

std::vector<std::string> split(std::string_view s, std::string_view sep, int64_t max_split) {
  std::vector<std::string> out;
  size_t start = 0;
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    const size_t at = s.find(sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::vector<uint32_t> cps = decode(s);
    int64_t done = 0;
    for (uint32_t cp : cps) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      append_utf8(out, cp);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string title(std::string_view s) {
  // jinja2: re.split(r"([-\s(\{\[\<]+)") then each piece's first character
  // upper-cased and the rest lower-cased.
  std::string out = lower(s);
  bool at_word_start = true;
  for (char& c : out) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' ||
                     (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
    if (sep) {
      at_word_start = true;
      continue;
    }
    if (at_word_start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    at_word_start = false;
  }
  return out;
}

}  // namespace flashscope::chat_template::text
