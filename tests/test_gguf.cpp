// GGUF reader (flashscope/gguf.hpp): a well-formed file built in memory
// reads back with every metadata type and tensor field right; each kind of
// corruption is refused with kCorruptData (kUnsupported / kIoError where
// that is the truth) and a message that names the cause; every truncation
// of a good file is refused; random byte damage never crashes; and the
// default model, when scripts/fetch_model.sh has fetched it, has the shape
// the model code will rely on.
#include <doctest/doctest.h>
#include <stdlib.h>  // mkdtemp

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "support/gguf_builder.hpp"
#include "support/model_path.hpp"
#include "support/skip.hpp"

namespace fs = std::filesystem;
using flashscope::GgmlType;
using flashscope::GgufFile;
using flashscope::GgufValueType;
using flashscope::Status;
using flashscope::StatusCode;
using flashscope::testing::GgufBuilder;
using Bytes = GgufBuilder::Bytes;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

Bytes pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// Indices of the keys below, for patching.
enum Key : size_t {
  kArch,
  kBlockCount,
  kU8,
  kI8,
  kU16,
  kI16,
  kI32,
  kU64,
  kI64,
  kRopeBase,
  kF64,
  kFlag,
  kTokens,
  kTokenType,
  kScores,
  kNested,
};

// A small file with one key of every value type and three tensors.
GgufBuilder good_builder() {
  GgufBuilder b;
  b.add_string("general.architecture", "llama")
      .add_u32("llama.block_count", 30)
      .add_u8("test.u8", 200)
      .add_i8("test.i8", -5)
      .add_u16("test.u16", 65535)
      .add_i16("test.i16", -32768)
      .add_i32("test.i32", -123456)
      .add_u64("test.u64", uint64_t{1} << 40)
      .add_i64("test.i64", -(int64_t{1} << 40))
      .add_f32("llama.rope.freq_base", 100000.0f)
      .add_f64("test.f64", 0.125)
      .add_bool("test.flag", true)
      .add_string_array("tokenizer.ggml.tokens", {"<|endoftext|>", "Ġt", ""})
      .add_int_array("tokenizer.ggml.token_type", GgufValueType::kI32, {3, 1, 6})
      .add_f32_array("test.scores", {0.5f, -1.25f});
  // [[1, 2], ["x"]]: an array of arrays.
  Bytes inner;
  GgufBuilder::append_bytes(inner, GgufBuilder::array_bytes(GgufValueType::kU8, 2, Bytes{1, 2}));
  GgufBuilder::append_bytes(inner, GgufBuilder::array_bytes(GgufValueType::kString, 1, GgufBuilder::string_bytes("x")));
  b.add_raw("test.nested", static_cast<uint32_t>(GgufValueType::kArray),
            GgufBuilder::array_bytes(GgufValueType::kArray, 2, inner));
  b.add_tensor("token_embd.weight", GgmlType::kQ8_0, {64, 3}, pattern(3 * 2 * 34, 1))
      .add_tensor("output_norm.weight", GgmlType::kF32, {5}, pattern(20, 2))
      .add_tensor("blk.0.ffn_up.weight", GgmlType::kQ4_K, {256, 1, 2}, pattern(2 * 144, 3));
  return b;
}

Status parse(Bytes bytes) { return GgufFile::from_buffer(std::move(bytes)).status(); }

// The status must be kCorruptData with every one of `words` in its message.
void expect_corrupt(const Status& s, std::initializer_list<const char*> words) {
  INFO("message: " << s.message());
  CHECK(s.code() == StatusCode::kCorruptData);
  for (const char* w : words) CHECK_MESSAGE(contains(s.message(), w), "missing '" << std::string(w) << "'");
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "flashscope-gguf-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const Bytes& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("gguf: a good file reads back every metadata type") {
  auto r = GgufFile::from_buffer(good_builder().build());
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const GgufFile& f = r.value();

  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.keys().size() == 16);
  CHECK(f.keys()[kTokens].key == "tokenizer.ggml.tokens");
  CHECK(f.keys()[kTokens].type == GgufValueType::kArray);
  CHECK(f.keys()[kTokens].elem_type == GgufValueType::kString);
  CHECK(f.keys()[kTokens].count == 3);

  CHECK(f.get_string("general.architecture").value() == "llama");
  // Integers of any width and sign come out of get_int.
  CHECK(f.get_int("llama.block_count").value() == 30);
  CHECK(f.get_int("test.u8").value() == 200);
  CHECK(f.get_int("test.i8").value() == -5);
  CHECK(f.get_int("test.u16").value() == 65535);
  CHECK(f.get_int("test.i16").value() == -32768);
  CHECK(f.get_int("test.i32").value() == -123456);
  CHECK(f.get_int("test.u64").value() == int64_t{1} << 40);
  CHECK(f.get_int("test.i64").value() == -(int64_t{1} << 40));
  CHECK(f.get_float("llama.rope.freq_base").value() == 100000.0);
  CHECK(f.get_float("test.f64").value() == 0.125);
  CHECK(f.get_float("llama.block_count").value() == 30.0);  // integers convert
  CHECK(f.get_bool("test.flag").value() == true);
  CHECK(f.get_string_array("tokenizer.ggml.tokens").value() == std::vector<std::string>{"<|endoftext|>", "Ġt", ""});
  CHECK(f.get_int_array("tokenizer.ggml.token_type").value() == std::vector<int64_t>{3, 1, 6});
  CHECK(f.get_float_array("test.scores").value() == std::vector<float>{0.5f, -1.25f});

  const auto nested = f.key_info("test.nested");
  REQUIRE(nested.ok());
  CHECK(nested.value().elem_type == GgufValueType::kArray);
  CHECK(nested.value().count == 2);
  CHECK(f.format_value("test.nested").value() == "[[1, 2], [\"x\"]]");
  CHECK(f.format_value("tokenizer.ggml.tokens", 2).value() == "[\"<|endoftext|>\", \"Ġt\", ...] (3 string)");
  CHECK(f.format_value("llama.rope.freq_base").value() == "100000");
  CHECK(f.has_key("test.flag"));
  CHECK_FALSE(f.has_key("test.nope"));
}

TEST_CASE("gguf: a good file's tensor table") {
  GgufBuilder::Layout layout;
  Bytes bytes = good_builder().build(&layout);
  const Bytes copy = bytes;
  auto r = GgufFile::from_buffer(std::move(bytes));
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const GgufFile& f = r.value();

  REQUIRE(f.tensors().size() == 3);
  CHECK(f.data_offset() == layout.data_offset);
  CHECK(f.data_offset() % 32 == 0);
  CHECK(f.file_size() == copy.size());

  const flashscope::GgufTensor* emb = f.find_tensor("token_embd.weight");
  REQUIRE(emb != nullptr);
  CHECK(emb->type == GgmlType::kQ8_0);
  CHECK(emb->n_dims == 2);
  CHECK(emb->ne[0] == 64);
  CHECK(emb->ne[1] == 3);
  CHECK(emb->ne[2] == 1);
  CHECK(emb->ne[3] == 1);
  CHECK(emb->n_elements() == 192);
  CHECK(emb->n_rows() == 3);
  CHECK(emb->row_size() == 68);
  CHECK(emb->size == 204);
  CHECK(emb->offset == 0);
  CHECK(std::memcmp(emb->data, copy.data() + layout.data_offset, 204) == 0);

  const flashscope::GgufTensor* norm = f.find_tensor("output_norm.weight");
  REQUIRE(norm != nullptr);
  CHECK(norm->n_dims == 1);
  CHECK(norm->size == 20);
  CHECK(norm->offset == 224);  // 204 rounded up to 32
  CHECK(std::memcmp(norm->data, pattern(20, 2).data(), 20) == 0);

  const flashscope::GgufTensor* up = f.find_tensor("blk.0.ffn_up.weight");
  REQUIRE(up != nullptr);
  CHECK(up->n_dims == 3);
  CHECK(up->ne[2] == 2);
  CHECK(up->size == 288);
  CHECK(up->offset == 256);

  CHECK(f.find_tensor("output.weight") == nullptr);
}

TEST_CASE("gguf: version 2, custom alignment and an empty file") {
  GgufBuilder b = good_builder();
  b.version(2).alignment(64);
  auto r = GgufFile::from_buffer(b.build());
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(r.value().version() == 2);
  CHECK(r.value().alignment() == 64);
  CHECK(r.value().data_offset() % 64 == 0);
  for (const auto& t : r.value().tensors()) CHECK(t.offset % 64 == 0);

  // No keys, no tensors: valid, and nothing in it.
  auto empty = GgufFile::from_buffer(GgufBuilder().build());
  REQUIRE_MESSAGE(empty.ok(), empty.status().message());
  CHECK(empty.value().keys().empty());
  CHECK(empty.value().tensors().empty());
}

TEST_CASE("gguf: getters report missing keys and wrong types by name") {
  auto r = GgufFile::from_buffer(good_builder().build());
  REQUIRE(r.ok());
  const GgufFile& f = r.value();
  expect_corrupt(f.get_int("llama.context_length").status(), {"llama.context_length", "missing"});
  expect_corrupt(f.get_int("general.architecture").status(), {"general.architecture", "string", "integer"});
  expect_corrupt(f.get_string("llama.block_count").status(), {"llama.block_count", "u32", "string"});
  expect_corrupt(f.get_bool("test.u8").status(), {"test.u8", "bool"});
  expect_corrupt(f.get_float("test.flag").status(), {"test.flag"});
  expect_corrupt(f.get_int_array("tokenizer.ggml.tokens").status(), {"tokenizer.ggml.tokens", "array of 3 string"});
  expect_corrupt(f.get_string_array("test.nested").status(), {"test.nested"});
  expect_corrupt(f.get_float_array("tokenizer.ggml.token_type").status(), {"token_type", "i32"});

  GgufBuilder big;
  big.add_u64("big", ~uint64_t{0});
  auto rb = GgufFile::from_buffer(big.build());
  REQUIRE(rb.ok());
  expect_corrupt(rb.value().get_int("big").status(), {"big", "INT64_MAX"});
  CHECK(rb.value().get_float("big").value() == 18446744073709551615.0);
}

TEST_CASE("gguf: corrupt headers") {
  GgufBuilder::Layout lay;
  const Bytes good = good_builder().build(&lay);

  Bytes bad_magic = good;
  bad_magic[0] = 'X';
  expect_corrupt(parse(bad_magic), {"magic", "GGUF"});

  Bytes bad_version = good;
  GgufBuilder::patch<uint32_t>(bad_version, 4, 7);
  expect_corrupt(parse(bad_version), {"version 7"});
  GgufBuilder::patch<uint32_t>(bad_version, 4, 0);
  expect_corrupt(parse(bad_version), {"version 0"});

  Bytes v1 = good;
  GgufBuilder::patch<uint32_t>(v1, 4, 1);
  const Status s1 = parse(v1);
  CHECK(s1.code() == StatusCode::kUnsupported);
  CHECK(contains(s1.message(), "version 1"));

  Bytes big_endian = good;
  GgufBuilder::patch<uint32_t>(big_endian, 4, 0x03000000u);
  const Status sbe = parse(big_endian);
  CHECK(sbe.code() == StatusCode::kUnsupported);
  CHECK(contains(sbe.message(), "big-endian"));

  Bytes many_tensors = good;
  GgufBuilder::patch<uint64_t>(many_tensors, 8, uint64_t{1} << 62);
  expect_corrupt(parse(many_tensors), {"4611686018427387904 tensors", "cannot fit"});

  Bytes many_keys = good;
  GgufBuilder::patch<uint64_t>(many_keys, 16, 1000000);
  expect_corrupt(parse(many_keys), {"1000000 metadata keys", "cannot fit"});

  // One key too many: the parser runs into the tensor infos and trips there.
  Bytes one_more_key = good;
  GgufBuilder::patch<uint64_t>(one_more_key, 16, 17);
  CHECK(parse(one_more_key).code() == StatusCode::kCorruptData);
}

TEST_CASE("gguf: every truncation of a good file is refused") {
  const Bytes good = good_builder().build();
  REQUIRE(parse(good).ok());
  std::set<std::string> kinds;
  for (size_t n = 0; n < good.size(); ++n) {
    const Status s = parse(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    INFO("prefix of " << n << " bytes: " << s.message());
    REQUIRE(s.code() == StatusCode::kCorruptData);
    const bool named = contains(s.message(), "truncated") || contains(s.message(), "past the end") ||
                       contains(s.message(), "cannot fit");
    CHECK(named);
    kinds.insert(s.message().substr(0, 12));
  }
  // Spot checks at the section boundaries.
  GgufBuilder::Layout lay;
  good_builder().build(&lay);
  expect_corrupt(parse(Bytes(good.begin(), good.begin() + 10)), {"truncated", "tensor_count"});
  // (A prefix of the big file mostly fails the header's "cannot fit" check
  // first; a one-key file reaches the key's value.)
  GgufBuilder::Layout one_lay;
  const Bytes one = GgufBuilder().add_u32("llama.block_count", 30).build(&one_lay);
  expect_corrupt(parse(Bytes(one.begin(), one.begin() + static_cast<std::ptrdiff_t>(one_lay.value_offsets[0]) + 2)),
                 {"truncated", "llama.block_count", "needs 4 bytes"});
  expect_corrupt(parse(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(lay.tensor_info_offsets[1]) + 30)),
                 {"truncated", "output_norm.weight"});
  expect_corrupt(parse(Bytes(good.begin(), good.end() - 1)), {"blk.0.ffn_up.weight", "past the end"});
  CHECK(kinds.size() >= 3);
}

TEST_CASE("gguf: corrupt metadata") {
  GgufBuilder::Layout lay;
  const Bytes good = good_builder().build(&lay);

  SUBCASE("string length past the end of the file") {
    Bytes b = good;
    GgufBuilder::patch<uint64_t>(b, lay.value_offsets[kArch], uint64_t{1} << 40);
    expect_corrupt(parse(b), {"string length 1099511627776", "general.architecture", "past the end"});
  }
  SUBCASE("key length past the end of the file") {
    Bytes b = good;
    GgufBuilder::patch<uint64_t>(b, lay.kv_offsets[kFlag], ~uint64_t{0});
    expect_corrupt(parse(b), {"metadata key #11", "past the end"});
  }
  SUBCASE("array count far beyond the file") {
    Bytes b = good;
    GgufBuilder::patch<uint64_t>(b, lay.value_offsets[kTokenType] + 4, uint64_t{1} << 61);
    expect_corrupt(parse(b), {"tokenizer.ggml.token_type", "2305843009213693952", "past the end"});
  }
  SUBCASE("string array count far beyond the file") {
    Bytes b = good;
    GgufBuilder::patch<uint64_t>(b, lay.value_offsets[kTokens] + 4, uint64_t{1} << 50);
    expect_corrupt(parse(b), {"tokenizer.ggml.tokens", "cannot fit"});
  }
  SUBCASE("a string inside an array runs past the end") {
    Bytes b = good;
    // The first token's length: after the array's u32 type and u64 count.
    GgufBuilder::patch<uint64_t>(b, lay.value_offsets[kTokens] + 12, uint64_t{1} << 33);
    expect_corrupt(parse(b), {"element 0", "tokenizer.ggml.tokens", "past the end"});
  }
  SUBCASE("unknown value type") {
    Bytes b = good;
    GgufBuilder::patch<uint32_t>(b, lay.value_offsets[kFlag] - 4, 13);
    expect_corrupt(parse(b), {"test.flag", "unknown value type 13"});
  }
  SUBCASE("unknown array element type") {
    Bytes b = good;
    GgufBuilder::patch<uint32_t>(b, lay.value_offsets[kScores], 99);
    expect_corrupt(parse(b), {"test.scores", "unknown element type 99"});
  }
  SUBCASE("bool that is neither 0 nor 1") {
    Bytes b = good;
    b[lay.value_offsets[kFlag]] = 2;
    expect_corrupt(parse(b), {"test.flag", "bool", "value 2"});
  }
  SUBCASE("empty key") {
    GgufBuilder e;
    e.add_u32("", 1);
    expect_corrupt(parse(e.build()), {"key #0", "empty"});
  }
  SUBCASE("duplicate key") {
    GgufBuilder d = good_builder();
    d.add_u32("llama.block_count", 31);
    expect_corrupt(parse(d.build()), {"duplicate", "llama.block_count"});
  }
  SUBCASE("arrays nested too deep") {
    Bytes v = GgufBuilder::array_bytes(GgufValueType::kU8, 0, {});
    for (int i = 0; i < 12; ++i) v = GgufBuilder::array_bytes(GgufValueType::kArray, 1, v);
    GgufBuilder d;
    d.add_raw("deep", static_cast<uint32_t>(GgufValueType::kArray), v);
    expect_corrupt(parse(d.build()), {"deep", "nests arrays deeper"});
  }
  SUBCASE("alignment not a power of two, or not an integer") {
    GgufBuilder a = good_builder();
    a.alignment(48);
    expect_corrupt(parse(a.build()), {"general.alignment", "48", "power of two"});
    GgufBuilder z;
    z.add_u32("general.alignment", 0);
    expect_corrupt(parse(z.build()), {"general.alignment", "power of two"});
    GgufBuilder s;
    s.add_string("general.alignment", "32");
    expect_corrupt(parse(s.build()), {"general.alignment", "integer"});
  }
}

TEST_CASE("gguf: corrupt tensor infos") {
  auto with_tensor = [](GgufBuilder::Tensor t) {
    GgufBuilder b;
    b.add_string("general.architecture", "llama");
    b.add_tensor("ok.weight", GgmlType::kF32, {8}, Bytes(32, 0));
    b.add_tensor(std::move(t));
    return b.build();
  };
  auto tensor = [](std::string name, uint32_t type, std::vector<uint64_t> ne, size_t bytes) {
    GgufBuilder::Tensor t;
    t.name = std::move(name);
    t.type = type;
    t.ne = std::move(ne);
    t.data = Bytes(bytes, 0);
    return t;
  };
  constexpr uint32_t kF32 = 0;
  constexpr uint32_t kQ4_K = 12;

  SUBCASE("offset not a multiple of the alignment") {
    auto t = tensor("w", kF32, {4}, 16);
    t.offset = 48;
    expect_corrupt(parse(with_tensor(t)), {"'w'", "offset 48", "alignment 32"});
  }
  SUBCASE("data past the end of the file") {
    auto t = tensor("w", kF32, {1024}, 16);  // says 4096 bytes, has 16
    expect_corrupt(parse(with_tensor(t)), {"'w'", "past the end"});
    // An offset a terabyte out: the builder would write the terabyte, so
    // the offset is patched in afterwards.
    GgufBuilder::Layout lay;
    GgufBuilder b;
    b.add_tensor(tensor("far", kF32, {4}, 16));
    Bytes bytes = b.build(&lay);
    GgufBuilder::patch<uint64_t>(bytes, lay.tensor_infos_end - 8, uint64_t{1} << 40);
    expect_corrupt(parse(bytes), {"'far'", "past the end"});
  }
  SUBCASE("n_dims 5") {
    auto t = tensor("w", kF32, {1, 1, 1, 1, 1}, 4);
    expect_corrupt(parse(with_tensor(t)), {"'w'", "n_dims 5", "at most 4"});
  }
  SUBCASE("dimensions whose product overflows") {
    auto t = tensor("w", kF32, {uint64_t{1} << 32, uint64_t{1} << 32}, 4);
    expect_corrupt(parse(with_tensor(t)), {"'w'", "overflows"});
    auto huge = tensor("h", kF32, {uint64_t{1} << 63}, 4);
    expect_corrupt(parse(with_tensor(huge)), {"'h'", "INT64_MAX"});
    auto bytes = tensor("b", kF32, {uint64_t{1} << 61, 2}, 4);  // 2^62 elements, 2^64 bytes
    expect_corrupt(parse(with_tensor(bytes)), {"'b'", "byte size that overflows"});
  }
  SUBCASE("ne[0] not a multiple of the block size") {
    auto t = tensor("w", kQ4_K, {576, 1}, 144);
    expect_corrupt(parse(with_tensor(t)), {"'w'", "Q4_K", "576", "block size 256"});
  }
  SUBCASE("unknown ggml type") {
    auto t = tensor("w", 99, {4}, 16);
    expect_corrupt(parse(with_tensor(t)), {"'w'", "unknown ggml type 99"});
  }
  SUBCASE("a ggml type without a GGUF layout is unsupported, by name") {
    auto t = tensor("w", 31, {32}, 18);
    const Status s = parse(with_tensor(t));
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(contains(s.message(), "Q4_0_4_4"));
  }
  SUBCASE("duplicate tensor name") {
    auto t = tensor("ok.weight", kF32, {8}, 32);
    expect_corrupt(parse(with_tensor(t)), {"duplicate tensor name", "'ok.weight'"});
  }
  SUBCASE("overlapping tensors") {
    auto t = tensor("w", kF32, {8}, 32);
    t.offset = 0;  // on top of ok.weight
    expect_corrupt(parse(with_tensor(t)), {"'ok.weight'", "'w'", "overlap"});
  }
  SUBCASE("empty tensor name") {
    auto t = tensor("", kF32, {8}, 32);
    expect_corrupt(parse(with_tensor(t)), {"tensor #1", "empty name"});
  }
  SUBCASE("tensor name length past the end") {
    GgufBuilder::Layout lay;
    Bytes b = good_builder().build(&lay);
    GgufBuilder::patch<uint64_t>(b, lay.tensor_info_offsets[2], uint64_t{1} << 35);
    expect_corrupt(parse(b), {"tensor #2", "past the end"});
  }
}

TEST_CASE("gguf: random damage to the header never crashes") {
  GgufBuilder::Layout lay;
  const Bytes good = good_builder().build(&lay);
  std::mt19937 rng(20240601);  // fixed seed: failures reproduce
  std::uniform_int_distribution<size_t> where(0, lay.tensor_infos_end - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes b = good;
    const int flips = 1 + trial % 4;
    for (int i = 0; i < flips; ++i) b[where(rng)] = static_cast<uint8_t>(byte(rng));
    auto r = GgufFile::from_buffer(std::move(b));
    if (!r.ok()) {
      ++refused;
      INFO("trial " << trial << ": " << r.status().message());
      CHECK_FALSE(r.status().message().empty());
      continue;
    }
    // Whatever was accepted must still be internally consistent.
    for (const auto& t : r.value().tensors()) {
      CHECK(t.offset + t.size <= r.value().file_size() - r.value().data_offset());
    }
    for (const auto& k : r.value().keys()) CHECK(r.value().format_value(k.key).ok());
  }
  CHECK(refused > 1000);
}

TEST_CASE("gguf: open() maps a file and reports I/O problems by path") {
  TempDir dir;
  REQUIRE_FALSE(dir.path().empty());
  const std::string good_path = dir.file("good.gguf", good_builder().build());
  auto r = GgufFile::open(good_path);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(r.value().path() == good_path);
  CHECK(r.value().get_int("llama.block_count").value() == 30);
  const flashscope::GgufTensor* norm = r.value().find_tensor("output_norm.weight");
  REQUIRE(norm != nullptr);
  CHECK(std::memcmp(norm->data, pattern(20, 2).data(), 20) == 0);

  // Moving keeps the mapping, and the tensor pointers, alive.
  GgufFile moved = std::move(r.value());
  CHECK(moved.find_tensor("output_norm.weight") == norm);
  CHECK(std::memcmp(norm->data, pattern(20, 2).data(), 20) == 0);
  CHECK(r.value().tensors().empty());  // NOLINT: the moved-from object is empty, not broken
  CHECK_FALSE(r.value().get_int("llama.block_count").ok());

  const Status missing = GgufFile::open(dir.path() + "/nope.gguf").status();
  CHECK(missing.code() == StatusCode::kIoError);
  CHECK(contains(missing.message(), "nope.gguf"));

  const Status directory = GgufFile::open(dir.path()).status();
  CHECK(directory.code() == StatusCode::kIoError);

  const Status empty = GgufFile::open(dir.file("empty.gguf", {})).status();
  CHECK(empty.code() == StatusCode::kCorruptData);
  CHECK(contains(empty.message(), "empty"));

  Bytes bad = good_builder().build();
  bad.resize(bad.size() / 2);
  const Status cut = GgufFile::open(dir.file("cut.gguf", bad)).status();
  CHECK(cut.code() == StatusCode::kCorruptData);
  CHECK(contains(cut.message(), "cut.gguf: "));
}

TEST_CASE("gguf: the default model (SmolLM2-135M-Instruct Q4_1)") {
  const std::string path = flashscope::testing::default_model_path();
  if (!fs::exists(path)) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  auto r = GgufFile::open(path);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const GgufFile& f = r.value();

  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.file_size() == 98362432);
  CHECK(f.get_string("general.architecture").value() == "llama");
  CHECK(f.get_int("llama.block_count").value() == 30);
  CHECK(f.get_int("llama.embedding_length").value() == 576);
  CHECK(f.get_int("llama.attention.head_count").value() == 9);
  CHECK(f.get_int("llama.attention.head_count_kv").value() == 3);
  CHECK(f.get_int("llama.feed_forward_length").value() == 1536);
  CHECK(f.get_int("llama.vocab_size").value() == 49152);
  CHECK(f.get_int("llama.context_length").value() == 8192);
  CHECK(f.get_int("llama.rope.dimension_count").value() == 64);
  CHECK(f.get_float("llama.rope.freq_base").value() == 100000.0);
  CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon").value() == doctest::Approx(1e-5).epsilon(1e-6));
  CHECK(f.get_int("general.file_type").value() == 3);  // MOSTLY_Q4_1
  CHECK(f.get_string("tokenizer.ggml.model").value() == "gpt2");
  CHECK(f.get_string("tokenizer.ggml.pre").value() == "smollm");
  CHECK(f.get_bool("tokenizer.ggml.add_bos_token").value() == false);
  CHECK(f.get_int("tokenizer.ggml.bos_token_id").value() == 1);
  CHECK(f.get_int("tokenizer.ggml.eos_token_id").value() == 2);
  CHECK(f.get_int("tokenizer.ggml.padding_token_id").value() == 2);
  CHECK(f.get_int("tokenizer.ggml.unknown_token_id").value() == 0);

  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.ok());
  REQUIRE(tokens.value().size() == 49152);
  CHECK(tokens.value()[0] == "<|endoftext|>");
  CHECK(tokens.value()[1] == "<|im_start|>");
  CHECK(tokens.value()[2] == "<|im_end|>");
  CHECK(f.get_int_array("tokenizer.ggml.token_type").value().size() == 49152);
  CHECK(f.key_info("tokenizer.ggml.merges").value().count == 48900);
  CHECK(contains(f.get_string("tokenizer.chat_template").value(),
                 "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>"));

  // 30 blocks x 9 tensors + token_embd + output_norm; tied embeddings.
  CHECK(f.tensors().size() == 272);
  CHECK(f.find_tensor("output.weight") == nullptr);
  const flashscope::GgufTensor* emb = f.find_tensor("token_embd.weight");
  REQUIRE(emb != nullptr);
  CHECK(emb->type == GgmlType::kQ8_0);
  CHECK(emb->ne[0] == 576);
  CHECK(emb->ne[1] == 49152);
  const flashscope::GgufTensor* norm = f.find_tensor("output_norm.weight");
  REQUIRE(norm != nullptr);
  CHECK(norm->type == GgmlType::kF32);
  for (int layer = 0; layer < 30; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    struct Expect {
      const char* name;
      GgmlType type;
      int64_t ne0;
      int64_t ne1;
    };
    const Expect expect[] = {
        {"attn_norm.weight", GgmlType::kF32, 576, 1},    {"ffn_norm.weight", GgmlType::kF32, 576, 1},
        {"attn_q.weight", GgmlType::kQ4_1, 576, 576},    {"attn_k.weight", GgmlType::kQ4_1, 576, 192},
        {"attn_v.weight", GgmlType::kQ4_1, 576, 192},    {"attn_output.weight", GgmlType::kQ4_1, 576, 576},
        {"ffn_gate.weight", GgmlType::kQ4_1, 576, 1536}, {"ffn_up.weight", GgmlType::kQ4_1, 576, 1536},
        {"ffn_down.weight", GgmlType::kQ4_1, 1536, 576},
    };
    for (const Expect& e : expect) {
      const flashscope::GgufTensor* t = f.find_tensor(p + e.name);
      INFO(p << e.name);
      REQUIRE(t != nullptr);
      CHECK(t->type == e.type);
      CHECK(t->ne[0] == e.ne0);
      CHECK(t->ne[1] == e.ne1);
    }
  }

  // Values as gguf-py 0.19's dequantizer reads them from this file.
  std::vector<float> row(576);
  REQUIRE(flashscope::dequantize_rows(*emb, 0, 1, row.data()).ok());
  CHECK(row[0] == -0.10654449462890625f);
  CHECK(row[1] == 0.032978057861328125f);
  CHECK(row[3] == -0.022830963134765625f);
  REQUIRE(flashscope::dequantize_rows(*emb, 1, 1, row.data()).ok());
  CHECK(row[0] == -0.0238037109375f);
  CHECK(row[2] == -0.0396728515625f);
  REQUIRE(flashscope::dequantize_rows(*norm, 0, 1, row.data()).ok());
  CHECK(row[0] == 1.7578125f);
  CHECK(row[3] == 1.6015625f);
  const flashscope::GgufTensor* q0 = f.find_tensor("blk.0.attn_q.weight");
  REQUIRE(flashscope::dequantize_rows(*q0, 0, 1, row.data()).ok());
  CHECK(row[0] == -0.0963134765625f);
  CHECK(row[1] == 0.1573486328125f);
  CHECK(row[3] == -0.73046875f);
}
