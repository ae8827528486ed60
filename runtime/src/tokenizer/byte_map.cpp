// bytes_to_unicode and its inverse, built once as constexpr tables.
#include "tokenizer/byte_map.hpp"

#include <array>

namespace flashscope::tokenizer {

namespace {

// One past the largest image: 256 + 68 shifted bytes.
constexpr uint32_t kImageLimit = 0x144;

constexpr bool maps_to_itself(uint32_t b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

struct ByteMapTables {
  std::array<uint16_t, 256> to_cp{};
  std::array<int16_t, kImageLimit> to_byte{};
};

constexpr ByteMapTables build_tables() {
  ByteMapTables t{};
  for (auto& v : t.to_byte) v = -1;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t cp = maps_to_itself(b) ? b : next++;
    t.to_cp[b] = static_cast<uint16_t>(cp);
    t.to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

constexpr ByteMapTables kTables = build_tables();
static_assert(kTables.to_cp[' '] == 0x120, "space must map to U+0120 (Ġ)");
static_assert(kTables.to_cp['\n'] == 0x10A, "newline must map to U+010A (Ċ)");
static_assert(kTables.to_cp[0xAD] == 0x143, "the last shifted byte maps to U+0143");

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return kTables.to_cp[b]; }

int code_point_to_byte(uint32_t cp) { return cp < kImageLimit ? kTables.to_byte[cp] : -1; }

}  // namespace flashscope::tokenizer
