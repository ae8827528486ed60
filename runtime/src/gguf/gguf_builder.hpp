// GgufBuilder: writes GGUF files in memory, for the synthetic models
// (model/synthetic_model.hpp: `flashscope-cli make-model`, the tests) and
// the GGUF tests. It writes whatever it is told, including the broken things
// the corruption tests need (raw type ids, wrong n_dims, misaligned offsets,
// data that does not match the shape), and reports where each part landed
// so a test can patch single fields afterwards. Header-only: the tests use
// it directly (tests/support/gguf_builder.hpp).
//
// File layout written (little-endian, as the GGUF spec):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count
//   kv pairs:     string key, u32 value type, value
//   tensor infos: string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
//   zero padding to the alignment, then the data section; each tensor's data
//   at its offset (by default the next multiple of the alignment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/gguf.hpp"
#include "kernels/common/math.h"

namespace flashscope::model {

class GgufBuilder {
 public:
  using Bytes = std::vector<uint8_t>;

  struct Tensor {
    std::string name;
    uint32_t type = 0;                   // raw ggml type id, so unknown ids can be written
    std::vector<uint64_t> ne;            // ne[0] innermost; n_dims = ne.size()
    Bytes data;                          // written as is, whatever the shape says
    std::optional<uint64_t> offset;      // default: next aligned offset in the data section
    std::optional<uint32_t> n_dims;      // written instead of ne.size() (dims written: ne)
  };

  // Where the last build() put things, in bytes from the start of the file.
  struct Layout {
    std::vector<size_t> kv_offsets;           // start of each kv pair (its key length)
    std::vector<size_t> value_offsets;        // start of each kv value (after its u32 type)
    std::vector<size_t> tensor_info_offsets;  // start of each tensor info (its name length)
    size_t tensor_infos_end = 0;
    size_t data_offset = 0;                   // start of the data section
    std::vector<uint64_t> tensor_offsets;     // relative to data_offset
    size_t size = 0;
  };

  GgufBuilder& version(uint32_t v) { version_ = v; return *this; }
  // Writes general.alignment (u32) and lays out the data with it.
  GgufBuilder& alignment(uint32_t a) { alignment_ = a; return add_u32("general.alignment", a); }
  // Lays out the data with `a` but writes no key (for mismatch tests).
  GgufBuilder& layout_alignment(uint64_t a) { alignment_ = a; return *this; }
  // Header counts written instead of the real ones.
  GgufBuilder& tensor_count_override(uint64_t n) { tensor_count_override_ = n; return *this; }
  GgufBuilder& kv_count_override(uint64_t n) { kv_count_override_ = n; return *this; }

  // --- metadata ---------------------------------------------------------------
  GgufBuilder& add_u8(const std::string& k, uint8_t v) { return add_scalar(k, GgufValueType::kU8, v); }
  GgufBuilder& add_i8(const std::string& k, int8_t v) { return add_scalar(k, GgufValueType::kI8, v); }
  GgufBuilder& add_u16(const std::string& k, uint16_t v) { return add_scalar(k, GgufValueType::kU16, v); }
  GgufBuilder& add_i16(const std::string& k, int16_t v) { return add_scalar(k, GgufValueType::kI16, v); }
  GgufBuilder& add_u32(const std::string& k, uint32_t v) { return add_scalar(k, GgufValueType::kU32, v); }
  GgufBuilder& add_i32(const std::string& k, int32_t v) { return add_scalar(k, GgufValueType::kI32, v); }
  GgufBuilder& add_u64(const std::string& k, uint64_t v) { return add_scalar(k, GgufValueType::kU64, v); }
  GgufBuilder& add_i64(const std::string& k, int64_t v) { return add_scalar(k, GgufValueType::kI64, v); }
  GgufBuilder& add_f32(const std::string& k, float v) { return add_scalar(k, GgufValueType::kF32, v); }
  GgufBuilder& add_f64(const std::string& k, double v) { return add_scalar(k, GgufValueType::kF64, v); }
  GgufBuilder& add_bool(const std::string& k, bool v) { return add_scalar(k, GgufValueType::kBool, uint8_t{v}); }
  GgufBuilder& add_string(const std::string& k, const std::string& v) {
    return add_raw(k, static_cast<uint32_t>(GgufValueType::kString), string_bytes(v));
  }
  // Integer array of any integer element type; values are narrowed to it.
  GgufBuilder& add_int_array(const std::string& k, GgufValueType elem, const std::vector<int64_t>& values) {
    Bytes body;
    for (int64_t v : values) append_int(body, elem, v);
    return add_raw(k, static_cast<uint32_t>(GgufValueType::kArray), array_bytes(elem, values.size(), body));
  }
  GgufBuilder& add_f32_array(const std::string& k, const std::vector<float>& values) {
    Bytes body;
    for (float v : values) append(body, v);
    return add_raw(k, static_cast<uint32_t>(GgufValueType::kArray),
                   array_bytes(GgufValueType::kF32, values.size(), body));
  }
  GgufBuilder& add_string_array(const std::string& k, const std::vector<std::string>& values) {
    Bytes body;
    for (const std::string& v : values) append_bytes(body, string_bytes(v));
    return add_raw(k, static_cast<uint32_t>(GgufValueType::kArray),
                   array_bytes(GgufValueType::kString, values.size(), body));
  }
  // Any value: a raw type id and its encoded bytes (see the *_bytes helpers).
  GgufBuilder& add_raw(const std::string& k, uint32_t type, Bytes value) {
    kvs_.push_back({k, type, std::move(value)});
    return *this;
  }

  // --- tensors ----------------------------------------------------------------
  GgufBuilder& add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne, Bytes data) {
    Tensor t;
    t.name = name;
    t.type = static_cast<uint32_t>(type);
    t.ne = std::move(ne);
    t.data = std::move(data);
    return add_tensor(std::move(t));
  }
  GgufBuilder& add_tensor(Tensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }

  Bytes build(Layout* layout = nullptr) const {
    Layout lay;
    Bytes out;
    append_bytes(out, Bytes{'G', 'G', 'U', 'F'});
    append(out, version_);
    append(out, tensor_count_override_.value_or(tensors_.size()));
    append(out, kv_count_override_.value_or(kvs_.size()));
    for (const Kv& kv : kvs_) {
      lay.kv_offsets.push_back(out.size());
      append_bytes(out, string_bytes(kv.key));
      append(out, kv.type);
      lay.value_offsets.push_back(out.size());
      append_bytes(out, kv.value);
    }
    // Data offsets first: the infos carry them.
    uint64_t cursor = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t off = t.offset.value_or(align_up(cursor, alignment_));
      lay.tensor_offsets.push_back(off);
      cursor = off + t.data.size();
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      lay.tensor_info_offsets.push_back(out.size());
      append_bytes(out, string_bytes(t.name));
      append(out, t.n_dims.value_or(static_cast<uint32_t>(t.ne.size())));
      for (uint64_t ne : t.ne) append(out, ne);
      append(out, t.type);
      append(out, lay.tensor_offsets[i]);
    }
    lay.tensor_infos_end = out.size();
    lay.data_offset = static_cast<size_t>(align_up(out.size(), alignment_));
    if (!tensors_.empty()) {
      out.resize(lay.data_offset, 0);
      for (size_t i = 0; i < tensors_.size(); ++i) {
        const Bytes& d = tensors_[i].data;
        const size_t at = lay.data_offset + static_cast<size_t>(lay.tensor_offsets[i]);
        if (out.size() < at + d.size()) out.resize(at + d.size(), 0);
        if (!d.empty()) std::memcpy(out.data() + at, d.data(), d.size());
      }
    }
    lay.size = out.size();
    if (layout) *layout = std::move(lay);
    return out;
  }

  // --- encoding helpers (public: tests build raw values with them) -----------
  // (resize + memcpy rather than insert: GCC 12 warns falsely about
  // vector::insert of a few bytes at -O2.)
  template <typename T>
  static void append(Bytes& out, T v) {
    append_raw(out, &v, sizeof(T));  // little-endian hosts only, like the reader
  }
  static void append_bytes(Bytes& out, const Bytes& b) { append_raw(out, b.data(), b.size()); }
  static void append_raw(Bytes& out, const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  static Bytes string_bytes(const std::string& s) {
    Bytes b;
    append(b, static_cast<uint64_t>(s.size()));
    append_raw(b, s.data(), s.size());
    return b;
  }
  // An array value: u32 element type, u64 count, then `body` (the elements).
  static Bytes array_bytes(GgufValueType elem, uint64_t count, const Bytes& body) {
    return array_bytes_raw(static_cast<uint32_t>(elem), count, body);
  }
  static Bytes array_bytes_raw(uint32_t elem, uint64_t count, const Bytes& body) {
    Bytes b;
    append(b, elem);
    append(b, count);
    append_bytes(b, body);
    return b;
  }
  static void append_int(Bytes& out, GgufValueType t, int64_t v) {
    switch (t) {
      case GgufValueType::kU8: append(out, static_cast<uint8_t>(v)); break;
      case GgufValueType::kI8: append(out, static_cast<int8_t>(v)); break;
      case GgufValueType::kU16: append(out, static_cast<uint16_t>(v)); break;
      case GgufValueType::kI16: append(out, static_cast<int16_t>(v)); break;
      case GgufValueType::kU32: append(out, static_cast<uint32_t>(v)); break;
      case GgufValueType::kI32: append(out, static_cast<int32_t>(v)); break;
      case GgufValueType::kU64: append(out, static_cast<uint64_t>(v)); break;
      default: append(out, v); break;
    }
  }
  // Overwrites a little-endian value inside a built file.
  template <typename T>
  static void patch(Bytes& file, size_t offset, T v) {
    std::memcpy(file.data() + offset, &v, sizeof(T));
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    Bytes value;
  };

  template <typename T>
  GgufBuilder& add_scalar(const std::string& k, GgufValueType type, T v) {
    Bytes b;
    append(b, v);
    return add_raw(k, static_cast<uint32_t>(type), std::move(b));
  }
  static uint64_t align_up(uint64_t v, uint64_t a) { return a ? kernels::align_up(v, a) : v; }

  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::optional<uint64_t> tensor_count_override_;
  std::optional<uint64_t> kv_count_override_;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace flashscope::model
