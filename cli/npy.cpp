// .npy reading and writing; the format and what is supported are described in
// npy.hpp. The header is parsed as the small subset of Python literals that
// numpy writes (a dict of strings, bools, ints and tuples, with lists for the
// structured dtypes we reject), never by pattern matching, so key order,
// spacing, trailing commas and 1-tuples all read as numpy reads them.
#include "npy.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <system_error>
#include <utility>

#include "flashscope/half.hpp"

namespace flashscope::cli {
namespace {

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "npy.cpp copies little-endian file data straight into host memory");
#endif

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kVersionLen = 2;            // major, minor
constexpr size_t kArrayAlign = 64;           // numpy pads magic + length + header to this
constexpr size_t kGrowthAxisMaxDigits = 21;  // numpy's spare room for rewriting shape[0] in place
constexpr size_t kMaxRank = 64;              // numpy's NPY_MAXDIMS
// numpy refuses headers over 10000 characters unless the file is trusted; a
// header longer than this is a corrupt length field, not a real array.
constexpr size_t kMaxHeaderBytes = size_t{1} << 20;
// A Python literal nested deeper than this is not something numpy writes; the
// limit keeps a hostile "((((((..." from exhausting the parser's stack.
constexpr int kMaxNesting = 16;

constexpr const char* kSupportedDtypes = "'<f2', '<f4', '<f8', '<i4', '<i8', '|u1', '<u2'";

Status corrupt(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }
Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }

// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string shape_repr(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// A header excerpt for error messages: printable ASCII kept, the rest escaped,
// long headers cut, so a binary blob never ends up raw in a log.
std::string excerpt(const char* s, size_t n) {
  constexpr size_t kMaxShown = 96;
  std::string out;
  for (size_t i = 0; i < n && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (n > kMaxShown) out += "...";
  return out;
}

// --- the Python literal subset of an .npy header ---------------------------

struct PyValue {
  enum class Kind { kString, kInt, kBool, kNone, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  std::string str;             // kString
  int64_t integer = 0;         // kInt
  bool boolean = false;        // kBool
  std::vector<PyValue> items;  // kTuple, kList; kDict: the values, in order
  std::vector<std::string> keys;  // kDict: the keys (strings only), beside items
};

const char* kind_name(PyValue::Kind k) {
  switch (k) {
    case PyValue::Kind::kString: return "a string";
    case PyValue::Kind::kInt: return "an int";
    case PyValue::Kind::kBool: return "a bool";
    case PyValue::Kind::kNone: return "None";
    case PyValue::Kind::kTuple: return "a tuple";
    case PyValue::Kind::kList: return "a list";
    case PyValue::Kind::kDict: return "a dict";
  }
  return "a value";
}

// Recursive descent over: dict, tuple, list, 'string', "string", int (with
// the 'L' suffix Python 2 wrote, accepted in versions 1.0 and 2.0 as numpy
// does), True, False, None. Errors name the byte offset in the header.
class HeaderParser {
 public:
  HeaderParser(const char* text, size_t len, bool allow_long_suffix)
      : s_(text), n_(len), allow_long_suffix_(allow_long_suffix) {}

  // The whole header: one value, then only whitespace (numpy's padding).
  Status parse(PyValue* out) {
    FLASHSCOPE_RETURN_IF_ERROR(value(out, 0));
    skip_space();
    if (pos_ != n_) return error("unexpected text after the header dict");
    return {};
  }

 private:
  Status error(const std::string& what) const {
    return corrupt("bad .npy header: " + what + " at byte " + std::to_string(pos_) + " of \"" +
                   excerpt(s_, n_) + "\"");
  }

  static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_ident(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || is_digit(c);
  }

  void skip_space() {
    while (pos_ < n_ && is_space(s_[pos_])) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < n_ && s_[pos_] == c;
  }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }

  Status value(PyValue* out, int depth) {
    if (depth > kMaxNesting) return error("literal nested too deeply");
    skip_space();
    if (pos_ >= n_) return error("unexpected end of header");
    const char c = s_[pos_];
    if (c == '\'' || c == '"') return string(out);
    if (c == '{') return dict(out, depth);
    if (c == '(') return tuple(out, depth);
    if (c == '[') return sequence(out, depth, ']', PyValue::Kind::kList);
    if (is_digit(c) || c == '-' || c == '+') return integer(out);
    if (is_ident(c)) return keyword(out);
    return error(std::string("unexpected character '") + excerpt(&c, 1) + "'");
  }

  Status string(PyValue* out) {
    const char quote = s_[pos_++];
    out->kind = PyValue::Kind::kString;
    out->str.clear();
    while (pos_ < n_) {
      char c = s_[pos_++];
      if (c == quote) return {};
      if (c == '\n') break;  // a plain Python string cannot span lines
      // Escapes keep the escaped character; no supported descr contains one,
      // so this only has to find the closing quote correctly.
      if (c == '\\' && pos_ < n_) c = s_[pos_++];
      out->str += c;
    }
    return error("unterminated string");
  }

  Status integer(PyValue* out) {
    bool negative = false;
    if (s_[pos_] == '-' || s_[pos_] == '+') negative = s_[pos_++] == '-';
    if (pos_ >= n_ || !is_digit(s_[pos_])) return error("expected digits");
    uint64_t magnitude = 0;
    constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    while (pos_ < n_ && is_digit(s_[pos_])) {
      const auto digit = static_cast<uint64_t>(s_[pos_++] - '0');
      if (magnitude > (kLimit - digit) / 10) return error("integer out of range");
      magnitude = magnitude * 10 + digit;
    }
    if (allow_long_suffix_ && pos_ < n_ && (s_[pos_] == 'L' || s_[pos_] == 'l')) ++pos_;
    // "2.0", "3e4", "5j", "12abc": not a Python int.
    if (pos_ < n_ && (is_ident(s_[pos_]) || s_[pos_] == '.')) return error("expected an integer");
    out->kind = PyValue::Kind::kInt;
    out->integer = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return {};
  }

  Status keyword(PyValue* out) {
    const size_t start = pos_;
    while (pos_ < n_ && is_ident(s_[pos_])) ++pos_;
    const std::string word(s_ + start, pos_ - start);
    if (word == "True" || word == "False") {
      out->kind = PyValue::Kind::kBool;
      out->boolean = word == "True";
      return {};
    }
    if (word == "None") {
      out->kind = PyValue::Kind::kNone;
      return {};
    }
    pos_ = start;
    return error("unexpected name '" + excerpt(word.data(), word.size()) + "'");
  }

  // "(x)" is x itself, "(x,)" a 1-tuple, "()" the empty tuple: Python's rules.
  Status tuple(PyValue* out, int depth) {
    ++pos_;  // '('
    if (eat(')')) {
      out->kind = PyValue::Kind::kTuple;
      out->items.clear();
      return {};
    }
    PyValue first;
    FLASHSCOPE_RETURN_IF_ERROR(value(&first, depth + 1));
    if (eat(')')) {
      *out = std::move(first);
      return {};
    }
    if (!eat(',')) return error("expected ',' or ')' in a tuple");
    out->kind = PyValue::Kind::kTuple;
    out->items.clear();
    out->items.push_back(std::move(first));
    return rest_of_sequence(out, depth, ')');
  }

  Status sequence(PyValue* out, int depth, char close, PyValue::Kind kind) {
    ++pos_;  // opening bracket
    out->kind = kind;
    out->items.clear();
    return rest_of_sequence(out, depth, close);
  }

  // Items separated by commas, an optional trailing comma, then `close`.
  // Called after the opening bracket or after "first,".
  Status rest_of_sequence(PyValue* out, int depth, char close) {
    while (!eat(close)) {
      PyValue item;
      FLASHSCOPE_RETURN_IF_ERROR(value(&item, depth + 1));
      out->items.push_back(std::move(item));
      if (eat(close)) return {};
      if (!eat(',')) return error(std::string("expected ',' or '") + close + "'");
    }
    return {};
  }

  Status dict(PyValue* out, int depth) {
    ++pos_;  // '{'
    out->kind = PyValue::Kind::kDict;
    out->items.clear();
    out->keys.clear();
    while (!eat('}')) {
      skip_space();
      if (pos_ >= n_ || (s_[pos_] != '\'' && s_[pos_] != '"')) return error("expected a string key or '}'");
      PyValue key;
      FLASHSCOPE_RETURN_IF_ERROR(string(&key));
      if (!eat(':')) return error("expected ':' after key '" + excerpt(key.str.data(), key.str.size()) + "'");
      PyValue item;
      FLASHSCOPE_RETURN_IF_ERROR(value(&item, depth + 1));
      for (const std::string& k : out->keys) {
        if (k == key.str) return error("duplicate key '" + excerpt(k.data(), k.size()) + "'");
      }
      out->keys.push_back(std::move(key.str));
      out->items.push_back(std::move(item));
      if (eat('}')) return {};
      if (!eat(',')) return error("expected ',' or '}' in the dict");
    }
    return {};
  }

  const char* s_;
  size_t n_;
  bool allow_long_suffix_;
  size_t pos_ = 0;
};

// --- header semantics ------------------------------------------------------

struct Preamble {
  int major = 0;
  size_t header_offset = 0;  // where the dict text starts: 10 (1.0) or 12 (2.0, 3.0)
  size_t header_len = 0;
};

// `bytes` holds the first `avail` bytes of a file of `total` bytes (avail is at
// least min(total, 12)).
Result<Preamble> decode_preamble(const uint8_t* bytes, size_t avail, uint64_t total) {
  const size_t magic_seen = avail < kMagicLen ? avail : kMagicLen;
  if (magic_seen < kMagicLen || std::memcmp(bytes, kMagic, kMagicLen) != 0) {
    return corrupt("not a .npy file: bad magic (expected \\x93NUMPY, found \"" +
                   excerpt(reinterpret_cast<const char*>(bytes), magic_seen) + "\")");
  }
  if (total < kMagicLen + kVersionLen) return corrupt("truncated .npy file: no format version");
  Preamble p;
  p.major = bytes[kMagicLen];
  const int minor = bytes[kMagicLen + 1];
  if ((p.major != 1 && p.major != 2 && p.major != 3) || minor != 0) {
    return Status(StatusCode::kUnsupported, ".npy format version " + std::to_string(p.major) + "." +
                                                std::to_string(minor) +
                                                " is not supported (1.0, 2.0 and 3.0 are)");
  }
  const size_t len_bytes = p.major == 1 ? 2 : 4;
  p.header_offset = kMagicLen + kVersionLen + len_bytes;
  if (total < p.header_offset) return corrupt("truncated .npy file: no header length");
  const uint8_t* len = bytes + kMagicLen + kVersionLen;
  p.header_len = static_cast<size_t>(len[0]) | static_cast<size_t>(len[1]) << 8;
  if (len_bytes == 4) p.header_len |= static_cast<size_t>(len[2]) << 16 | static_cast<size_t>(len[3]) << 24;
  if (p.header_len > kMaxHeaderBytes) {
    return corrupt("bad .npy header length " + std::to_string(p.header_len) + " (limit " +
                   std::to_string(kMaxHeaderBytes) + ")");
  }
  if (total - p.header_offset < p.header_len) {
    return corrupt("truncated .npy file: header of " + std::to_string(p.header_len) +
                   " bytes, but only " + std::to_string(total - p.header_offset) + " follow");
  }
  return p;
}

// The canonical descr for a supported one; kUnsupported for valid descrs we
// do not handle, naming the supported list.
Result<std::string> canonical_dtype(const std::string& descr) {
  if (npy_dtype_itemsize(descr) != 0) return descr;
  // One-byte types have no byte order; numpy accepts any marker for them.
  if (descr == "<u1" || descr == ">u1" || descr == "=u1") return std::string("|u1");
  if (!descr.empty() && descr[0] == '>') {
    return Status(StatusCode::kUnsupported, "big-endian dtype '" + descr +
                                                "' is not supported; supported: " + kSupportedDtypes);
  }
  return Status(StatusCode::kUnsupported,
                "dtype '" + descr + "' is not supported; supported: " + kSupportedDtypes);
}

// numel and byte count of a shape, or an error when they overflow int64.
Status shape_bytes(const std::vector<int64_t>& shape, size_t itemsize, int64_t* numel, uint64_t* bytes) {
  int64_t n = 1;
  bool has_zero = false;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("negative dimension in shape " + shape_repr(shape));
    if (d == 0) has_zero = true;
  }
  // The nonzero dimensions must multiply without overflow even when a zero
  // makes the count 0: numel() and a caller's strides still multiply them.
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(itemsize ? itemsize : 1);
  for (int64_t d : shape) {
    if (d == 0) continue;
    if (n > limit / d) return invalid_argument("shape " + shape_repr(shape) + " is too large");
    n *= d;
  }
  if (has_zero) n = 0;
  *numel = n;
  *bytes = static_cast<uint64_t>(n) * itemsize;
  return {};
}

struct Header {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t data_bytes = 0;
};

Result<Header> decode_header(const char* text, size_t len, int major) {
  PyValue root;
  FLASHSCOPE_RETURN_IF_ERROR(HeaderParser(text, len, major <= 2).parse(&root));
  if (root.kind != PyValue::Kind::kDict) {
    return corrupt(std::string("bad .npy header: ") + kind_name(root.kind) + ", not a dict: \"" +
                   excerpt(text, len) + "\"");
  }
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& k = root.keys[i];
    if (k == "descr") descr = &root.items[i];
    else if (k == "fortran_order") fortran = &root.items[i];
    else if (k == "shape") shape = &root.items[i];
    else return corrupt("bad .npy header: unexpected key '" + excerpt(k.data(), k.size()) + "'");
  }
  if (!descr || !fortran || !shape) {
    return corrupt("bad .npy header: it needs the keys 'descr', 'fortran_order' and 'shape': \"" +
                   excerpt(text, len) + "\"");
  }

  Header h;
  if (shape->kind != PyValue::Kind::kTuple) {
    return corrupt(std::string("bad .npy header: 'shape' is ") + kind_name(shape->kind) + ", not a tuple");
  }
  for (const PyValue& d : shape->items) {
    if (d.kind != PyValue::Kind::kInt) {
      return corrupt(std::string("bad .npy header: a dimension in 'shape' is ") + kind_name(d.kind));
    }
    h.shape.push_back(d.integer);
  }
  if (fortran->kind != PyValue::Kind::kBool) {
    return corrupt(std::string("bad .npy header: 'fortran_order' is ") + kind_name(fortran->kind) +
                   ", not a bool");
  }
  if (descr->kind == PyValue::Kind::kList) {
    return Status(StatusCode::kUnsupported, std::string("structured dtypes are not supported; supported: ") +
                                                kSupportedDtypes);
  }
  if (descr->kind != PyValue::Kind::kString) {
    return corrupt(std::string("bad .npy header: 'descr' is ") + kind_name(descr->kind) + ", not a string");
  }
  Result<std::string> dtype = canonical_dtype(descr->str);
  if (!dtype.ok()) return dtype.status();
  h.dtype = std::move(dtype).value();

  int64_t numel = 0;
  const Status sized = shape_bytes(h.shape, npy_dtype_itemsize(h.dtype), &numel, &h.data_bytes);
  if (!sized.ok()) return corrupt("bad .npy header: " + sized.message());
  if (h.shape.size() > kMaxRank) {
    return Status(StatusCode::kUnsupported, "rank " + std::to_string(h.shape.size()) +
                                                " is not supported (at most " + std::to_string(kMaxRank) + ")");
  }
  // Fortran and C order lay out the same bytes when at most one dimension is
  // longer than 1; only a real transpose is refused.
  if (fortran->boolean) {
    int long_dims = 0;
    for (int64_t d : h.shape) long_dims += d > 1 ? 1 : 0;
    if (long_dims > 1) {
      return Status(StatusCode::kUnsupported,
                    "fortran_order arrays are not supported (shape " + shape_repr(h.shape) +
                        "); save a C-order array, e.g. numpy.ascontiguousarray(a)");
    }
  }
  return h;
}

Status check_data_size(const Header& h, uint64_t available) {
  if (available == h.data_bytes) return {};
  const std::string what = "shape " + shape_repr(h.shape) + " of '" + h.dtype + "' needs " +
                           std::to_string(h.data_bytes) + " bytes of data, ";
  if (available < h.data_bytes) {
    return corrupt("truncated .npy file: " + what + "only " + std::to_string(available) + " follow the header");
  }
  return corrupt("bad .npy file: " + what + "but " + std::to_string(available) + " follow the header");
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

Status read_npy_file(const std::string& path, NpyArray* out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec) return io_error("cannot open '" + path + "': " + ec.message());
  if (st.type() == fs::file_type::not_found) return io_error("cannot open '" + path + "': no such file");
  if (!fs::is_regular_file(st)) return io_error("cannot read '" + path + "': not a regular file");
  const uint64_t total = fs::file_size(path, ec);
  if (ec) return io_error("cannot read '" + path + "': " + ec.message());

  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return io_error("cannot open '" + path + "': " + std::strerror(errno));
  // Reads exactly n bytes; the file was sized above, so a short read means it
  // shrank underneath us or the device failed.
  auto read_exact = [&](void* dst, size_t n) -> Status {
    if (n == 0 || std::fread(dst, 1, n, f.get()) == n) return {};
    if (std::ferror(f.get())) return io_error("cannot read '" + path + "': " + std::strerror(errno));
    return corrupt("truncated .npy file: '" + path + "' ended early");
  };

  uint8_t prefix[12] = {};
  const size_t prefix_len = total < sizeof prefix ? static_cast<size_t>(total) : sizeof prefix;
  FLASHSCOPE_RETURN_IF_ERROR(read_exact(prefix, prefix_len));
  Result<Preamble> pre = decode_preamble(prefix, prefix_len, total);
  if (!pre.ok()) return pre.status();

  std::string text(pre->header_len, '\0');
  if (std::fseek(f.get(), static_cast<long>(pre->header_offset), SEEK_SET) != 0) {
    return io_error("cannot read '" + path + "': " + std::strerror(errno));
  }
  FLASHSCOPE_RETURN_IF_ERROR(read_exact(text.data(), text.size()));
  Result<Header> header = decode_header(text.data(), text.size(), pre->major);
  if (!header.ok()) return header.status();
  FLASHSCOPE_RETURN_IF_ERROR(check_data_size(header.value(),
                                             total - pre->header_offset - pre->header_len));

  out->dtype = header->dtype;
  out->shape = header->shape;
  out->data.resize(static_cast<size_t>(header->data_bytes));
  return read_exact(out->data.data(), out->data.size());
}

// Prefixes a file error with its path unless the message already names it.
Status with_path(const std::string& path, Status s) {
  if (s.ok() || s.message().find(path) != std::string::npos) return s;
  return {s.code(), path + ": " + s.message()};
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return -1;  // a shape built by hand; a parsed one fits
  }
  return n;
}

size_t npy_dtype_itemsize(const std::string& dtype) {
  if (dtype == "<f4" || dtype == "<i4") return 4;
  if (dtype == "<f8" || dtype == "<i8") return 8;
  if (dtype == "<f2" || dtype == "<u2") return 2;
  if (dtype == "|u1") return 1;
  return 0;
}

Result<NpyArray> read_npy(const std::string& path) {
  NpyArray array;
  try {
    Status s = read_npy_file(path, &array);
    if (!s.ok()) return with_path(path, std::move(s));
  } catch (const std::bad_alloc&) {
    return with_path(path, Status(StatusCode::kOutOfMemory, "not enough host memory for the array"));
  }
  return array;
}

Result<NpyArray> parse_npy(const void* bytes, size_t size) {
  if (bytes == nullptr && size != 0) return invalid_argument("parse_npy: bytes is null");
  const auto* b = static_cast<const uint8_t*>(bytes);
  Result<Preamble> pre = decode_preamble(b, size, size);
  if (!pre.ok()) return pre.status();
  Result<Header> header =
      decode_header(reinterpret_cast<const char*>(b + pre->header_offset), pre->header_len, pre->major);
  if (!header.ok()) return header.status();
  const size_t data_offset = pre->header_offset + pre->header_len;
  FLASHSCOPE_RETURN_IF_ERROR(check_data_size(header.value(), size - data_offset));
  NpyArray array;
  try {
    array.dtype = header->dtype;
    array.shape = header->shape;
    array.data.assign(b + data_offset, b + size);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "not enough host memory for the array");
  }
  return array;
}

Status write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
                 const void* data) {
  const size_t itemsize = npy_dtype_itemsize(dtype);
  if (itemsize == 0) {
    return invalid_argument("write_npy: dtype '" + dtype + "' is not supported; supported: " + kSupportedDtypes);
  }
  if (shape.size() > kMaxRank) {
    return invalid_argument("write_npy: rank " + std::to_string(shape.size()) + " is over the limit of " +
                            std::to_string(kMaxRank));
  }
  int64_t numel = 0;
  uint64_t data_bytes = 0;
  const Status sized = shape_bytes(shape, itemsize, &numel, &data_bytes);
  if (!sized.ok()) return invalid_argument("write_npy: " + sized.message());
  if (data == nullptr && numel != 0) return invalid_argument("write_npy: data is null");

  // Byte for byte numpy.save's header: sorted keys, a trailing ", ", spare
  // spaces for shape[0] to grow, then spaces and '\n' up to a 64-byte boundary.
  std::string header = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
  if (!shape.empty()) header.append(kGrowthAxisMaxDigits - std::to_string(shape[0]).size(), ' ');
  constexpr size_t preamble = kMagicLen + kVersionLen + 2;
  const size_t padding = kArrayAlign - (preamble + header.size() + 1) % kArrayAlign;
  header.append(padding, ' ');
  header += '\n';
  // kMaxRank dimensions of at most 19 digits always fit the 1.0 format's uint16.
  const size_t header_len = header.size();
  const uint8_t pre[preamble] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                 static_cast<uint8_t>(header_len & 0xff), static_cast<uint8_t>(header_len >> 8)};

  File f(std::fopen(path.c_str(), "wb"));
  if (!f) return io_error("cannot create '" + path + "': " + std::strerror(errno));
  errno = 0;
  bool ok = std::fwrite(pre, 1, preamble, f.get()) == preamble &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            (data_bytes == 0 || std::fwrite(data, 1, static_cast<size_t>(data_bytes), f.get()) == data_bytes);
  const int write_errno = errno;
  // fclose flushes: a full disk may only show up here.
  ok = std::fclose(f.release()) == 0 && ok;
  if (!ok) {
    const int err = write_errno != 0 ? write_errno : errno;
    std::remove(path.c_str());
    return io_error("cannot write '" + path + "': " + std::strerror(err));
  }
  return {};
}

Status write_npy(const std::string& path, const NpyArray& array) {
  const size_t itemsize = npy_dtype_itemsize(array.dtype);
  int64_t numel = 0;
  uint64_t bytes = 0;
  if (itemsize != 0 && shape_bytes(array.shape, itemsize, &numel, &bytes).ok() && bytes != array.data.size()) {
    return invalid_argument("write_npy: shape " + shape_repr(array.shape) + " of '" + array.dtype + "' needs " +
                            std::to_string(bytes) + " bytes, the array holds " +
                            std::to_string(array.data.size()));
  }
  return write_npy(path, array.dtype, array.shape, array.data.data());
}

Result<std::vector<float>> npy_as_float(const NpyArray& array) {
  const size_t itemsize = npy_dtype_itemsize(array.dtype);
  const bool is_float = array.dtype == "<f2" || array.dtype == "<f4" || array.dtype == "<f8";
  if (!is_float) {
    return invalid_argument("expected a floating-point array ('<f2', '<f4' or '<f8'), got '" + array.dtype + "'");
  }
  const size_t n = array.data.size() / itemsize;
  if (array.numel() < 0 || static_cast<uint64_t>(array.numel()) != n || n * itemsize != array.data.size()) {
    return invalid_argument("array data holds " + std::to_string(array.data.size()) + " bytes, shape " +
                            shape_repr(array.shape) + " of '" + array.dtype + "' needs " +
                            std::to_string(array.numel()) + " elements");
  }
  std::vector<float> out;
  try {
    out.resize(n);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "not enough host memory to convert the array to float");
  }
  const uint8_t* src = array.data.data();
  if (array.dtype == "<f4") {
    if (n != 0) std::memcpy(out.data(), src, n * sizeof(float));
  } else if (array.dtype == "<f2") {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + i * 2, 2);
      out[i] = fp16_to_float(h);
    }
  } else {
    // Out-of-range double -> float conversion is undefined in C++, so do what
    // IEEE round-to-nearest does: up to half an ulp above FLT_MAX rounds down
    // to it, from there on (the tie included: FLT_MAX is odd) to infinity.
    constexpr double kFloatMax = std::numeric_limits<float>::max();
    const double overflow = kFloatMax + std::ldexp(1.0, 127 - 24);
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + i * 8, 8);
      if (d >= overflow) out[i] = kInf;
      else if (d <= -overflow) out[i] = -kInf;
      else if (d > kFloatMax) out[i] = static_cast<float>(kFloatMax);
      else if (d < -kFloatMax) out[i] = -static_cast<float>(kFloatMax);
      else out[i] = static_cast<float>(d);  // NaN passes through
    }
  }
  return out;
}

}  // namespace flashscope::cli
