// GgufFile: maps a GGUF file read-only and validates all of it before any of
// it is used.
//
// Parsing is one forward pass with a bounds-checked cursor. Nothing is
// allocated from a count read out of the file before that count has been
// checked against the bytes that remain, so a corrupt header cannot make us
// reserve gigabytes; arrays nest at most kMaxArrayDepth deep, so a crafted
// file cannot overflow the stack. Metadata values are validated in place and
// decoded on demand from the mapping; the index keeps only each value's
// position. Checks, in file order:
//   header   magic "GGUF"; version 2 or 3; tensor and kv counts that can fit
//   kv       key length inside the file, non-empty, unique; known value
//            type; string and array lengths inside the file; bools 0 or 1
//   align    general.alignment, when present, an integer power of two
//   tensors  non-empty unique name; n_dims <= 4; each dim <= INT64_MAX and
//            the product of the nonzero ones too; known type with a layout;
//            ne[0] a multiple of the block size; byte size without overflow
//            (zeros aside, as for the element count); offset a
//            multiple of the alignment; data inside the file, no overlaps
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/untrusted.hpp"

#if defined(_WIN32)
#include <fstream>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace flashscope {
namespace {

constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;
constexpr char kAlignmentKey[] = "general.alignment";
// Lower bounds on the bytes of one kv pair (key length, 1-byte key, type,
// 1-byte value) and one tensor info (name length, n_dims, type, offset), to
// reject impossible counts before reading on.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

Status corrupt(std::string message) { return {StatusCode::kCorruptData, std::move(message)}; }

// Keys and tensor names come from the file: control bytes escaped.
std::string quoted(const std::string& s) { return printable(s); }

// Size in bytes of a fixed-size value type; 0 for string, array and unknown.
uint64_t value_size(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16: return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32: return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64: return 8;
    default: return 0;
  }
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64: return true;
    default: return false;
  }
}

bool is_float(GgufValueType t) { return t == GgufValueType::kF32 || t == GgufValueType::kF64; }

std::string type_label(GgufValueType t) {
  const char* name = gguf_value_type_name(t);
  return name ? name : "type " + std::to_string(static_cast<uint32_t>(t));
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads an integer of any GGUF integer type. False when a u64 does not fit.
bool load_int(GgufValueType t, const uint8_t* p, int64_t* out) {
  switch (t) {
    case GgufValueType::kU8: *out = load<uint8_t>(p); return true;
    case GgufValueType::kI8: *out = load<int8_t>(p); return true;
    case GgufValueType::kU16: *out = load<uint16_t>(p); return true;
    case GgufValueType::kI16: *out = load<int16_t>(p); return true;
    case GgufValueType::kU32: *out = load<uint32_t>(p); return true;
    case GgufValueType::kI32: *out = load<int32_t>(p); return true;
    case GgufValueType::kI64: *out = load<int64_t>(p); return true;
    case GgufValueType::kU64: {
      const uint64_t v = load<uint64_t>(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(v);
      return true;
    }
    default: return false;
  }
}

double load_float(GgufValueType t, const uint8_t* p) {
  return t == GgufValueType::kF32 ? static_cast<double>(load<float>(p)) : load<double>(p);
}

// A bounds-checked forward reader over the whole file.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return base_ + pos_; }

  bool skip(uint64_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }
  template <typename T>
  bool read(T* out) {
    if (sizeof(T) > remaining()) return false;
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // "truncated: <what> needs N bytes at offset P, but the file ends at S"
  Status truncated(const std::string& what, uint64_t need) const {
    return corrupt("truncated: " + what + " needs " + std::to_string(need) + " bytes at offset " +
                   std::to_string(pos_) + ", but the file ends at " + std::to_string(size_));
  }

  // A u64 length followed by that many bytes. On success *out views the
  // bytes (inside the file).
  Status read_string(const std::string& what, const uint8_t** data, uint64_t* len) {
    const uint64_t at = pos_;
    if (!read(len)) return truncated("the length of " + what, 8);
    if (*len > remaining()) {
      return corrupt("string length " + std::to_string(*len) + " of " + what + " at offset " + std::to_string(at) +
                     " runs past the end of the file (" + std::to_string(size_) + " bytes)");
    }
    *data = here();
    pos_ += *len;
    return Status::ok_status();
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Validates and skips one value of type `type` of metadata key `key` (named
// in errors); `depth` counts enclosing arrays.
Status skip_value(Cursor& cur, uint32_t type, const std::string& key, int depth);

Status skip_array(Cursor& cur, const std::string& key, int depth, uint32_t* elem_type_out, uint64_t* count_out) {
  const std::string what = "array " + quoted(key);
  const uint64_t at = cur.pos();
  uint32_t elem_type;
  uint64_t count;
  if (!cur.read(&elem_type)) return cur.truncated("the element type of " + what, 4);
  if (!cur.read(&count)) return cur.truncated("the element count of " + what, 8);
  if (elem_type_out) *elem_type_out = elem_type;
  if (count_out) *count_out = count;
  if (elem_type > static_cast<uint32_t>(GgufValueType::kF64)) {
    return corrupt(what + " at offset " + std::to_string(at) + " has unknown element type " +
                   std::to_string(elem_type));
  }
  const uint64_t fixed = value_size(elem_type);
  if (fixed != 0) {
    if (count > cur.remaining() / fixed) {
      return corrupt(what + " at offset " + std::to_string(at) + " claims " + std::to_string(count) + " " +
                     type_label(static_cast<GgufValueType>(elem_type)) + " elements (" +
                     std::to_string(count) + " x " + std::to_string(fixed) +
                     " bytes), which runs past the end of the file (" + std::to_string(cur.size()) + " bytes)");
    }
    if (static_cast<GgufValueType>(elem_type) == GgufValueType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (cur.here()[i] > 1) {
          return corrupt("element " + std::to_string(i) + " of " + what + " at offset " +
                         std::to_string(cur.pos() + i) + " is a bool with value " +
                         std::to_string(cur.here()[i]) + " (must be 0 or 1)");
        }
      }
    }
    cur.skip(count * fixed);
    return Status::ok_status();
  }
  // Strings take at least 8 bytes each, nested arrays at least 12: a count
  // beyond that cannot be right, and checking it first keeps the loop short.
  const uint64_t min_elem = elem_type == static_cast<uint32_t>(GgufValueType::kString) ? 8 : 12;
  if (count > cur.remaining() / min_elem) {
    return corrupt(what + " at offset " + std::to_string(at) + " claims " + std::to_string(count) + " " +
                   type_label(static_cast<GgufValueType>(elem_type)) +
                   " elements, which cannot fit in the rest of the file (" + std::to_string(cur.remaining()) +
                   " bytes)");
  }
  if (elem_type == static_cast<uint32_t>(GgufValueType::kArray) && depth + 1 > kMaxArrayDepth) {
    return corrupt(what + " at offset " + std::to_string(at) + " nests arrays deeper than " +
                   std::to_string(kMaxArrayDepth) + " levels");
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (elem_type == static_cast<uint32_t>(GgufValueType::kString)) {
      const uint8_t* data;
      uint64_t len;
      // The element's name is built only on failure: token arrays have 50k entries.
      Status s = cur.read_string("string", &data, &len);
      if (!s.ok()) return corrupt("element " + std::to_string(i) + " of " + what + ": " + s.message());
    } else {
      Status s = skip_array(cur, key + "[" + std::to_string(i) + "]", depth + 1, nullptr, nullptr);
      if (!s.ok()) return s;
    }
  }
  return Status::ok_status();
}

Status skip_value(Cursor& cur, uint32_t type, const std::string& key, int depth) {
  const uint64_t at = cur.pos();
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kString: {
      const uint8_t* data;
      uint64_t len;
      return cur.read_string("the value of key " + quoted(key), &data, &len);
    }
    case GgufValueType::kArray: return skip_array(cur, key, depth, nullptr, nullptr);
    case GgufValueType::kBool: {
      uint8_t v;
      if (!cur.read(&v)) return cur.truncated("the value of key " + quoted(key), 1);
      if (v > 1) {
        return corrupt("key " + quoted(key) + " at offset " + std::to_string(at) + " is a bool with value " +
                       std::to_string(v) + " (must be 0 or 1)");
      }
      return Status::ok_status();
    }
    default: {
      const uint64_t n = value_size(type);
      if (n == 0) {
        return corrupt("key " + quoted(key) + " has unknown value type " + std::to_string(type) + " at offset " +
                       std::to_string(at - 4));
      }
      if (!cur.skip(n)) return cur.truncated("the value of key " + quoted(key), n);
      return Status::ok_status();
    }
  }
}

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string escape(const uint8_t* p, uint64_t n, uint64_t max_chars) {
  std::string out;
  const uint64_t shown = std::min(n, max_chars);
  for (uint64_t i = 0; i < shown; ++i) {
    const unsigned char c = p[i];
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through
        }
    }
  }
  std::string result = "\"" + out + "\"";
  if (shown < n) result += "... (" + std::to_string(n) + " bytes)";
  return result;
}

// Renders one value at p (already validated); advances p past it.
std::string render(GgufValueType t, const uint8_t*& p, size_t max_elems) {
  switch (t) {
    case GgufValueType::kString: {
      const uint64_t len = load<uint64_t>(p);
      std::string s = escape(p + 8, len, 120);
      p += 8 + len;
      return s;
    }
    case GgufValueType::kBool: return *p++ ? "true" : "false";
    case GgufValueType::kF32:
    case GgufValueType::kF64: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.9g", load_float(t, p));
      p += value_size(static_cast<uint32_t>(t));
      return buf;
    }
    case GgufValueType::kArray: {
      const auto elem = static_cast<GgufValueType>(load<uint32_t>(p));
      const uint64_t count = load<uint64_t>(p + 4);
      p += 12;
      std::string s = "[";
      for (uint64_t i = 0; i < count; ++i) {
        if (i == max_elems) {
          // Skip the rest without rendering it.
          const uint64_t fixed = value_size(static_cast<uint32_t>(elem));
          if (fixed != 0) {
            p += (count - i) * fixed;
          } else {
            for (; i < count; ++i) render(elem, p, 0);
          }
          s += ", ...";
          break;
        }
        if (i) s += ", ";
        s += render(elem, p, max_elems);
      }
      s += "]";
      if (count > max_elems) s += " (" + std::to_string(count) + " " + type_label(elem) + ")";
      return s;
    }
    default: {
      std::string s;
      if (t == GgufValueType::kU64) {
        s = std::to_string(load<uint64_t>(p));
      } else {
        int64_t v = 0;
        load_int(t, p, &v);
        s = std::to_string(v);
      }
      p += value_size(static_cast<uint32_t>(t));
      return s;
    }
  }
}

}  // namespace

struct GgufFile::Impl {
  // Storage: a read-only mapping, an owned buffer, or a borrowed one.
  void* map_addr = nullptr;
  size_t map_len = 0;
  std::vector<uint8_t> owned;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  std::string path;

  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;

  std::vector<GgufKeyInfo> keys;
  std::vector<uint64_t> value_pos;  // per key: its value, or for arrays its first element
  std::unordered_map<std::string, size_t> key_index;
  std::vector<GgufTensor> tensors;
  std::unordered_map<std::string, size_t> tensor_index;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
#if !defined(_WIN32)
    if (map_addr) munmap(map_addr, map_len);
#endif
  }

  Status parse();
  Status parse_tensor_info(Cursor& cur, uint64_t index);
  Status lookup(const std::string& key, size_t* index) const;
  Status mismatch(size_t index, const char* expected) const;
};

Status GgufFile::Impl::lookup(const std::string& key, size_t* index) const {
  auto it = key_index.find(key);
  if (it == key_index.end()) return corrupt("GGUF key " + quoted(key) + " is missing");
  *index = it->second;
  return Status::ok_status();
}

Status GgufFile::Impl::mismatch(size_t index, const char* expected) const {
  const GgufKeyInfo& k = keys[index];
  std::string found = type_label(k.type);
  if (k.type == GgufValueType::kArray) found = "array of " + std::to_string(k.count) + " " + type_label(k.elem_type);
  return corrupt("GGUF key " + quoted(k.key) + " is " + found + ", expected " + expected);
}

Status GgufFile::Impl::parse() {
  Cursor cur(base, size);

  // --- header ---------------------------------------------------------------
  if (size < 4) return cur.truncated("the magic 'GGUF'", 4);
  if (std::memcmp(base, "GGUF", 4) != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", base[0], base[1], base[2], base[3]);
    return corrupt(std::string("bad magic at offset 0: expected 'GGUF' (47 47 55 46), found ") + buf +
                   " (not a GGUF file)");
  }
  cur.skip(4);
  if (!cur.read(&version)) return cur.truncated("the version", 4);
  if (version == 1) return unsupported("GGUF version 1 is not supported (only versions 2 and 3)");
  if ((version & 0x00ffffffu) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3) {
    return unsupported("GGUF file is big-endian (version field " + std::to_string(version) +
                       "); only little-endian files are supported");
  }
  if (version != 2 && version != 3) {
    return corrupt("bad GGUF version " + std::to_string(version) + " at offset 4 (expected 2 or 3)");
  }
  uint64_t tensor_count;
  uint64_t kv_count;
  if (!cur.read(&tensor_count)) return cur.truncated("tensor_count", 8);
  if (!cur.read(&kv_count)) return cur.truncated("kv_count", 8);
  {
    const uint64_t rem = cur.remaining();
    const bool fits = kv_count <= rem / kMinKvBytes && tensor_count <= rem / kMinTensorInfoBytes &&
                      kv_count * kMinKvBytes + tensor_count * kMinTensorInfoBytes <= rem;
    if (!fits) {
      return corrupt("header claims " + std::to_string(tensor_count) + " tensors and " + std::to_string(kv_count) +
                     " metadata keys, which cannot fit in a file of " + std::to_string(size) + " bytes");
    }
  }

  // --- metadata -------------------------------------------------------------
  keys.reserve(kv_count);
  value_pos.reserve(kv_count);
  key_index.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t at = cur.pos();
    const uint8_t* key_data;
    uint64_t key_len;
    FLASHSCOPE_RETURN_IF_ERROR(cur.read_string("metadata key #" + std::to_string(i), &key_data, &key_len));
    if (key_len == 0) return corrupt("metadata key #" + std::to_string(i) + " at offset " + std::to_string(at) + " is empty");
    GgufKeyInfo info;
    info.key.assign(reinterpret_cast<const char*>(key_data), key_len);
    uint32_t type;
    if (!cur.read(&type)) return cur.truncated("the value type of key " + quoted(info.key), 4);
    if (type > static_cast<uint32_t>(GgufValueType::kF64)) {
      return corrupt("key " + quoted(info.key) + " has unknown value type " + std::to_string(type) + " at offset " +
                     std::to_string(cur.pos() - 4));
    }
    info.type = static_cast<GgufValueType>(type);
    info.elem_type = info.type;
    info.count = 1;
    uint64_t pos = cur.pos();
    if (info.type == GgufValueType::kArray) {
      uint32_t elem_type = 0;
      FLASHSCOPE_RETURN_IF_ERROR(skip_array(cur, info.key, 1, &elem_type, &info.count));
      info.elem_type = static_cast<GgufValueType>(elem_type);
      pos += 12;
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(skip_value(cur, type, info.key, 0));
    }
    if (!key_index.emplace(info.key, keys.size()).second) {
      return corrupt("duplicate metadata key " + quoted(info.key) + " at offset " + std::to_string(at));
    }
    keys.push_back(std::move(info));
    value_pos.push_back(pos);
  }

  auto align_it = key_index.find(kAlignmentKey);
  if (align_it != key_index.end()) {
    const GgufKeyInfo& k = keys[align_it->second];
    int64_t v = 0;
    if (!is_integer(k.type) || !load_int(k.type, base + value_pos[align_it->second], &v)) {
      return mismatch(align_it->second, "an integer");
    }
    if (v <= 0 || !is_power_of_two(static_cast<uint64_t>(v))) {
      return corrupt("general.alignment is " + std::to_string(v) + ", which is not a power of two");
    }
    alignment = static_cast<uint64_t>(v);
  }

  // --- tensor infos ---------------------------------------------------------
  tensors.reserve(tensor_count);
  tensor_index.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) FLASHSCOPE_RETURN_IF_ERROR(parse_tensor_info(cur, i));

  // --- data section ---------------------------------------------------------
  const uint64_t pad = (alignment - cur.pos() % alignment) % alignment;
  data_offset = cur.pos() + pad;  // cannot overflow: pos <= size and pad < alignment <= 2^62
  if (data_offset > size && !tensors.empty()) {
    return corrupt("truncated: the data section should start at offset " + std::to_string(data_offset) +
                   " (after padding to " + std::to_string(alignment) + "), but the file ends at " +
                   std::to_string(size));
  }
  const uint64_t data_bytes = data_offset <= size ? size - data_offset : 0;
  for (GgufTensor& t : tensors) {
    if (t.offset > data_bytes || t.size > data_bytes - t.offset) {
      return corrupt("tensor " + quoted(t.name) + " data [" + std::to_string(data_offset + t.offset) + ", " +
                     std::to_string(data_offset + t.offset) + " + " + std::to_string(t.size) +
                     ") runs past the end of the file (" + std::to_string(size) + " bytes)");
    }
    t.data = base + data_offset + t.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(tensors.size());
  for (const GgufTensor& t : tensors) {
    if (t.size) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor* prev = by_offset[i - 1];
    if (prev->offset + prev->size > by_offset[i]->offset) {
      return corrupt("tensors " + quoted(prev->name) + " and " + quoted(by_offset[i]->name) +
                     " overlap in the data section (offsets " + std::to_string(prev->offset) + " + " +
                     std::to_string(prev->size) + " > " + std::to_string(by_offset[i]->offset) + ")");
    }
  }
  return Status::ok_status();
}

Status GgufFile::Impl::parse_tensor_info(Cursor& cur, uint64_t index) {
  const uint64_t at = cur.pos();
  const uint8_t* name_data;
  uint64_t name_len;
  FLASHSCOPE_RETURN_IF_ERROR(cur.read_string("the name of tensor #" + std::to_string(index), &name_data, &name_len));
  if (name_len == 0) {
    return corrupt("tensor #" + std::to_string(index) + " at offset " + std::to_string(at) + " has an empty name");
  }
  GgufTensor t;
  t.name.assign(reinterpret_cast<const char*>(name_data), name_len);
  const std::string what = "tensor " + quoted(t.name);

  if (!cur.read(&t.n_dims)) return cur.truncated("n_dims of " + what, 4);
  if (t.n_dims > kMaxDims) {
    return corrupt(what + " has n_dims " + std::to_string(t.n_dims) + " at offset " + std::to_string(cur.pos() - 4) +
                   " (at most " + std::to_string(kMaxDims) + ")");
  }
  // Products of the dimensions are checked with the zeros left out: a zero
  // makes the element count 0, but n_rows() and a caller's ne[1] * ne[2]
  // still multiply the others.
  int64_t nonzero_elements = 1;
  bool has_zero = false;
  for (uint32_t d = 0; d < t.n_dims; ++d) {
    uint64_t ne;
    if (!cur.read(&ne)) return cur.truncated("ne[" + std::to_string(d) + "] of " + what, 8);
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return corrupt(what + " has ne[" + std::to_string(d) + "] = " + std::to_string(ne) + ", above INT64_MAX");
    }
    t.ne[d] = static_cast<int64_t>(ne);
    if (t.ne[d] == 0) {
      has_zero = true;
      continue;
    }
    if (nonzero_elements > std::numeric_limits<int64_t>::max() / t.ne[d]) {
      return corrupt(what + " has dimensions whose element count overflows 64 bits");
    }
    nonzero_elements *= t.ne[d];
  }

  uint32_t type;
  if (!cur.read(&type)) return cur.truncated("the type of " + what, 4);
  t.type = static_cast<GgmlType>(type);
  const char* type_name = ggml_type_name(t.type);
  if (type_name == nullptr) {
    return corrupt(what + " has unknown ggml type " + std::to_string(type) + " at offset " +
                   std::to_string(cur.pos() - 4));
  }
  const int64_t block = ggml_block_size(t.type);
  if (block == 0) {
    return unsupported(what + " has ggml type " + type_name + " (id " + std::to_string(type) +
                       "), which has no GGUF layout");
  }
  if (t.ne[0] % block != 0) {
    return corrupt(what + " of type " + type_name + " has ne[0] = " + std::to_string(t.ne[0]) +
                   ", not a multiple of its block size " + std::to_string(block));
  }
  // bytes = (ne0 / block) * type_size * ne1 * ne2 * ne3, every step checked,
  // zeros left out as above.
  const auto blocks = static_cast<uint64_t>(t.ne[0] / block);
  const auto type_size = static_cast<uint64_t>(ggml_type_size(t.type));
  const std::string too_big = what + " has a byte size that overflows 64 bits";
  if (blocks != 0 && type_size > std::numeric_limits<uint64_t>::max() / blocks) return corrupt(too_big);
  uint64_t bytes = blocks != 0 ? blocks * type_size : type_size;
  for (int d = 1; d < 4; ++d) {
    const auto ne = static_cast<uint64_t>(t.ne[d]);
    if (ne == 0) continue;
    if (bytes > std::numeric_limits<uint64_t>::max() / ne) return corrupt(too_big);
    bytes *= ne;
  }
  t.size = has_zero ? 0 : bytes;

  if (!cur.read(&t.offset)) return cur.truncated("the data offset of " + what, 8);
  if (t.offset % alignment != 0) {
    return corrupt(what + " has data offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
                   std::to_string(alignment));
  }
  if (!tensor_index.emplace(t.name, tensors.size()).second) {
    return corrupt("duplicate tensor name " + quoted(t.name) + " (tensor #" + std::to_string(index) + " at offset " +
                   std::to_string(at) + ")");
  }
  tensors.push_back(std::move(t));
  return Status::ok_status();
}

// --- GgufFile ----------------------------------------------------------------

GgufFile::GgufFile() = default;
GgufFile::~GgufFile() = default;
GgufFile::GgufFile(GgufFile&& other) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&& other) noexcept = default;
GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

const GgufFile::Impl& GgufFile::impl() const {
  // What an empty or moved-from GgufFile reports: no keys, no tensors. A
  // constant, not state: nothing ever writes to it.
  static const Impl kEmpty;
  return impl_ ? *impl_ : kEmpty;
}

Result<GgufFile> GgufFile::parse(std::unique_ptr<Impl> impl) {
  Status s = impl->parse();
  if (!s.ok()) {
    if (!impl->path.empty()) return Status(s.code(), impl->path + ": " + s.message());
    return s;
  }
  return GgufFile(std::move(impl));
}

Result<GgufFile> GgufFile::from_memory(const void* data, size_t size) {
  if (data == nullptr && size != 0) return invalid_argument("GgufFile::from_memory: data is null");
  auto impl = std::make_unique<Impl>();
  impl->base = static_cast<const uint8_t*>(data);
  impl->size = size;
  return parse(std::move(impl));
}

Result<GgufFile> GgufFile::from_buffer(std::vector<uint8_t> bytes) {
  auto impl = std::make_unique<Impl>();
  impl->owned = std::move(bytes);
  impl->base = impl->owned.data();
  impl->size = impl->owned.size();
  return parse(std::move(impl));
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  FLASHSCOPE_RETURN_IF_ERROR(check_regular_file(path));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  auto io_error = [&](const std::string& what, int err) {
    return Status(StatusCode::kIoError,
                  path + ": " + what + ": " + std::error_code(err, std::generic_category()).message());
  };
#if defined(_WIN32)
  // No mapping here yet: read the file whole. Same validation either way.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status(StatusCode::kIoError, path + ": cannot open");
  const std::streamoff n = in.tellg();
  if (n < 0) return Status(StatusCode::kIoError, path + ": cannot read its size");
  impl->owned.resize(static_cast<size_t>(n));
  in.seekg(0);
  if (n > 0 && !in.read(reinterpret_cast<char*>(impl->owned.data()), n)) {
    return Status(StatusCode::kIoError, path + ": read failed");
  }
  impl->base = impl->owned.data();
  impl->size = impl->owned.size();
  (void)io_error;
#else
  // O_NONBLOCK: a FIFO put in the file's place after the check above must
  // not block here either; fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return io_error("cannot open", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::kIoError, path + ": not a regular file");
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size == 0) {
    ::close(fd);
    return corrupt(path + ": the file is empty (0 bytes)");
  }
  if (file_size > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    return Status(StatusCode::kIoError, path + ": too large to map on this platform");
  }
  void* addr = mmap(nullptr, static_cast<size_t>(file_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) return io_error("cannot map " + std::to_string(file_size) + " bytes", map_err);
  impl->map_addr = addr;
  impl->map_len = static_cast<size_t>(file_size);
  impl->base = static_cast<const uint8_t*>(addr);
  impl->size = file_size;
#endif
  return parse(std::move(impl));
}

uint32_t GgufFile::version() const { return impl().version; }
uint64_t GgufFile::alignment() const { return impl().alignment; }
uint64_t GgufFile::file_size() const { return impl().size; }
uint64_t GgufFile::data_offset() const { return impl().data_offset; }
const std::string& GgufFile::path() const { return impl().path; }
const std::vector<GgufKeyInfo>& GgufFile::keys() const { return impl().keys; }
const std::vector<GgufTensor>& GgufFile::tensors() const { return impl().tensors; }

bool GgufFile::has_key(const std::string& key) const { return impl().key_index.count(key) != 0; }

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const Impl& im = impl();
  auto it = im.tensor_index.find(name);
  return it == im.tensor_index.end() ? nullptr : &im.tensors[it->second];
}

Result<GgufKeyInfo> GgufFile::key_info(const std::string& key) const {
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(impl().lookup(key, &i));
  return impl().keys[i];
}

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  if (!is_integer(im.keys[i].type)) return im.mismatch(i, "an integer");
  int64_t v;
  if (!load_int(im.keys[i].type, im.base + im.value_pos[i], &v)) {
    return corrupt("GGUF key " + quoted(key) + " is a u64 above INT64_MAX");
  }
  return v;
}

Result<double> GgufFile::get_float(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  const GgufValueType t = im.keys[i].type;
  const uint8_t* p = im.base + im.value_pos[i];
  if (is_float(t)) return load_float(t, p);
  if (t == GgufValueType::kU64) return static_cast<double>(load<uint64_t>(p));
  int64_t v;
  if (is_integer(t) && load_int(t, p, &v)) return static_cast<double>(v);
  return im.mismatch(i, "a number");
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  if (im.keys[i].type != GgufValueType::kBool) return im.mismatch(i, "a bool");
  return im.base[im.value_pos[i]] != 0;
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  if (im.keys[i].type != GgufValueType::kString) return im.mismatch(i, "a string");
  const uint8_t* p = im.base + im.value_pos[i];
  const uint64_t len = load<uint64_t>(p);
  return std::string(reinterpret_cast<const char*>(p + 8), len);
}

Result<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  const GgufKeyInfo& k = im.keys[i];
  if (k.type != GgufValueType::kArray || k.elem_type != GgufValueType::kString) {
    return im.mismatch(i, "an array of strings");
  }
  std::vector<std::string> out;
  out.reserve(k.count);
  const uint8_t* p = im.base + im.value_pos[i];
  for (uint64_t e = 0; e < k.count; ++e) {
    const uint64_t len = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), len);
    p += 8 + len;
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  const GgufKeyInfo& k = im.keys[i];
  if (k.type != GgufValueType::kArray || !is_integer(k.elem_type)) return im.mismatch(i, "an array of integers");
  const uint64_t stride = value_size(static_cast<uint32_t>(k.elem_type));
  std::vector<int64_t> out(k.count);
  const uint8_t* p = im.base + im.value_pos[i];
  for (uint64_t e = 0; e < k.count; ++e, p += stride) {
    if (!load_int(k.elem_type, p, &out[e])) {
      return corrupt("element " + std::to_string(e) + " of GGUF key " + quoted(key) + " is a u64 above INT64_MAX");
    }
  }
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(const std::string& key) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  const GgufKeyInfo& k = im.keys[i];
  if (k.type != GgufValueType::kArray || !is_float(k.elem_type)) return im.mismatch(i, "an array of floats");
  const uint64_t stride = value_size(static_cast<uint32_t>(k.elem_type));
  std::vector<float> out(k.count);
  const uint8_t* p = im.base + im.value_pos[i];
  for (uint64_t e = 0; e < k.count; ++e, p += stride) out[e] = static_cast<float>(load_float(k.elem_type, p));
  return out;
}

Result<std::string> GgufFile::format_value(const std::string& key, size_t max_elems) const {
  const Impl& im = impl();
  size_t i;
  FLASHSCOPE_RETURN_IF_ERROR(im.lookup(key, &i));
  const GgufKeyInfo& k = im.keys[i];
  // value_pos of an array points at its first element; render() wants the header.
  const uint8_t* p = im.base + im.value_pos[i] - (k.type == GgufValueType::kArray ? 12 : 0);
  return render(k.type, p, max_elems);
}

}  // namespace flashscope
