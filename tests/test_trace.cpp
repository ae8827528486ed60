// Traces: the file format (round trip, strict rejection of corrupt files,
// skipping of unknown sections) and the CPU capture's records against the
// reference attention.
//
// Tolerances of the capture checks. The capture computes what the CPU
// backend computes, in the same order, so its o and lse must equal
// attention_tiled's bit for bit (a difference means the dashboard would show
// a softmax other than the one that ran). Its records are then checked
// against independent double-precision math from the fixture's inputs:
//   rescale, l    recurrences in float: relative 1e-5 (a few float ulps of
//                 the exp and the sum, with room for the ln 2 conversion of m)
//   final m, l    m + ln l is the row's lse: exactly the lse the run stored,
//                 and within the fixture's lse tolerance (1e-3) of the reference
//   masses, probs p_ij from float logits and a float l over at most a few
//                 hundred keys: relative error a few 1e-6 (logit rounding,
//                 D·2^-24 of Σ|q·k|·scale) plus l's sum (n·2^-24); bounds
//                 1e-4 absolute for masses (each <= 1), 1e-4 relative for p
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "attention/cpu/attention_cpu.hpp"
#include "flashscope/trace.hpp"
#include "support/attention_problem.hpp"
#include "support/attention_reference.hpp"
#include "support/temp_path.hpp"
#include "util/math.hpp"

namespace fs = flashscope;
using fs::testing::AttentionProblem;
using fs::testing::AttentionShape;
using fs::testing::Operand;
using fs::testing::dense_shape;
using fs::testing::lse_index;
using fs::testing::near_rel;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// --- a trace with every field set to something recognisable ------------------

fs::Trace sample_trace() {
  fs::Trace t;
  fs::TraceMeta& m = t.meta;
  m.producer = std::string(fs::TraceMeta::kMaxProducerChars, 'p');  // full-length strings survive
  m.device_name = "NVIDIA H100 80GB HBM3";
  m.backend = "cuda";
  m.kernel = "v6";
  m.kind = fs::TraceKind::kDecode;
  m.dtype = fs::DType::kFP16;
  m.batch = 2;
  m.q_heads = 8;
  m.kv_heads = 2;
  m.q_len = 300;
  m.kv_len = 1000;
  m.head_dim = 128;
  m.causal = true;
  m.varlen = true;
  m.softmax_scale = 0.125f;
  m.block_q = 128;
  m.block_kv = 64;
  m.warps = 8;
  m.page_size = 16;
  m.num_splits = 3;
  m.timer_unit = fs::TimerUnit::kCycles;
  m.timer_ticks_per_us = 1980.0;
  m.sm_count = 132;
  m.sol_tflops = 989.4;
  m.sol_dram_gbps = 3352.3;
  m.elapsed_ms = 1.25;
  m.flops = 1.5e12;
  m.traced_batch = 1;
  m.traced_head = 7;
  t.ctas = {{100, 250, 131, 1, 7, 2, 2, 16}, {0, 0, 0, 0, 0, 0, 0, 0}};
  t.spans = {{105, 110, 0, 7, fs::SpanKind::kLoadWaitV, 15}, {240, 250, 1, 0, fs::SpanKind::kEpilogue, -1}};
  t.softmax = {{1, 7, 299, 15, 3.5f, 12.25f, 0.5f, 3.25f, 6.0f, 64}, {0, 0, 0, 0, -kInf, 0.0f, 1.0f, -kInf, 0.0f, 0}};
  t.tile_mass = {{1, 7, 2, 15, 0.25f, 0.125f, 44, fs::TileMassRecord::kMasked},
                 {1, 7, 0, 15, 0.0f, 0.0f, 128, fs::TileMassRecord::kSkipped}};
  t.prob_samples = {{1, 7, 299, 999, 0.03125f, 0}, {1, 7, 0, 999, 0.0f, fs::ProbSampleRecord::kMasked}};
  return t;
}

void check_same(const fs::Trace& a, const fs::Trace& b) {
  const fs::TraceMeta &x = a.meta, &y = b.meta;
  CHECK(x.producer == y.producer);
  CHECK(x.device_name == y.device_name);
  CHECK(x.backend == y.backend);
  CHECK(x.kernel == y.kernel);
  CHECK(x.kind == y.kind);
  CHECK(x.dtype == y.dtype);
  CHECK(std::tie(x.batch, x.q_heads, x.kv_heads, x.q_len, x.kv_len, x.head_dim, x.causal, x.varlen) ==
        std::tie(y.batch, y.q_heads, y.kv_heads, y.q_len, y.kv_len, y.head_dim, y.causal, y.varlen));
  CHECK(std::tie(x.block_q, x.block_kv, x.warps, x.page_size, x.num_splits, x.sm_count, x.traced_batch,
                 x.traced_head) == std::tie(y.block_q, y.block_kv, y.warps, y.page_size, y.num_splits, y.sm_count,
                                            y.traced_batch, y.traced_head));
  CHECK(same_float(x.softmax_scale, y.softmax_scale));
  CHECK(x.timer_unit == y.timer_unit);
  CHECK(std::tie(x.timer_ticks_per_us, x.sol_tflops, x.sol_dram_gbps, x.elapsed_ms, x.flops) ==
        std::tie(y.timer_ticks_per_us, y.sol_tflops, y.sol_dram_gbps, y.elapsed_ms, y.flops));

  REQUIRE(a.ctas.size() == b.ctas.size());
  for (size_t i = 0; i < a.ctas.size(); ++i) {
    const fs::CtaRecord &r = a.ctas[i], &s = b.ctas[i];
    CHECK(std::tie(r.start, r.end, r.sm, r.batch, r.head, r.q_tile, r.split, r.kv_tiles) ==
          std::tie(s.start, s.end, s.sm, s.batch, s.head, s.q_tile, s.split, s.kv_tiles));
  }
  REQUIRE(a.spans.size() == b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) {
    const fs::WarpSpanRecord &r = a.spans[i], &s = b.spans[i];
    CHECK(std::tie(r.start, r.end, r.cta, r.warp, r.kind, r.kv_tile) ==
          std::tie(s.start, s.end, s.cta, s.warp, s.kind, s.kv_tile));
  }
  REQUIRE(a.softmax.size() == b.softmax.size());
  for (size_t i = 0; i < a.softmax.size(); ++i) {
    const fs::SoftmaxStateRecord &r = a.softmax[i], &s = b.softmax[i];
    CHECK(std::tie(r.batch, r.head, r.row, r.kv_tile, r.keys) == std::tie(s.batch, s.head, s.row, s.kv_tile, s.keys));
    CHECK(same_float(r.m, s.m));
    CHECK(same_float(r.l, s.l));
    CHECK(same_float(r.rescale, s.rescale));
    CHECK(same_float(r.tile_max, s.tile_max));
    CHECK(same_float(r.tile_sum, s.tile_sum));
  }
  REQUIRE(a.tile_mass.size() == b.tile_mass.size());
  for (size_t i = 0; i < a.tile_mass.size(); ++i) {
    const fs::TileMassRecord &r = a.tile_mass[i], &s = b.tile_mass[i];
    CHECK(std::tie(r.batch, r.head, r.q_tile, r.kv_tile, r.rows, r.flags) ==
          std::tie(s.batch, s.head, s.q_tile, s.kv_tile, s.rows, s.flags));
    CHECK(same_float(r.mass, s.mass));
    CHECK(same_float(r.max_prob, s.max_prob));
  }
  REQUIRE(a.prob_samples.size() == b.prob_samples.size());
  for (size_t i = 0; i < a.prob_samples.size(); ++i) {
    const fs::ProbSampleRecord &r = a.prob_samples[i], &s = b.prob_samples[i];
    CHECK(std::tie(r.batch, r.head, r.row, r.key, r.flags) == std::tie(s.batch, s.head, s.row, s.key, s.flags));
    CHECK(same_float(r.prob, s.prob));
  }
}

std::vector<uint8_t> serialize(const fs::Trace& t) {
  auto bytes = fs::serialize_trace(t);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().message());
  return bytes.value();
}

// --- raw file surgery, written from docs/trace_format.md ---------------------

constexpr size_t kHeader = 32, kEntry = 32;

uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(b[at + i]) << (8 * i);
  return v;
}
uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(b[at + i]) << (8 * i);
  return v;
}
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i));
}
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = uint8_t(v >> (8 * i));
}

// Byte offset of the table entry of the section with `type`.
size_t entry_of(const std::vector<uint8_t>& b, uint32_t type) {
  const uint32_t n = get32(b, 12);
  for (uint32_t i = 0; i < n; ++i)
    if (get32(b, kHeader + i * kEntry) == type) return kHeader + i * kEntry;
  FAIL("no section of type " << type);
  return 0;
}

enum : uint32_t { kMeta = 1, kCta = 2, kSpan = 3, kSoftmax = 4, kTileMass = 5, kProbSample = 6 };

fs::Status parse_status(const std::vector<uint8_t>& b) { return fs::parse_trace(b.data(), b.size()).status(); }

void check_corrupt(const std::vector<uint8_t>& b, const std::string& expected) {
  const fs::Status s = parse_status(b);
  INFO("message: " << s.message());
  CHECK(s.code() == fs::StatusCode::kCorruptData);
  CHECK(s.message().find(expected) != std::string::npos);
}

bool file_exists(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f != nullptr) std::fclose(f);
  return f != nullptr;
}

std::string temp_path(const char* name) { return flashscope::testing::temp_path("test", std::string(name) + ".fstrace"); }

}  // namespace

// ---------------------------------------------------------------------------
// The file

TEST_CASE("trace: every record type survives serialize/parse and write/read") {
  const fs::Trace t = sample_trace();
  const std::vector<uint8_t> bytes = serialize(t);
  // The layout docs/trace_format.md gives: header, 6 table entries, meta, records.
  CHECK(bytes.size() == kHeader + 6 * kEntry + 256 + 2 * (40 + 32 + 40 + 32 + 24));
  CHECK(std::memcmp(bytes.data(), "FSTRACE\0", 8) == 0);
  CHECK(get32(bytes, 8) == fs::kTraceFormatVersion);
  CHECK(get64(bytes, 16) == bytes.size());

  auto parsed = fs::parse_trace(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().message());
  check_same(t, parsed.value());

  const std::string path = temp_path("roundtrip");
  REQUIRE(fs::write_trace(t, path).ok());
  auto read = fs::read_trace(path);
  REQUIRE_MESSAGE(read.ok(), read.status().message());
  check_same(t, read.value());
  std::remove(path.c_str());

  // An empty trace (metadata only) is a valid file too.
  fs::Trace empty;
  empty.meta.backend = "cpu";
  empty.meta.head_dim = 64;
  empty.meta.block_q = empty.meta.block_kv = 64;
  empty.meta.softmax_scale = 0.125f;
  const std::vector<uint8_t> empty_bytes = serialize(empty);
  auto e = fs::parse_trace(empty_bytes.data(), empty_bytes.size());
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  check_same(empty, e.value());
}

TEST_CASE("trace: corrupt files are rejected with kCorruptData naming the fault") {
  const std::vector<uint8_t> good = serialize(sample_trace());
  REQUIRE(parse_status(good).ok());

  SUBCASE("truncated anywhere") {
    const size_t table_end = kHeader + 6 * kEntry;
    for (size_t cut : {size_t{0}, size_t{7}, size_t{31}, kHeader + 5, table_end - 1, table_end + 100,
                       good.size() - 24, good.size() - 1}) {
      CAPTURE(cut);
      check_corrupt(std::vector<uint8_t>(good.begin(), good.begin() + long(cut)), "truncated");
    }
  }
  SUBCASE("trailing bytes") {
    std::vector<uint8_t> b = good;
    b.push_back(0);
    check_corrupt(b, "the header says the file is");
  }
  SUBCASE("bad magic") {
    std::vector<uint8_t> b = good;
    b[1] = 'X';
    check_corrupt(b, "bad magic");
  }
  SUBCASE("a newer or unknown version") {
    std::vector<uint8_t> b = good;
    put32(b, 8, fs::kTraceFormatVersion + 1);
    check_corrupt(b, "unknown format version 2");
    put32(b, 8, 0);
    check_corrupt(b, "unknown format version 0");
  }
  SUBCASE("a section count the table cannot hold") {
    std::vector<uint8_t> b = good;
    put32(b, 12, 1000);
    check_corrupt(b, "truncated section table");
  }
  SUBCASE("a count past the end of the file") {
    std::vector<uint8_t> b = good;
    const size_t e = entry_of(b, kProbSample);  // the last section
    put64(b, e + 8, get64(b, e + 8) + 1);
    check_corrupt(b, "lies outside the data area");
  }
  SUBCASE("a count that runs into the next section") {
    std::vector<uint8_t> b = good;
    const size_t e = entry_of(b, kCta);
    put64(b, e + 8, get64(b, e + 8) + 1);
    check_corrupt(b, "overlaps");
  }
  SUBCASE("a count that overflows") {
    std::vector<uint8_t> b = good;
    put64(b, entry_of(b, kCta) + 8, std::numeric_limits<uint64_t>::max() / 8);
    check_corrupt(b, "overflows");
  }
  SUBCASE("a known section with the wrong record size") {
    std::vector<uint8_t> b = good;
    put32(b, entry_of(b, kCta) + 4, 48);
    check_corrupt(b, "has 48-byte records, version 1 defines 40");
  }
  SUBCASE("a misaligned section") {
    std::vector<uint8_t> b = good;
    const size_t e = entry_of(b, kSoftmax);
    put64(b, e + 16, get64(b, e + 16) + 4);
    check_corrupt(b, "not 8-byte aligned");
  }
  SUBCASE("a section inside the header or table") {
    std::vector<uint8_t> b = good;
    put64(b, entry_of(b, kSpan) + 16, 8);
    check_corrupt(b, "lies outside the data area");
  }
  SUBCASE("a known section twice") {
    std::vector<uint8_t> b = good;
    put32(b, entry_of(b, kTileMass), kSpan);  // both 32-byte records
    check_corrupt(b, "appears twice");
  }
  SUBCASE("no meta section") {
    std::vector<uint8_t> b = good;
    put32(b, entry_of(b, kMeta), 99);
    check_corrupt(b, "no meta section");
  }
  SUBCASE("a string field without its terminator") {
    std::vector<uint8_t> b = good;
    const size_t meta = size_t(get64(b, entry_of(b, kMeta) + 16));
    std::fill(b.begin() + long(meta), b.begin() + long(meta) + 32, uint8_t('x'));
    check_corrupt(b, "meta.producer has no NUL terminator");
  }
  SUBCASE("a record pointing outside the trace") {
    std::vector<uint8_t> b = good;
    const size_t spans = size_t(get64(b, entry_of(b, kSpan) + 16));
    put32(b, spans + 16, 2);  // spans[0].cta: there are 2 CTA records
    check_corrupt(b, "spans[0].cta = 2 is out of range");
  }
  SUBCASE("an unknown span kind") {
    std::vector<uint8_t> b = good;
    const size_t spans = size_t(get64(b, entry_of(b, kSpan) + 16));
    put32(b, spans + 24, fs::kSpanKindCount);
    check_corrupt(b, "spans[0].kind = 8 is out of range");
  }
  SUBCASE("a softmax row past q_len") {
    std::vector<uint8_t> b = good;
    const size_t softmax = size_t(get64(b, entry_of(b, kSoftmax) + 16));
    put32(b, softmax + 8, 300);
    check_corrupt(b, "softmax[0].row = 300 is out of range (q_len = 300)");
  }
}

TEST_CASE("trace: a section of unknown type is skipped") {
  const fs::Trace t = sample_trace();
  const std::vector<uint8_t> good = serialize(t);
  // Rebuild the file with a new section (type 77, 3 records of 12 bytes)
  // first in the table: every offset moves by one table entry, its data goes
  // at the end, padded to 8 bytes.
  const uint32_t n = get32(good, 12);
  std::vector<uint8_t> b(good.begin(), good.begin() + kHeader);
  put32(b, 12, n + 1);
  std::vector<uint8_t> entry(kEntry, 0);
  put32(entry, 0, 77);
  put32(entry, 4, 12);
  put64(entry, 8, 3);
  const size_t data_at = good.size() + kEntry;
  put64(entry, 16, data_at);
  b.insert(b.end(), entry.begin(), entry.end());
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<uint8_t> e(good.begin() + long(kHeader + i * kEntry), good.begin() + long(kHeader + (i + 1) * kEntry));
    put64(e, 16, get64(e, 16) + kEntry);
    b.insert(b.end(), e.begin(), e.end());
  }
  b.insert(b.end(), good.begin() + long(kHeader + n * kEntry), good.end());
  REQUIRE(b.size() == data_at);
  b.insert(b.end(), 36, 0xAB);
  b.insert(b.end(), 4, 0);  // pad to a multiple of 8: nothing requires it after the last section
  put64(b, 16, b.size());

  auto parsed = fs::parse_trace(b.data(), b.size());
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().message());
  check_same(t, parsed.value());

  // Unknown sections are still bounds-checked.
  put64(b, kHeader + 8, 4);  // 4 records of 12 bytes: past the end
  check_corrupt(b, "section 0 (type 77)");
}

TEST_CASE("trace: writing checks the trace and IO errors are reported") {
  const std::string path = temp_path("invalid");
  std::remove(path.c_str());

  fs::Trace t = sample_trace();
  t.spans[0].cta = 5;
  fs::Status s = fs::write_trace(t, path);
  CHECK(s.code() == fs::StatusCode::kInvalidArgument);
  CHECK(s.message().find("spans[0].cta") != std::string::npos);
  CHECK(!file_exists(path));  // nothing written, not even the temporary
  CHECK(!file_exists(path + ".partial"));

  t = sample_trace();
  t.meta.device_name = std::string(64, 'd');
  s = fs::write_trace(t, path);
  CHECK(s.code() == fs::StatusCode::kInvalidArgument);
  CHECK(s.message().find("meta.device_name is 64 characters") != std::string::npos);

  t = sample_trace();
  t.ctas[0].end = t.ctas[0].start - 1;
  CHECK(fs::validate_trace(t).message().find("ctas[0] ends before it starts") != std::string::npos);

  CHECK(fs::read_trace("/nonexistent/dir/x.fstrace").status().code() == fs::StatusCode::kIoError);
  CHECK(fs::write_trace(sample_trace(), "/nonexistent/dir/x.fstrace").code() == fs::StatusCode::kIoError);
}

// ---------------------------------------------------------------------------
// The CPU capture

namespace {

constexpr int kTile = 64;  // the CPU backend's q and kv tiles

struct SeqView {
  int q_len, kv_len;
  bool causal = false;
  int left = -1, right = -1;  // the window
  int shift() const { return kv_len - q_len; }
  bool visible(int i, int j) const {
    const int pos = i + shift();
    return (!causal || j <= pos) && (left < 0 || j >= pos - left) && (right < 0 || j <= pos + right);
  }
};

// Independent double-precision logits and LSE of (b, h) from the fixture's inputs.
struct ExactHead {
  std::vector<double> s;    // [q_len, kv_len] scaled logits
  std::vector<double> lse;  // [q_len], -inf for rows that see no key
  double p(int i, int j, int kv_len) const { return std::exp(s[size_t(i) * kv_len + j] - lse[size_t(i)]); }
};

ExactHead exact_head(const AttentionProblem& prob, int b, int h, const SeqView& sv) {
  const AttentionShape& sh = prob.shape();
  const double scale = sh.softmax_scale != 0.0f ? sh.softmax_scale : 1.0 / std::sqrt(double(sh.head_dim));
  const int g = h / (sh.q_heads / sh.kv_heads);
  ExactHead e;
  e.s.assign(size_t(sv.q_len) * sv.kv_len, 0.0);
  e.lse.assign(size_t(sv.q_len), -INFINITY);
  for (int i = 0; i < sv.q_len; ++i) {
    double mx = -INFINITY;
    for (int j = 0; j < sv.kv_len; ++j) {
      double dot = 0;
      for (int d = 0; d < sh.head_dim; ++d)
        dot += double(prob.get(Operand::kQ, b, i, h, d)) * prob.get(Operand::kK, b, j, g, d);
      double x = scale * dot;
      if (sh.softcap > 0) x = sh.softcap * std::tanh(x / sh.softcap);
      e.s[size_t(i) * sv.kv_len + j] = x;
      if (sv.visible(i, j)) mx = std::max(mx, x);
    }
    if (mx == -INFINITY) continue;
    double sum = 0;
    for (int j = 0; j < sv.kv_len; ++j)
      if (sv.visible(i, j)) sum += std::exp(e.s[size_t(i) * sv.kv_len + j] - mx);
    e.lse[size_t(i)] = mx + std::log(sum);
  }
  return e;
}

void check_capture(const AttentionShape& shape, fs::TraceOptions opt) {
  INFO(shape.describe());
  AttentionProblem prob(shape);
  const int b = opt.batch, h = opt.head;
  const SeqView sv{prob.seq_q_len(b), prob.seq_kv_len(b), shape.causal, shape.window_left, shape.window_right};
  const int q_tiles = fs::ceil_div(sv.q_len, kTile), kv_tiles = fs::ceil_div(sv.kv_len, kTile);
  // The tiles a q-tile visits, [first, first + count): from the tile of the
  // first key any of its rows sees to that of the last one.
  auto tile_range = [&](int qt) {
    int lo = sv.kv_len, hi = -1;
    for (int i = qt * kTile; i < std::min(sv.q_len, (qt + 1) * kTile); ++i)
      for (int j = 0; j < sv.kv_len; ++j)
        if (sv.visible(i, j)) {
          lo = std::min(lo, j);
          hi = std::max(hi, j);
        }
    return hi < lo ? std::pair{0, 0} : std::pair{lo / kTile, hi / kTile - lo / kTile + 1};
  };
  auto visited = [&](int qt) { return tile_range(qt).second; };
  auto first_tile = [&](int qt) { return tile_range(qt).first; };

  fs::Trace t;
  const fs::Status st = fs::capture_cpu_prefill_trace(prob.host_params(), opt, &t);
  REQUIRE_MESSAGE(st.ok(), st.message());

  // The run itself: the reference's answer, and exactly the CPU backend's.
  CHECK(prob.guards_intact());
  const std::vector<float> out = prob.output_as_float(), lse = prob.lse_values();
  const fs::testing::Tolerance tol = prob.tolerance();
  CHECK(prob.normalized_error(out.data()) < tol.normalized);
  CHECK(prob.max_abs_error(out.data()) <= tol.max_abs);
  CHECK(prob.lse_max_abs_error(lse.data()) <= tol.lse_abs);
  prob.reset_outputs();
  REQUIRE(fs::cpu::attention_tiled(prob.host_params()).ok());
  const std::vector<float> tiled_out = prob.output_as_float(), tiled_lse = prob.lse_values();
  CHECK(std::memcmp(out.data(), tiled_out.data(), out.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(lse.data(), tiled_lse.data(), lse.size() * sizeof(float)) == 0);

  const fs::TraceMeta& m = t.meta;
  CHECK(m.backend == "cpu");
  CHECK(m.block_q == kTile);
  CHECK(m.block_kv == kTile);
  CHECK(m.traced_batch == b);
  CHECK(m.traced_head == h);
  CHECK(fs::validate_trace(t).ok());

  const ExactHead exact = exact_head(prob, b, h, sv);

  // Softmax states: the recurrence, the causal key counts, and the final state → lse.
  std::map<int, std::vector<const fs::SoftmaxStateRecord*>> by_row;
  for (const fs::SoftmaxStateRecord& r : t.softmax) {
    REQUIRE(r.batch == uint32_t(b));
    REQUIRE(r.head == uint32_t(h));
    by_row[int(r.row)].push_back(&r);
  }
  std::set<int> followed(opt.rows.begin(), opt.rows.end());
  size_t rows_with_tiles = 0;  // a row whose block visits no tile (sees no key) has no records
  for (int i : followed) rows_with_tiles += visited(i / kTile) > 0;
  CHECK(by_row.size() == rows_with_tiles);
  for (int i : followed) {
    CAPTURE(i);
    const auto& recs = by_row[i];
    REQUIRE(int(recs.size()) == visited(i / kTile));
    float m_old = -kInf, l_old = 0.0f;
    for (size_t n = 0; n < recs.size(); ++n) {
      const fs::SoftmaxStateRecord& r = *recs[n];
      const int kt = first_tile(i / kTile) + int(n);
      CAPTURE(kt);
      REQUIRE(r.kv_tile == uint32_t(kt));
      int keys = 0;
      for (int j = kt * kTile; j < std::min(sv.kv_len, (kt + 1) * kTile); ++j) keys += sv.visible(i, j);
      CHECK(r.keys == uint32_t(keys));
      if (keys == 0) {
        CHECK(r.rescale == 1.0f);
        CHECK(r.tile_max == -kInf);
        CHECK(r.tile_sum == 0.0f);
        CHECK(same_float(r.m, m_old));
        CHECK(same_float(r.l, l_old));
      } else {
        CHECK(r.m == std::max(m_old, r.tile_max));
        if (m_old == -kInf) {
          CHECK(r.rescale == 0.0f);
        } else {
          CHECK(near_rel(r.rescale, std::exp(double(m_old) - r.m), 1e-5));
        }
        CHECK(near_rel(r.l, double(r.rescale) * l_old + r.tile_sum, 1e-5));
        // tile_max is the largest visible logit of the tile.
        double tmax = -INFINITY;
        for (int j = kt * kTile; j < std::min(sv.kv_len, (kt + 1) * kTile); ++j)
          if (sv.visible(i, j)) tmax = std::max(tmax, exact.s[size_t(i) * sv.kv_len + j]);
        CHECK(std::fabs(r.tile_max - tmax) <= 1e-4 * (1 + std::fabs(tmax)));
      }
      m_old = r.m;
      l_old = r.l;
    }
    const float run_lse = lse[size_t(lse_index(prob, b, h, i))];
    if (exact.lse[size_t(i)] == -INFINITY) {
      CHECK(l_old == 0.0f);
      CHECK(run_lse == -kInf);
    } else {
      CHECK(m_old + std::log(l_old) == run_lse);  // the float ops of the epilogue
      CHECK(std::fabs(double(m_old) + std::log(double(l_old)) - exact.lse[size_t(i)]) <= tol.lse_abs);
    }
  }

  // Tile masses: the full grid, skipped tiles exactly past the diagonal,
  // masses as defined in trace.hpp, each q-tile summing to 1.
  if (opt.record_tile_mass) {
    REQUIRE(int(t.tile_mass.size()) == q_tiles * kv_tiles);
    for (int qt = 0; qt < q_tiles; ++qt) {
      const int i0 = qt * kTile, i1 = std::min(sv.q_len, i0 + kTile);
      int seeing = 0;
      for (int i = i0; i < i1; ++i) seeing += exact.lse[size_t(i)] != -INFINITY;
      double total = 0;
      for (int kt = 0; kt < kv_tiles; ++kt) {
        const fs::TileMassRecord& r = t.tile_mass[size_t(qt * kv_tiles + kt)];
        CAPTURE(qt);
        CAPTURE(kt);
        REQUIRE(r.q_tile == uint32_t(qt));
        REQUIRE(r.kv_tile == uint32_t(kt));
        CHECK(r.rows == uint32_t(seeing));
        const int j0 = kt * kTile, j1 = std::min(sv.kv_len, j0 + kTile);
        // Skipped: no (row, key) pair of the block is visible. Masked: some are not.
        bool any_visible = false, any_masked = false;
        double mass = 0, max_p = 0;
        for (int i = i0; i < i1; ++i) {
          for (int j = j0; j < j1; ++j) {
            const bool vis = sv.visible(i, j);
            any_visible |= vis;
            any_masked |= !vis;
            if (vis) {
              mass += exact.p(i, j, sv.kv_len);
              max_p = std::max(max_p, exact.p(i, j, sv.kv_len));
            }
          }
        }
        CHECK(bool(r.flags & fs::TileMassRecord::kSkipped) == !any_visible);
        CHECK(bool(r.flags & fs::TileMassRecord::kSkipped) ==
              (kt < first_tile(qt) || kt >= first_tile(qt) + visited(qt)));
        if (any_visible) CHECK(bool(r.flags & fs::TileMassRecord::kMasked) == any_masked);
        const double want = seeing > 0 ? mass / seeing : 0.0;
        CHECK(std::fabs(r.mass - want) <= 1e-4);
        CHECK(near_rel(r.max_prob, max_p, 1e-4, 1e-7));
        total += r.mass;
      }
      if (seeing > 0) CHECK(std::fabs(total - 1.0) <= 1e-5);
    }
  }

  // Probability samples: every (row, key) of each sampled block, final p_ij.
  size_t expected = 0;
  for (const fs::TileCoord& tc : opt.sample_tiles)
    expected += size_t(std::min(sv.q_len, (tc.q_tile + 1) * kTile) - tc.q_tile * kTile) *
                size_t(std::min(sv.kv_len, (tc.kv_tile + 1) * kTile) - tc.kv_tile * kTile);
  CHECK(t.prob_samples.size() == expected);
  for (const fs::ProbSampleRecord& r : t.prob_samples) {
    const int i = int(r.row), j = int(r.key);
    const bool vis = sv.visible(i, j) && exact.lse[size_t(i)] != -INFINITY;
    CAPTURE(i);
    CAPTURE(j);
    CHECK(bool(r.flags & fs::ProbSampleRecord::kMasked) == !vis);
    CHECK(near_rel(r.prob, vis ? exact.p(i, j, sv.kv_len) : 0.0, 1e-4, 1e-9));
  }

  // CTAs: one per (sequence, head, q-tile), on a real thread, with its tile count.
  if (opt.record_ctas) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;
    size_t items = 0;
    for (int sb = 0; sb < shape.batch; ++sb) items += size_t(fs::ceil_div(prob.seq_q_len(sb), kTile)) * shape.q_heads;
    REQUIRE(t.ctas.size() == items);
    for (const fs::CtaRecord& c : t.ctas) {
      CHECK(seen.insert({c.batch, c.head, c.q_tile}).second);
      CHECK(c.start <= c.end);
      CHECK(c.sm < uint32_t(threads));
      if (int(c.batch) == b) CHECK(c.kv_tiles == uint32_t(visited(int(c.q_tile))));
    }
  }
  // Spans: the traced head's work items, five phases per tile then the epilogue, in time order.
  if (opt.record_spans) {
    std::map<uint32_t, std::vector<const fs::WarpSpanRecord*>> by_cta;
    for (const fs::WarpSpanRecord& s : t.spans) by_cta[s.cta].push_back(&s);
    CHECK(int(by_cta.size()) == q_tiles);
    const fs::SpanKind order[] = {fs::SpanKind::kLoadIssueK, fs::SpanKind::kLoadIssueV, fs::SpanKind::kQK,
                                  fs::SpanKind::kSoftmax, fs::SpanKind::kPV};
    for (const auto& [cta, spans] : by_cta) {
      const fs::CtaRecord& c = t.ctas[cta];
      CHECK(c.batch == uint32_t(b));
      CHECK(c.head == uint32_t(h));
      REQUIRE(spans.size() == 5 * c.kv_tiles + 1);
      uint64_t last = c.start;
      for (size_t n = 0; n < spans.size(); ++n) {
        const fs::WarpSpanRecord& s = *spans[n];
        const bool epilogue = n + 1 == spans.size();
        CHECK(s.kind == (epilogue ? fs::SpanKind::kEpilogue : order[n % 5]));
        CHECK(s.kv_tile == (epilogue ? -1 : first_tile(int(c.q_tile)) + int(n / 5)));
        CHECK(s.warp == 0);
        CHECK(s.start >= last);
        CHECK(s.end >= s.start);
        last = s.end;
      }
      CHECK(last <= c.end);
    }
  }

  // The capture is a valid file.
  const std::vector<uint8_t> bytes = serialize(t);
  auto parsed = fs::parse_trace(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().message());
  check_same(t, parsed.value());
}

std::vector<int32_t> all_rows(int n) {
  std::vector<int32_t> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[size_t(i)] = i;
  return r;
}

}  // namespace

TEST_CASE("trace: CPU capture, full attention, every row followed") {
  AttentionShape s = dense_shape(1, 2, 1, 150, 200, 64, false);
  s.seed = 31;
  fs::TraceOptions opt;
  opt.head = 1;
  opt.rows = all_rows(150);
  opt.sample_tiles = {{0, 0}, {2, 3}};  // a full block and the ragged corner
  check_capture(s, opt);
}

TEST_CASE("trace: CPU capture, causal chunked prefill (kv_len > q_len), fp16, GQA") {
  AttentionShape s = dense_shape(2, 4, 2, 130, 300, 128, true);
  s.dtype = fs::DType::kFP16;
  s.layout = fs::testing::Layout::kPaddedBSHD;
  s.seed = 32;
  fs::TraceOptions opt;
  opt.batch = 1;
  opt.head = 3;
  opt.rows = all_rows(130);
  opt.sample_tiles = {{0, 3}, {1, 4}, {0, 4}};  // diagonal blocks and a skipped one
  check_capture(s, opt);
}

TEST_CASE("trace: CPU capture, causal with q_len > kv_len (rows that see nothing)") {
  AttentionShape s = dense_shape(1, 1, 1, 200, 90, 64, true);
  s.seed = 33;
  fs::TraceOptions opt;
  opt.rows = {0, 109, 110, 111, 150, 199};
  opt.sample_tiles = {{1, 0}, {1, 1}};
  check_capture(s, opt);
}

TEST_CASE("trace: CPU capture, a causal sliding window skips tiles on both sides") {
  // Window 100 over 400 keys: q-tile 5 (rows 320..383) sees keys 220..383,
  // tiles 3..5; tiles 0..2 and 6 are skipped.
  AttentionShape s = dense_shape(1, 4, 1, 400, 400, 96, true);
  s.window_left = 100;
  s.softcap = 20.0f;
  s.seed = 35;
  fs::TraceOptions opt;
  opt.head = 2;
  opt.rows = {0, 63, 64, 200, 333, 399};
  opt.sample_tiles = {{5, 3}, {5, 1}, {2, 2}};  // the window's left edge, a skipped block, the diagonal
  check_capture(s, opt);
}

TEST_CASE("trace: CPU capture, a two-sided window, non-causal, q_len > kv_len") {
  AttentionShape s = dense_shape(1, 2, 2, 260, 150, 256, false);
  s.window_left = 40;
  s.window_right = 70;
  s.seed = 36;
  fs::TraceOptions opt;
  opt.head = 1;
  opt.rows = all_rows(260);
  opt.sample_tiles = {{0, 0}, {3, 1}, {4, 2}};
  check_capture(s, opt);
}

TEST_CASE("trace: CPU capture, varlen and a custom scale") {
  AttentionShape s = dense_shape(2, 3, 3, 0, 0, 64, true);
  s.varlen = true;
  s.q_lens = {70, 129};
  s.kv_lens = {100, 129};
  s.softmax_scale = 0.3f;
  s.layout = fs::testing::Layout::kBHSD;
  s.seed = 34;
  fs::TraceOptions opt;
  opt.batch = 1;
  opt.head = 2;
  opt.rows = {128, 0, 64, 64};  // unsorted, with a duplicate
  opt.sample_tiles = {{2, 2}};
  check_capture(s, opt);

  fs::TraceOptions minimal;  // no CTAs, spans or masses: only what is asked for
  minimal.record_ctas = minimal.record_spans = minimal.record_tile_mass = false;
  minimal.rows = {5};
  check_capture(s, minimal);
}

TEST_CASE("trace: CPU capture rejects what it cannot trace") {
  AttentionProblem prob(dense_shape(1, 2, 2, 70, 70, 64, true));
  fs::PrefillParams p = prob.host_params();
  fs::Trace t;
  fs::TraceOptions opt;
  auto code = [&](const fs::TraceOptions& o) { return fs::capture_cpu_prefill_trace(p, o, &t); };

  CHECK(fs::capture_cpu_prefill_trace(p, opt, nullptr).code() == fs::StatusCode::kInvalidArgument);
  opt.head = 2;
  CHECK(code(opt).message().find("TraceOptions.head = 2") != std::string::npos);
  opt = {};
  opt.rows = {70};
  CHECK(code(opt).message().find("row 70 is out of range") != std::string::npos);
  opt = {};
  opt.sample_tiles = {{0, 2}};
  CHECK(code(opt).message().find("tile (0, 2) is outside") != std::string::npos);
  opt = {};
  opt.record_ctas = false;
  CHECK(code(opt).code() == fs::StatusCode::kInvalidArgument);
  opt = {};
  p.device = fs::Device::kCuda;
  CHECK(code(opt).code() == fs::StatusCode::kInvalidArgument);
  p = prob.host_params();
  p.head_dim = 48;
  CHECK(code(opt).code() == fs::StatusCode::kUnsupported);  // validate()'s verdict
  CHECK(t.ctas.empty());  // failures leave *out alone

  // q_len = 0: a trace with nothing in it, and nothing touched.
  p = prob.host_params();
  p.q_len = 0;
  REQUIRE(fs::capture_cpu_prefill_trace(p, opt, &t).ok());
  CHECK(t.ctas.empty());
  CHECK(t.tile_mass.empty());
  CHECK(t.meta.q_len == 0);
}
