// The trace file: serialize / parse / write / read. docs/trace_format.md is
// the specification; the field order of every encode_* / decode_* pair here
// is its byte layout, one field after another, little-endian, no padding
// beyond the reserved fields the document lists.
//
// Bytes are assembled with shifts, never by copying structs, so the file is
// the same on any host and no compiler padding reaches it. The reader checks
// the header, then the section table as a whole (bounds, alignment, overlap,
// known record sizes), and only then touches record bytes; the decoded trace
// goes through validate_trace() so every index the app will follow is in range.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "flashscope/trace_file.hpp"
#include "flashscope/untrusted.hpp"

namespace flashscope {
namespace {

constexpr char kMagic[8] = {'F', 'S', 'T', 'R', 'A', 'C', 'E', '\0'};
constexpr size_t kHeaderBytes = 32;
constexpr size_t kEntryBytes = 32;  // one section-table entry
constexpr size_t kAlign = 8;        // section data starts on 8-byte boundaries

enum SectionType : uint32_t {
  kSectionMeta = 1,
  kSectionCta = 2,
  kSectionSpan = 3,
  kSectionSoftmax = 4,
  kSectionTileMass = 5,
  kSectionProbSample = 6,
  kSectionTokens = 7,  // variable length: 8-byte words (encode_tokens)
};

struct SectionSpec {
  uint32_t type;
  const char* name;
  uint32_t record_bytes;
};
constexpr SectionSpec kSpecs[] = {
    {kSectionMeta, "meta", 256},        {kSectionCta, "cta", 40},
    {kSectionSpan, "warp_span", 32},    {kSectionSoftmax, "softmax_state", 40},
    {kSectionTileMass, "tile_mass", 32}, {kSectionProbSample, "prob_sample", 24},
    {kSectionTokens, "tokens", 8},
};
constexpr size_t kKnownSections = sizeof kSpecs / sizeof kSpecs[0];

const SectionSpec* find_spec(uint32_t type) {
  for (const SectionSpec& s : kSpecs)
    if (s.type == type) return &s;
  return nullptr;
}

constexpr uint32_t kMetaCausal = 1, kMetaVarlen = 2;

// --- little-endian encoding ---------------------------------------------------

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u32(bits);
  }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), p, p + n);
  }
  void zeros(size_t n) { out_->insert(out_->end(), n, 0); }
  size_t size() const { return out_->size(); }
  // NUL-padded field of `field` bytes; the caller checked the length.
  void str(const std::string& s, size_t field) {
    bytes(s.data(), s.size());
    zeros(field - s.size());
  }

 private:
  std::vector<uint8_t>* out_;
};

// Reads fields in order from a record whose size the caller has checked.
class Cursor {
 public:
  explicit Cursor(const uint8_t* p) : p_(p) {}
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p_[i]) << (8 * i);
    p_ += 4;
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += 8;
    return v;
  }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  float f32() {
    const uint32_t bits = u32();
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  double f64() {
    const uint64_t bits = u64();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  void skip(size_t n) { p_ += n; }
  void copy(char* out, size_t n) {
    if (n > 0) std::memcpy(out, p_, n);
    p_ += n;
  }
  // A NUL-padded field: false when it has no terminator.
  bool str(size_t field, std::string* out) {
    const void* nul = std::memchr(p_, 0, field);
    if (nul == nullptr) return false;
    out->assign(reinterpret_cast<const char*>(p_), static_cast<const uint8_t*>(nul) - p_);
    p_ += field;
    return true;
  }

 private:
  const uint8_t* p_;
};

// --- records --------------------------------------------------------------------

void encode(Writer& w, const TraceMeta& m) {
  w.str(m.producer, 32);
  w.str(m.device_name, 64);
  w.str(m.backend, 8);
  w.str(m.kernel, 24);
  w.u32(static_cast<uint32_t>(m.kind));
  w.u32(static_cast<uint32_t>(m.dtype));
  w.u32((m.causal ? kMetaCausal : 0) | (m.varlen ? kMetaVarlen : 0));
  for (int32_t v : {m.batch, m.q_heads, m.kv_heads, m.q_len, m.kv_len, m.head_dim, m.block_q, m.block_kv, m.warps,
                    m.page_size, m.num_splits})
    w.i32(v);
  w.f32(m.softmax_scale);
  w.u32(static_cast<uint32_t>(m.timer_unit));
  w.f64(m.timer_ticks_per_us);
  w.i32(m.sm_count);
  w.i32(m.traced_batch);
  w.i32(m.traced_head);
  w.zeros(4);
  w.f64(m.sol_tflops);
  w.f64(m.sol_dram_gbps);
  w.f64(m.elapsed_ms);
  w.f64(m.flops);
  w.u64(m.dropped_spans);
}

// Field values are range-checked afterwards by validate_trace; here only the
// strings' terminators and the flag bits can be wrong.
Status decode(Cursor c, TraceMeta* m) {
  if (!c.str(32, &m->producer)) return {StatusCode::kCorruptData, "meta.producer has no NUL terminator"};
  if (!c.str(64, &m->device_name)) return {StatusCode::kCorruptData, "meta.device_name has no NUL terminator"};
  if (!c.str(8, &m->backend)) return {StatusCode::kCorruptData, "meta.backend has no NUL terminator"};
  if (!c.str(24, &m->kernel)) return {StatusCode::kCorruptData, "meta.kernel has no NUL terminator"};
  m->kind = static_cast<TraceKind>(c.u32());
  m->dtype = static_cast<DType>(c.u32());
  const uint32_t flags = c.u32();
  if (flags & ~(kMetaCausal | kMetaVarlen))
    return {StatusCode::kCorruptData, "meta.flags = " + std::to_string(flags) + " has unknown bits"};
  m->causal = (flags & kMetaCausal) != 0;
  m->varlen = (flags & kMetaVarlen) != 0;
  for (int32_t* v : {&m->batch, &m->q_heads, &m->kv_heads, &m->q_len, &m->kv_len, &m->head_dim, &m->block_q,
                     &m->block_kv, &m->warps, &m->page_size, &m->num_splits})
    *v = c.i32();
  m->softmax_scale = c.f32();
  m->timer_unit = static_cast<TimerUnit>(c.u32());
  m->timer_ticks_per_us = c.f64();
  m->sm_count = c.i32();
  m->traced_batch = c.i32();
  m->traced_head = c.i32();
  c.skip(4);
  m->sol_tflops = c.f64();
  m->sol_dram_gbps = c.f64();
  m->elapsed_ms = c.f64();
  m->flops = c.f64();
  m->dropped_spans = c.u64();
  return {};
}

void encode(Writer& w, const CtaRecord& r) {
  w.u64(r.start);
  w.u64(r.end);
  for (uint32_t v : {r.sm, r.batch, r.head, r.q_tile, r.split, r.kv_tiles}) w.u32(v);
}
void decode(Cursor c, CtaRecord* r) {
  r->start = c.u64();
  r->end = c.u64();
  for (uint32_t* v : {&r->sm, &r->batch, &r->head, &r->q_tile, &r->split, &r->kv_tiles}) *v = c.u32();
}

void encode(Writer& w, const WarpSpanRecord& r) {
  w.u64(r.start);
  w.u64(r.end);
  w.u32(r.cta);
  w.u32(r.warp);
  w.u32(static_cast<uint32_t>(r.kind));
  w.i32(r.kv_tile);
}
void decode(Cursor c, WarpSpanRecord* r) {
  r->start = c.u64();
  r->end = c.u64();
  r->cta = c.u32();
  r->warp = c.u32();
  r->kind = static_cast<SpanKind>(c.u32());
  r->kv_tile = c.i32();
}

void encode(Writer& w, const SoftmaxStateRecord& r) {
  for (uint32_t v : {r.batch, r.head, r.row, r.kv_tile}) w.u32(v);
  for (float v : {r.m, r.l, r.rescale, r.tile_max, r.tile_sum}) w.f32(v);
  w.u32(r.keys);
}
void decode(Cursor c, SoftmaxStateRecord* r) {
  for (uint32_t* v : {&r->batch, &r->head, &r->row, &r->kv_tile}) *v = c.u32();
  for (float* v : {&r->m, &r->l, &r->rescale, &r->tile_max, &r->tile_sum}) *v = c.f32();
  r->keys = c.u32();
}

void encode(Writer& w, const TileMassRecord& r) {
  for (uint32_t v : {r.batch, r.head, r.q_tile, r.kv_tile}) w.u32(v);
  w.f32(r.mass);
  w.f32(r.max_prob);
  w.u32(r.rows);
  w.u32(r.flags);
}
void decode(Cursor c, TileMassRecord* r) {
  for (uint32_t* v : {&r->batch, &r->head, &r->q_tile, &r->kv_tile}) *v = c.u32();
  r->mass = c.f32();
  r->max_prob = c.f32();
  r->rows = c.u32();
  r->flags = c.u32();
}

void encode(Writer& w, const ProbSampleRecord& r) {
  for (uint32_t v : {r.batch, r.head, r.row, r.key}) w.u32(v);
  w.f32(r.prob);
  w.u32(r.flags);
}
void decode(Cursor c, ProbSampleRecord* r) {
  for (uint32_t* v : {&r->batch, &r->head, &r->row, &r->key}) *v = c.u32();
  r->prob = c.f32();
  r->flags = c.u32();
}

// The tokens section (docs/trace_format.md#tokens): its own version, the
// counts, (id, text length) per key, the key of each row, the texts back to
// back, zero-padded to whole 8-byte words.
constexpr uint32_t kTokensVersion = 1;
constexpr size_t kTokensHeaderBytes = 16;

uint64_t tokens_words(const TraceTokens& t) {
  uint64_t bytes = kTokensHeaderBytes + 8 * uint64_t{t.keys.size()} + 4 * uint64_t{t.row_keys.size()};
  for (const TraceToken& k : t.keys) bytes += k.text.size();
  return (bytes + 7) / 8;
}

void encode_tokens(Writer& w, const TraceTokens& t) {
  const size_t start = w.size();
  w.u32(kTokensVersion);
  w.u32(static_cast<uint32_t>(t.keys.size()));
  w.u32(static_cast<uint32_t>(t.row_keys.size()));
  w.i32(t.layer);
  for (const TraceToken& k : t.keys) {
    w.i32(k.id);
    w.u32(static_cast<uint32_t>(k.text.size()));
  }
  for (uint32_t r : t.row_keys) w.u32(r);
  for (const TraceToken& k : t.keys) w.bytes(k.text.data(), k.text.size());
  w.zeros(static_cast<size_t>(tokens_words(t) * 8 - (w.size() - start)));
}

// A section of a newer tokens version is skipped (the trace opens without
// labels), as a section of an unknown type is; one of this version must be
// whole and consistent.
Status decode_tokens(const uint8_t* data, uint64_t bytes, TraceTokens* out) {
  if (bytes < kTokensHeaderBytes) return {StatusCode::kCorruptData, "trace: the tokens section is shorter than its header"};
  Cursor c(data);
  if (c.u32() != kTokensVersion) return {};
  const uint64_t keys = c.u32(), rows = c.u32();
  const int32_t layer = c.i32();
  uint64_t need = kTokensHeaderBytes + 8 * keys + 4 * rows;
  if (need > bytes)
    return {StatusCode::kCorruptData, "trace: the tokens section's " + std::to_string(keys) + " keys and " +
                                          std::to_string(rows) + " rows do not fit its " + std::to_string(bytes) +
                                          " bytes"};
  TraceTokens t;
  t.layer = layer;
  t.keys.resize(static_cast<size_t>(keys));
  for (TraceToken& k : t.keys) {
    k.id = c.i32();
    const uint32_t len = c.u32();
    if (len > TraceToken::kMaxTextBytes)
      return {StatusCode::kCorruptData, "trace: a token's text is " + std::to_string(len) + " bytes, at most " +
                                            std::to_string(TraceToken::kMaxTextBytes) + " are allowed"};
    k.text.resize(len);
    need += len;
  }
  if (need > bytes)
    return {StatusCode::kCorruptData, "trace: the tokens section's texts (" + std::to_string(need) +
                                          " bytes in all) overrun its " + std::to_string(bytes) + " bytes"};
  t.row_keys.resize(static_cast<size_t>(rows));
  for (uint32_t& r : t.row_keys) r = c.u32();
  for (TraceToken& k : t.keys) {
    c.copy(k.text.data(), k.text.size());
  }
  *out = std::move(t);
  return {};
}

template <typename T>
void encode_all(Writer& w, const std::vector<T>& records) {
  for (const T& r : records) encode(w, r);
}

template <typename T>
void decode_all(const uint8_t* data, uint64_t count, uint32_t record_bytes, std::vector<T>* out) {
  out->resize(static_cast<size_t>(count));
  for (size_t i = 0; i < out->size(); ++i) decode(Cursor(data + i * record_bytes), &(*out)[i]);
}

Status corrupt(std::string m) { return {StatusCode::kCorruptData, "trace: " + std::move(m)}; }

struct Entry {
  uint32_t type = 0, record_bytes = 0;
  uint64_t count = 0, offset = 0, bytes = 0;
  size_t index = 0;  // position in the table, for messages
};

std::string section_label(const Entry& e) {
  const SectionSpec* spec = find_spec(e.type);
  return "section " + std::to_string(e.index) + " (" + (spec ? spec->name : "type " + std::to_string(e.type)) + ")";
}

Result<Trace> parse_unchecked(const uint8_t* data, size_t size) {
  if (data == nullptr && size > 0) return invalid_argument("parse_trace: data is null");
  if (size < kHeaderBytes)
    return corrupt("truncated: " + std::to_string(size) + " bytes, the header alone is " +
                   std::to_string(kHeaderBytes));
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0) return corrupt("bad magic (not a FlashScope trace file)");
  Cursor head(data + sizeof kMagic);
  const uint32_t version = head.u32();
  if (version != kTraceFormatVersion)
    return corrupt("unknown format version " + std::to_string(version) + " (this reader knows version " +
                   std::to_string(kTraceFormatVersion) + ")");
  const uint32_t section_count = head.u32();
  const uint64_t file_bytes = head.u64();
  if (file_bytes != size)
    return corrupt("the header says the file is " + std::to_string(file_bytes) + " bytes, it is " +
                   std::to_string(size) + (size < file_bytes ? " (truncated)" : ""));
  const uint64_t table_end = kHeaderBytes + uint64_t{section_count} * kEntryBytes;
  if (table_end > size)
    return corrupt("truncated section table: " + std::to_string(section_count) + " entries need " +
                   std::to_string(table_end) + " bytes, the file has " + std::to_string(size));

  std::vector<Entry> entries(section_count);
  const Entry* known[kKnownSections + 1] = {};  // by type; types are 1..kKnownSections
  for (uint32_t i = 0; i < section_count; ++i) {
    Cursor c(data + kHeaderBytes + size_t{i} * kEntryBytes);
    Entry& e = entries[i];
    e.index = i;
    e.type = c.u32();
    e.record_bytes = c.u32();
    e.count = c.u64();
    e.offset = c.u64();
    if (e.record_bytes == 0) return corrupt(section_label(e) + " has 0-byte records");
    if (e.count > (std::numeric_limits<uint64_t>::max() / e.record_bytes))
      return corrupt(section_label(e) + ": count " + std::to_string(e.count) + " overflows");
    e.bytes = e.count * e.record_bytes;
    if (e.offset % kAlign != 0)
      return corrupt(section_label(e) + " starts at offset " + std::to_string(e.offset) + ", not 8-byte aligned");
    if (e.offset < table_end || e.offset > size || e.bytes > size - e.offset)
      return corrupt(section_label(e) + " (" + std::to_string(e.count) + " records of " +
                     std::to_string(e.record_bytes) + " bytes at offset " + std::to_string(e.offset) +
                     ") lies outside the data area [" + std::to_string(table_end) + ", " + std::to_string(size) +
                     ")");
    if (const SectionSpec* spec = find_spec(e.type)) {
      if (e.record_bytes != spec->record_bytes)
        return corrupt(section_label(e) + " has " + std::to_string(e.record_bytes) + "-byte records, version " +
                       std::to_string(kTraceFormatVersion) + " defines " + std::to_string(spec->record_bytes));
      if (known[e.type] != nullptr) return corrupt(section_label(e) + " appears twice");
      known[e.type] = &e;
    }
  }
  // No two sections may share bytes (empty ones take none).
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries)
    if (e.bytes > 0) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      return corrupt(section_label(*by_offset[i - 1]) + " overlaps " + section_label(*by_offset[i]));
  }

  const Entry* meta = known[kSectionMeta];
  if (meta == nullptr) return corrupt("no meta section");
  if (meta->count != 1) return corrupt("the meta section holds " + std::to_string(meta->count) + " records, not 1");

  Trace t;
  FLASHSCOPE_RETURN_IF_ERROR(decode(Cursor(data + meta->offset), &t.meta));
  auto load = [&](uint32_t type, auto* out) {
    if (const Entry* e = known[type]) decode_all(data + e->offset, e->count, e->record_bytes, out);
  };
  load(kSectionCta, &t.ctas);
  load(kSectionSpan, &t.spans);
  load(kSectionSoftmax, &t.softmax);
  load(kSectionTileMass, &t.tile_mass);
  load(kSectionProbSample, &t.prob_samples);
  if (const Entry* e = known[kSectionTokens])
    FLASHSCOPE_RETURN_IF_ERROR(decode_tokens(data + e->offset, e->bytes, &t.tokens));
  return t;
}

}  // namespace

Result<std::vector<uint8_t>> serialize_trace(const Trace& t) {
  FLASHSCOPE_RETURN_IF_ERROR(validate_trace(t));
  // A trace without tokens is written without their section: the same bytes
  // as before the section existed.
  const size_t sections = t.tokens.empty() ? kKnownSections - 1 : kKnownSections;
  const uint64_t counts[kKnownSections] = {1, t.ctas.size(), t.spans.size(), t.softmax.size(), t.tile_mass.size(),
                                           t.prob_samples.size(), tokens_words(t.tokens)};
  std::vector<uint8_t> out;
  try {
    uint64_t offsets[kKnownSections];
    uint64_t at = kHeaderBytes + sections * kEntryBytes;
    for (size_t i = 0; i < sections; ++i) {
      offsets[i] = at;
      at += counts[i] * kSpecs[i].record_bytes;  // record sizes are multiples of 8: alignment holds
    }
    out.reserve(static_cast<size_t>(at));
    Writer w(&out);
    w.bytes(kMagic, sizeof kMagic);
    w.u32(kTraceFormatVersion);
    w.u32(static_cast<uint32_t>(sections));
    w.u64(at);
    w.zeros(8);
    for (size_t i = 0; i < sections; ++i) {
      w.u32(kSpecs[i].type);
      w.u32(kSpecs[i].record_bytes);
      w.u64(counts[i]);
      w.u64(offsets[i]);
      w.zeros(8);
    }
    encode(w, t.meta);
    encode_all(w, t.ctas);
    encode_all(w, t.spans);
    encode_all(w, t.softmax);
    encode_all(w, t.tile_mass);
    encode_all(w, t.prob_samples);
    if (!t.tokens.empty()) encode_tokens(w, t.tokens);
  } catch (const std::bad_alloc&) {
    return Status{StatusCode::kOutOfMemory, "serialize_trace: cannot allocate the file image"};
  }
  return out;
}

Result<Trace> parse_trace(const uint8_t* data, size_t size) {
  Result<Trace> r = Status{};
  try {
    r = parse_unchecked(data, size);
  } catch (const std::bad_alloc&) {
    return Status{StatusCode::kOutOfMemory, "parse_trace: cannot allocate the records"};
  }
  if (!r.ok()) return r;
  if (Status s = validate_trace(r.value()); !s.ok()) return corrupt(s.message());
  return r;
}

Status write_trace(const Trace& t, const std::string& path) {
  auto image = serialize_trace(t);
  if (!image.ok()) return image.status();
  // Written beside the target and renamed over it: a reader never sees half a file.
  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return {StatusCode::kIoError, "cannot create " + tmp};
  const size_t n = image->size();
  const bool written = std::fwrite(image->data(), 1, n, f) == n;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    return {StatusCode::kIoError, "cannot write " + tmp};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return {StatusCode::kIoError, "cannot rename " + tmp + " to " + path};
  }
  return {};
}

Result<Trace> read_trace(const std::string& path) {
  // Before fopen: a FIFO would block it, and a directory "opens" and then
  // reports a size of LONG_MAX.
  if (Status s = check_regular_file(path); !s.ok()) return s;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status{StatusCode::kIoError, "cannot open " + path};
  std::vector<uint8_t> bytes;
  bool ok = std::fseek(f, 0, SEEK_END) == 0;
  const long size = ok ? std::ftell(f) : -1;
  ok = ok && size >= 0 && std::fseek(f, 0, SEEK_SET) == 0;
  if (ok) {
    try {
      bytes.resize(static_cast<size_t>(size));
    } catch (const std::bad_alloc&) {
      std::fclose(f);
      return Status{StatusCode::kOutOfMemory, "cannot allocate " + std::to_string(size) + " bytes for " + path};
    }
    ok = std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size();
  }
  std::fclose(f);
  if (!ok) return Status{StatusCode::kIoError, "cannot read " + path};
  auto t = parse_trace(bytes.data(), bytes.size());
  if (!t.ok()) return Status{t.status().code(), path + ": " + t.status().message()};
  return t;
}

}  // namespace flashscope
