// The trace file's tokens section (docs/trace_format.md#tokens): labels
// survive a round trip, traces written without them open as before, a newer
// section version is skipped, and a section whose counts or texts overrun it
// is refused.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flashscope/trace.hpp"

namespace fs = flashscope;

namespace {

constexpr size_t kHeader = 32, kEntry = 32;

uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{b[at + size_t(i)]} << (8 * i);
  return v;
}
uint64_t get64(const std::vector<uint8_t>& b, size_t at) { return get32(b, at) | uint64_t{get32(b, at + 4)} << 32; }
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
}

fs::Trace labelled_trace() {
  fs::Trace t;
  t.meta.backend = "cpu";
  t.meta.kernel = "cpu-tiled";
  t.meta.q_len = 2;
  t.meta.kv_len = 3;
  t.meta.head_dim = 64;
  t.meta.block_q = t.meta.block_kv = 64;
  t.meta.softmax_scale = 0.125f;
  t.meta.causal = true;
  // A control token, a text that is part of a UTF-8 character, an empty one.
  t.tokens.keys = {{1, "<|im_start|>"}, {-1, std::string("\xE2\x82", 2)}, {4, ""}};
  t.tokens.row_keys = {1, 2};
  t.tokens.layer = 11;
  return t;
}

std::vector<uint8_t> serialize(const fs::Trace& t) {
  auto b = fs::serialize_trace(t);
  REQUIRE_MESSAGE(b.ok(), b.status().message());
  return std::move(b).value();
}

// Offset of the table entry of section `type`; 0 when absent.
size_t entry_of(const std::vector<uint8_t>& b, uint32_t type) {
  for (uint32_t i = 0; i < get32(b, 12); ++i)
    if (get32(b, kHeader + i * kEntry) == type) return kHeader + i * kEntry;
  return 0;
}

}  // namespace

TEST_CASE("trace tokens: the labels survive serialize and parse") {
  const fs::Trace t = labelled_trace();
  const std::vector<uint8_t> bytes = serialize(t);
  const size_t e = entry_of(bytes, 7);
  REQUIRE(e != 0);
  CHECK(get32(bytes, e + 4) == 8);
  // 16 header + 3·8 keys + 2·4 rows + 14 text bytes = 62 → 8 words.
  CHECK(get64(bytes, e + 8) == 8);
  auto parsed = fs::parse_trace(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().message());
  const fs::TraceTokens& p = parsed->tokens;
  REQUIRE(p.keys.size() == 3);
  for (size_t j = 0; j < 3; ++j) {
    CHECK(p.keys[j].id == t.tokens.keys[j].id);
    CHECK(p.keys[j].text == t.tokens.keys[j].text);
  }
  CHECK(p.row_keys == t.tokens.row_keys);
  CHECK(p.layer == 11);
}

TEST_CASE("trace tokens: a trace without them is written as before and reads with none") {
  fs::Trace t = labelled_trace();
  t.tokens = {};
  const std::vector<uint8_t> bytes = serialize(t);
  CHECK(get32(bytes, 12) == 6);  // the six sections of the first format, nothing else
  CHECK(entry_of(bytes, 7) == 0);
  auto parsed = fs::parse_trace(bytes.data(), bytes.size());
  REQUIRE(parsed.ok());
  CHECK(parsed->tokens.empty());

  // A file written before the section existed (committed with the repository).
  auto old = fs::read_trace(std::string(FLASHSCOPE_SOURCE_DIR) + "/assets/traces/cpu-example.fstrace");
  REQUIRE_MESSAGE(old.ok(), old.status().message());
  CHECK(old->tokens.empty());
  CHECK(!old->tile_mass.empty());
}

TEST_CASE("trace tokens: a newer section version is skipped, a broken one refused") {
  const std::vector<uint8_t> good = serialize(labelled_trace());
  const size_t section = size_t(get64(good, entry_of(good, 7) + 16));

  SUBCASE("version 2: the trace opens without labels") {
    std::vector<uint8_t> b = good;
    put32(b, section, 2);
    auto parsed = fs::parse_trace(b.data(), b.size());
    REQUIRE_MESSAGE(parsed.ok(), parsed.status().message());
    CHECK(parsed->tokens.empty());
  }
  SUBCASE("more keys than the section holds") {
    std::vector<uint8_t> b = good;
    put32(b, section + 4, 1000);
    auto parsed = fs::parse_trace(b.data(), b.size());
    CHECK(parsed.status().code() == fs::StatusCode::kCorruptData);
    CHECK(parsed.status().message().find("do not fit") != std::string::npos);
  }
  SUBCASE("a text longer than the section") {
    std::vector<uint8_t> b = good;
    put32(b, section + 16 + 4, 200);  // key 0's text length
    auto parsed = fs::parse_trace(b.data(), b.size());
    CHECK(parsed.status().code() == fs::StatusCode::kCorruptData);
    CHECK(parsed.status().message().find("overrun") != std::string::npos);
  }
  SUBCASE("a row naming a key past the keys") {
    std::vector<uint8_t> b = good;
    put32(b, section + 16 + 3 * 8, 3);  // row 0 → key 3 of 3
    auto parsed = fs::parse_trace(b.data(), b.size());
    CHECK(parsed.status().code() == fs::StatusCode::kCorruptData);
    CHECK(parsed.status().message().find("row_keys") != std::string::npos);
  }
}

TEST_CASE("trace tokens: validate_trace bounds them by the shape") {
  fs::Trace t = labelled_trace();
  t.tokens.keys.push_back({5, "x"});  // 4 keys, kv_len 3
  CHECK(fs::validate_trace(t).code() == fs::StatusCode::kInvalidArgument);
  t = labelled_trace();
  t.tokens.keys[0].text.assign(256, 'a');
  CHECK(fs::validate_trace(t).code() == fs::StatusCode::kInvalidArgument);
  t = labelled_trace();
  t.tokens.row_keys.push_back(0);  // 3 rows, q_len 2
  CHECK(fs::validate_trace(t).code() == fs::StatusCode::kInvalidArgument);
}
