// GPT-2's bytes_to_unicode: the reversible map that lets a byte-level BPE
// vocabulary spell every byte as a printable character. Bytes 33..126,
// 161..172 and 174..255 map to the code point of the same value; the other
// 68 bytes (controls, space, DEL, the C1 range, NBSP, soft hyphen) map in
// increasing order to U+0100, U+0101, ... So ' ' is U+0120 "Ġ" and '\n' is
// U+010A "Ċ". Every image is below U+0144.
#pragma once

#include <cstdint>

namespace flashscope::tokenizer {

// The code point that spells byte b in the vocabulary.
uint32_t byte_to_code_point(uint8_t b);

// The byte a vocabulary character stands for, or -1 when cp is not the image
// of any byte.
int code_point_to_byte(uint32_t cp);

}  // namespace flashscope::tokenizer
