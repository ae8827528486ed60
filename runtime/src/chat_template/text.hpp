// Python's str operations on UTF-8 text, as templates call them: strip and
// split use Python's notion of whitespace (str.isspace: the ASCII spaces,
// \x1c-\x1f, U+0085, U+00A0 and the Unicode spaces), lengths and indices
// count code points, not bytes. Case changes map ASCII letters only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashscope::chat_template::text {

// The code points of `s`; a byte that starts no valid UTF-8 sequence is its
// own code point (so any bytes round-trip through encode()).
std::vector<uint32_t> decode(std::string_view s);
std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
void append_utf8(std::string& out, uint32_t cp);
size_t length(std::string_view s);  // code points

bool is_space(uint32_t cp);

enum class Side { kBoth, kLeft, kRight };
// str.strip() / lstrip() / rstrip(); `chars` set, if given, replaces whitespace.
std::string strip(std::string_view s, Side side);
std::string strip_chars(std::string_view s, std::string_view chars, Side side);

// str.split(): on runs of whitespace, dropping empty pieces; at most
// max_split splits (-1: all).
std::vector<std::string> split_whitespace(std::string_view s, int64_t max_split);
// str.split(sep) with a non-empty separator.
std::vector<std::string> split(std::string_view s, std::string_view sep, int64_t max_split);
// str.replace(old, new, count); count < 0: all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title(std::string_view s);       // jinja2's title filter: words start after space - ( { [ <

}  // namespace flashscope::chat_template::text
