// .npy IO of the CLI (cli/npy.hpp): files written by real numpy (the fixtures
// in tests/data/npy/, made by make_fixtures.py there) read with the values
// numpy saved, our files are byte for byte what numpy.save writes, every
// dtype and rank 0..4 round-trips, and each kind of bad file gets its own
// status code instead of a crash.
#include <doctest/doctest.h>
#include <stdlib.h>  // mkdtemp

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "npy.hpp"

namespace fs = std::filesystem;
using flashscope::StatusCode;
using flashscope::cli::NpyArray;
using flashscope::cli::npy_as_float;
using flashscope::cli::npy_dtype_itemsize;
using flashscope::cli::parse_npy;
using flashscope::cli::read_npy;
using flashscope::cli::write_npy;

namespace {

std::string fixture(const std::string& name) {
  return std::string(FLASHSCOPE_SOURCE_DIR) + "/tests/data/npy/" + name;
}

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "flashscope-npy-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A .npy image with a hand-written header (unpadded: readers must not care).
std::vector<uint8_t> make_npy(const std::string& header, int major = 1, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t n = header.size();
  b.push_back(static_cast<uint8_t>(n & 0xff));
  b.push_back(static_cast<uint8_t>((n >> 8) & 0xff));
  if (major != 1) {
    b.push_back(static_cast<uint8_t>((n >> 16) & 0xff));
    b.push_back(static_cast<uint8_t>((n >> 24) & 0xff));
  }
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::vector<uint8_t> zeros(size_t n) { return std::vector<uint8_t>(n, 0); }

template <typename T>
std::vector<T> values_as(const NpyArray& a) {
  REQUIRE(a.data.size() == static_cast<size_t>(a.numel()) * sizeof(T));
  std::vector<T> v(static_cast<size_t>(a.numel()));
  if (!v.empty()) std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

// Reads a file expected to fail and returns its status code, showing the
// message so a wrong code is easy to diagnose.
StatusCode read_error(const std::string& path) {
  auto r = read_npy(path);
  INFO("message: ", r.status().message());
  CHECK_FALSE(r.ok());
  CHECK_FALSE(r.status().message().empty());
  return r.status().code();
}

StatusCode parse_error(const std::vector<uint8_t>& bytes) {
  auto r = parse_npy(bytes.data(), bytes.size());
  INFO("message: ", r.status().message());
  CHECK_FALSE(r.ok());
  return r.status().code();
}

}  // namespace

TEST_CASE("npy: files written by numpy read with the values numpy saved") {
  SUBCASE("<f4 (2, 3)") {
    auto r = read_npy(fixture("f4_2x3.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    CHECK(r->dtype == "<f4");
    CHECK(r->shape == std::vector<int64_t>{2, 3});
    CHECK(values_as<float>(r.value()) == std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f});
  }
  SUBCASE("<f2 (5,), converted to float") {
    auto r = read_npy(fixture("f2_5.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    CHECK(r->dtype == "<f2");
    CHECK(r->shape == std::vector<int64_t>{5});
    auto f = npy_as_float(r.value());
    REQUIRE(f.ok());
    const float kInf = std::numeric_limits<float>::infinity();
    CHECK(f.value() == std::vector<float>{-0.5f, 0.25f, 65504.0f, std::ldexp(1.0f, -24), -kInf});
  }
  SUBCASE("<f8 rank 0") {
    auto r = read_npy(fixture("f8_scalar.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    CHECK(r->dtype == "<f8");
    CHECK(r->shape.empty());
    CHECK(r->numel() == 1);
    CHECK(values_as<double>(r.value()) == std::vector<double>{3.25});
  }
  SUBCASE("<i4 (2, 2, 2)") {
    auto r = read_npy(fixture("i4_2x2x2.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    CHECK(r->dtype == "<i4");
    CHECK(r->shape == std::vector<int64_t>{2, 2, 2});
    CHECK(values_as<int32_t>(r.value()) == std::vector<int32_t>{-4, -3, -2, -1, 0, 1, 2, 3});
  }
  SUBCASE("<i8 (1, 2, 3, 1), values past int32") {
    auto r = read_npy(fixture("i8_1x2x3x1.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    CHECK(r->dtype == "<i8");
    CHECK(r->shape == std::vector<int64_t>{1, 2, 3, 1});
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < 6; ++i) expected.push_back(i * 10000000000LL);
    CHECK(values_as<int64_t>(r.value()) == expected);
  }
  SUBCASE("|u1 and <u2") {
    auto u1 = read_npy(fixture("u1_4.npy"));
    REQUIRE_MESSAGE(u1.ok(), u1.status().message());
    CHECK(u1->dtype == "|u1");
    CHECK(values_as<uint8_t>(u1.value()) == std::vector<uint8_t>{0, 1, 127, 255});
    auto u2 = read_npy(fixture("u2_2x2.npy"));
    REQUIRE_MESSAGE(u2.ok(), u2.status().message());
    CHECK(u2->dtype == "<u2");
    CHECK(u2->shape == std::vector<int64_t>{2, 2});
    CHECK(values_as<uint16_t>(u2.value()) == std::vector<uint16_t>{0, 1, 65535, 300});
  }
  SUBCASE("an empty (0, 3) array") {
    auto r = read_npy(fixture("f4_0x3.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    CHECK(r->shape == std::vector<int64_t>{0, 3});
    CHECK(r->numel() == 0);
    CHECK(r->data.empty());
  }
  SUBCASE("rank 16") {
    auto r = read_npy(fixture("f4_rank16.npy"));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    std::vector<int64_t> shape(16, 1);
    shape.front() = 2;
    shape.back() = 3;
    CHECK(r->shape == shape);
    CHECK(values_as<float>(r.value()) == std::vector<float>{0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  }
  SUBCASE("format versions 2.0 and 3.0") {
    for (const char* name : {"v2_f4_3.npy", "v3_f4_3.npy"}) {
      CAPTURE(name);
      auto r = read_npy(fixture(name));
      REQUIRE_MESSAGE(r.ok(), r.status().message());
      CHECK(r->dtype == "<f4");
      CHECK(r->shape == std::vector<int64_t>{3});
      CHECK(values_as<float>(r.value()) == std::vector<float>{1.0f, 2.0f, 3.0f});
    }
  }
}

TEST_CASE("npy: well-formed files we do not support say so") {
  CHECK(read_error(fixture("fortran_f4_2x3.npy")) == StatusCode::kUnsupported);
  CHECK(read_error(fixture("be_f4_3.npy")) == StatusCode::kUnsupported);
  CHECK(read_error(fixture("c8_2.npy")) == StatusCode::kUnsupported);

  auto fortran = read_npy(fixture("fortran_f4_2x3.npy"));
  CHECK(fortran.status().message().find("fortran_order") != std::string::npos);
  auto be = read_npy(fixture("be_f4_3.npy"));
  CHECK(be.status().message().find("'>f4'") != std::string::npos);
  CHECK(be.status().message().find("'<f4'") != std::string::npos);  // names what is supported
  auto c8 = read_npy(fixture("c8_2.npy"));
  CHECK(c8.status().message().find("'<c8'") != std::string::npos);

  CHECK(parse_error(make_npy("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,), }")) ==
        StatusCode::kUnsupported);
  CHECK(parse_error(make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }")) ==
        StatusCode::kUnsupported);
  std::vector<uint8_t> v4 = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 2, zeros(4));
  v4[6] = 4;
  CHECK(parse_error(v4) == StatusCode::kUnsupported);
  std::string rank65 = "(";
  for (int i = 0; i < 65; ++i) rank65 += "1, ";
  CHECK(parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': " + rank65 + "), }", 1, zeros(4))) ==
        StatusCode::kUnsupported);
}

TEST_CASE("npy: fortran_order is accepted where its bytes are the same as C order") {
  // At most one dimension longer than 1: Fortran and C order lay out the same bytes.
  const std::vector<uint8_t> img =
      make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3, 1), }", 1, zeros(12));
  auto r = parse_npy(img.data(), img.size());
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(r->shape == std::vector<int64_t>{1, 3, 1});
}

TEST_CASE("npy: damaged files are corrupt data or I/O errors, never a crash") {
  TempDir tmp;
  const std::vector<uint8_t> good = read_bytes(fixture("f4_2x3.npy"));

  SUBCASE("missing file and directory are I/O errors naming the path") {
    const std::string missing = tmp.file("no_such.npy");
    CHECK(read_error(missing) == StatusCode::kIoError);
    CHECK(read_npy(missing).status().message().find("no_such.npy") != std::string::npos);
    CHECK(read_error(tmp.file("")) == StatusCode::kIoError);
  }
  SUBCASE("truncated anywhere: magic, version, length, header, data") {
    for (size_t keep : {size_t{0}, size_t{3}, size_t{7}, size_t{9}, size_t{40}, good.size() - 24, good.size() - 1}) {
      CAPTURE(keep);
      const std::string path = tmp.file("cut.npy");
      write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(keep)));
      CHECK(read_error(path) == StatusCode::kCorruptData);
    }
    const std::string path = tmp.file("cut.npy");
    write_bytes(path, std::vector<uint8_t>(good.begin(), good.end() - 4));
    CHECK(read_npy(path).status().message().find("truncated") != std::string::npos);
  }
  SUBCASE("trailing bytes after the data") {
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    const std::string path = tmp.file("long.npy");
    write_bytes(path, longer);
    CHECK(read_error(path) == StatusCode::kCorruptData);
  }
  SUBCASE("bad magic") {
    std::vector<uint8_t> bad = good;
    bad[1] = 'X';
    const std::string path = tmp.file("magic.npy");
    write_bytes(path, bad);
    CHECK(read_error(path) == StatusCode::kCorruptData);
    CHECK(read_npy(path).status().message().find("magic") != std::string::npos);
    write_bytes(path, {'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
    CHECK(read_error(path) == StatusCode::kCorruptData);
  }
  SUBCASE("header length past the end of the file, or absurdly large") {
    std::vector<uint8_t> bad = good;
    bad[8] = 0xff;
    bad[9] = 0xff;
    const std::string path = tmp.file("hlen.npy");
    write_bytes(path, bad);
    CHECK(read_error(path) == StatusCode::kCorruptData);
    std::vector<uint8_t> v2 = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 2, zeros(4));
    v2[11] = 0x7f;  // 2 GiB header
    CHECK(parse_error(v2) == StatusCode::kCorruptData);
  }
  SUBCASE("a shape far larger than the file is refused before allocating") {
    const std::string path = tmp.file("huge.npy");
    write_bytes(path, make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000000000), }", 1,
                               zeros(8)));
    CHECK(read_error(path) == StatusCode::kCorruptData);
    write_bytes(path, make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 1,
                               zeros(8)));
    CHECK(read_error(path) == StatusCode::kCorruptData);  // the product overflows int64
  }
}

TEST_CASE("npy: the header is parsed as the Python dict literal it is") {
  const std::vector<uint8_t> six_floats = zeros(24);
  auto parses_to = [&](const std::string& header, int major = 1) {
    const std::vector<uint8_t> img = make_npy(header, major, six_floats);
    auto r = parse_npy(img.data(), img.size());
    INFO("header: ", header, " message: ", r.status().message());
    REQUIRE(r.ok());
    CHECK(r->dtype == "<f4");
    CHECK(r->shape == std::vector<int64_t>{2, 3});
  };
  parses_to("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }                 \n");
  parses_to("{'shape':(2,3),'fortran_order':False,'descr':'<f4'}");            // any order, no spaces
  parses_to("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}");  // double quotes
  parses_to(" {\n 'descr' : '<f4' ,\n\t'fortran_order' : False ,\n 'shape' : ( 2 , 3 , ) ,\n}\n");
  parses_to("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", 1);  // Python 2 longs
  parses_to("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", 2);

  SUBCASE("1-tuples, the empty tuple and a parenthesized int") {
    const std::vector<uint8_t> one = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", 1, six_floats);
    auto r1 = parse_npy(one.data(), one.size());
    REQUIRE_MESSAGE(r1.ok(), r1.status().message());
    CHECK(r1->shape == std::vector<int64_t>{6});
    const std::vector<uint8_t> scalar = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': ()}", 1, zeros(4));
    auto r0 = parse_npy(scalar.data(), scalar.size());
    REQUIRE_MESSAGE(r0.ok(), r0.status().message());
    CHECK(r0->shape.empty());
    // (6) is the int 6, not a tuple: numpy rejects it and so do we.
    CHECK(parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", 1, six_floats)) ==
          StatusCode::kCorruptData);
  }
  SUBCASE("malformed headers are corrupt data") {
    const char* bad[] = {
        "",
        "{",
        "['descr', '<f4']",
        "{'descr': '<f4', 'fortran_order': False}",                                  // no shape
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}",     // unknown key
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", // duplicate key
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}",                     // not a bool
        "{'descr': 4, 'fortran_order': False, 'shape': (2, 3)}",                     // descr not a string
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}",                 // list, not tuple
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3)}",               // float dimension
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, True)}",              // bool dimension
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3)}",               // negative
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",  // > int64
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} junk",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}",                  // unterminated
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}",                  // missing comma
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3)}",
        "{'descr': '<f4', 'fortran_order': Flase, 'shape': (2, 3)}",
        "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)\x00}",
    };
    for (const char* header : bad) {
      CAPTURE(header);
      CHECK(parse_error(make_npy(header, 1, six_floats)) == StatusCode::kCorruptData);
    }
    // The 'L' suffix is Python 2 only: version 3.0 files never had it.
    CHECK(parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", 3, six_floats)) ==
          StatusCode::kCorruptData);
  }
  SUBCASE("deep nesting is refused, not recursed into") {
    const std::string deep = "{'descr': " + std::string(100000, '(') + ", 'fortran_order': False, 'shape': ()}";
    CHECK(parse_error(make_npy(deep, 2, zeros(4))) == StatusCode::kCorruptData);
  }
}

TEST_CASE("npy: every dtype and rank 0..4 round-trips through a file") {
  TempDir tmp;
  const std::vector<int64_t> dims = {2, 3, 1, 4};
  uint32_t seed = 12345;  // LCG: bit patterns, not values, are what must survive
  for (const char* dtype : {"<f4", "<f2", "<f8", "<i4", "<i8", "|u1", "<u2"}) {
    for (size_t rank = 0; rank <= 4; ++rank) {
      CAPTURE(dtype);
      CAPTURE(rank);
      const std::vector<int64_t> shape(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(rank));
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      std::vector<uint8_t> data(static_cast<size_t>(numel) * npy_dtype_itemsize(dtype));
      for (uint8_t& b : data) {
        seed = seed * 1664525u + 1013904223u;
        b = static_cast<uint8_t>(seed >> 24);
      }
      const std::string path = tmp.file("rt.npy");
      const auto written = write_npy(path, dtype, shape, data.data());
      REQUIRE_MESSAGE(written.ok(), written.message());
      const std::vector<uint8_t> file = read_bytes(path);
      CHECK((file.size() - data.size()) % 64 == 0);  // numpy's alignment of the data
      auto r = read_npy(path);
      REQUIRE_MESSAGE(r.ok(), r.status().message());
      CHECK(r->dtype == dtype);
      CHECK(r->shape == shape);
      CHECK(r->data == data);
    }
  }
}

TEST_CASE("npy: our files are byte for byte what numpy.save writes") {
  TempDir tmp;
  for (const char* name : {"f4_2x3.npy", "f2_5.npy", "f8_scalar.npy", "i4_2x2x2.npy", "i8_1x2x3x1.npy", "u1_4.npy",
                           "u2_2x2.npy", "f4_0x3.npy", "f4_rank16.npy"}) {
    CAPTURE(name);
    auto r = read_npy(fixture(name));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const std::string path = tmp.file(name);
    const auto written = write_npy(path, r.value());
    REQUIRE_MESSAGE(written.ok(), written.message());
    CHECK(read_bytes(path) == read_bytes(fixture(name)));
  }
}

TEST_CASE("npy: write_npy refuses bad arguments and leaves no partial file") {
  TempDir tmp;
  const float x[2] = {1.0f, 2.0f};
  const std::string path = tmp.file("w.npy");
  CHECK(write_npy(path, "<c8", {2}, x).code() == StatusCode::kInvalidArgument);
  CHECK(write_npy(path, ">f4", {2}, x).code() == StatusCode::kInvalidArgument);
  CHECK(write_npy(path, "<f4", {-2}, x).code() == StatusCode::kInvalidArgument);
  CHECK(write_npy(path, "<f4", {2}, nullptr).code() == StatusCode::kInvalidArgument);
  CHECK(write_npy(path, "<f4", std::vector<int64_t>(65, 1), x).code() == StatusCode::kInvalidArgument);
  NpyArray short_data{"<f4", {3}, std::vector<uint8_t>(8)};
  CHECK(write_npy(path, short_data).code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(fs::exists(path));
  CHECK(write_npy(path, "<f4", {0, 5}, nullptr).ok());  // nothing to point at is fine when empty

  const std::string unwritable = tmp.file("no_such_dir/w.npy");
  const auto s = write_npy(unwritable, "<f4", {2}, x);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("no_such_dir") != std::string::npos);
}

TEST_CASE("npy: npy_as_float converts floating dtypes and refuses the rest") {
  const double d[4] = {1.5, -1e300, 1e300, std::nan("")};
  NpyArray f8{"<f8", {4}, std::vector<uint8_t>(sizeof d)};
  std::memcpy(f8.data.data(), d, sizeof d);
  auto f = npy_as_float(f8);
  REQUIRE(f.ok());
  CHECK(f.value()[0] == 1.5f);
  CHECK(f.value()[1] == -std::numeric_limits<float>::infinity());
  CHECK(f.value()[2] == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f.value()[3]));

  const double just_above = static_cast<double>(std::numeric_limits<float>::max()) * (1.0 + 1e-9);
  NpyArray edge{"<f8", {}, std::vector<uint8_t>(8)};
  std::memcpy(edge.data.data(), &just_above, 8);
  CHECK(npy_as_float(edge).value()[0] == std::numeric_limits<float>::max());  // rounds, does not overflow

  auto f4 = read_npy(fixture("f4_2x3.npy"));
  REQUIRE(f4.ok());
  CHECK(npy_as_float(f4.value()).value() == std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f});

  auto i4 = read_npy(fixture("i4_2x2x2.npy"));
  REQUIRE(i4.ok());
  CHECK(npy_as_float(i4.value()).status().code() == StatusCode::kInvalidArgument);
  NpyArray inconsistent{"<f4", {3}, std::vector<uint8_t>(8)};
  CHECK(npy_as_float(inconsistent).status().code() == StatusCode::kInvalidArgument);
}
