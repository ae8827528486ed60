// Unicode pieces the tokenizer needs: the character class of a code point
// (from the generated range table in unicode_tables.cpp), a UTF-8 decoder
// that never fails (an invalid byte is a one-byte 'other' unit), and lossy
// UTF-8 validation that replaces invalid bytes with U+FFFD the way Rust's
// String::from_utf8_lossy does (one U+FFFD per maximal invalid subpart), so
// our decode output matches HF tokenizers byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flashscope::tokenizer {

// What the pre-tokenizer regexes distinguish. Values fit in 2 bits.
enum class CharClass : uint8_t {
  kOther = 0,   // not L, N or \s: punctuation, symbols, marks, controls, unassigned
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 3,   // \s (Oniguruma's Unicode definition)
};

struct UnicodeRange {
  uint32_t first;
  uint32_t last;  // inclusive
  CharClass cls;
};

// Generated (scripts/gen_unicode_tables.py): sorted, disjoint ranges of
// every code point that is not kOther.
extern const UnicodeRange kUnicodeRanges[];
extern const size_t kUnicodeRangeCount;
extern const char* const kUnicodeTablesVersion;

// Class of one code point; anything above U+10FFFF is kOther.
CharClass char_class(uint32_t cp);

// Marks a unit that is not valid UTF-8 (never a real code point).
inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

// Decodes the UTF-8 sequence starting at s[i]. Returns its length in bytes
// (1..4) and stores the code point, or returns 1 and stores
// kInvalidCodePoint when s[i] does not start a valid, complete, shortest-form
// sequence (surrogates and values above U+10FFFF are invalid too).
size_t utf8_decode(std::string_view s, size_t i, uint32_t* cp);

// Appends cp as UTF-8 (cp must be a Unicode scalar value).
void utf8_append(uint32_t cp, std::string& out);

// Appends `in` to `out` with every maximal invalid subpart replaced by
// U+FFFD. When `final` is false, a trailing sequence that is incomplete but
// valid so far is left unconsumed; returns how many bytes of `in` were
// consumed (always in.size() when final).
size_t utf8_append_lossy(std::string_view in, bool final, std::string& out);

// What llama.cpp's byte-level BPE does with text that is not valid UTF-8,
// written to `out`: a byte that does not start a complete sequence (by its
// bit pattern) becomes U+FFFD, one per byte; an overlong form becomes the
// shortest form of its code point, a surrogate stays as written; a sequence
// above U+10FFFF (on which llama.cpp aborts) becomes one U+FFFD. Returns
// false, and leaves `out` alone, when `in` is valid UTF-8.
bool utf8_replace_invalid(std::string_view in, std::string& out);

}  // namespace flashscope::tokenizer
