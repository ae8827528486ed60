// GGUF model files: a memory-mapped, validated reader and the dequantization
// of the ggml tensor types a small Llama-family model uses.
//
// GgufFile::open maps the file read-only and checks everything before any of
// it is used: the header, every metadata string and array length, every
// tensor's type, shape, alignment and byte range. A file that fails a check
// is refused with StatusCode::kCorruptData (kIoError when it cannot be read,
// kUnsupported for a tensor type ggml knows but this reader cannot lay out)
// and a message naming the key, tensor or byte offset at fault. After a
// successful open every accessor is bounds-safe by construction, and the
// const accessors may be called from several threads at once.
//
// Layout facts (little-endian): "GGUF", u32 version (2 or 3), u64
// tensor_count, u64 kv_count, kv pairs, tensor infos, padding to
// general.alignment (default 32), then the data section. Tensor offsets are
// relative to the data section. ne[0] is the contiguous (innermost) dimension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope {

// ggml tensor type ids as stored in GGUF files. Gaps are ids ggml removed;
// a value outside this list may still be held (and is reported by number).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

// "Q4_K", "BF16", ...; "Q4_0_4_4 (removed)" for ids ggml dropped; nullptr for
// ids ggml never assigned.
const char* ggml_type_name(GgmlType type);
// Elements per block (1 for plain types) and bytes per block; 0 when the
// layout is unknown (unassigned or removed ids).
int64_t ggml_block_size(GgmlType type);
int64_t ggml_type_size(GgmlType type);
// True for the types dequantize_row handles: F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool ggml_type_can_dequantize(GgmlType type);

// Converts n consecutive elements of `type` at src (n / block_size blocks)
// into floats, with the same arithmetic as llama.cpp's dequantize_row_*.
// n must be a multiple of the type's block size. kUnsupported names the type
// for anything ggml_type_can_dequantize rejects; nothing is written then.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// True for the types quantize_row writes: Q8_0, Q5_0, Q4_K, Q5_K, Q6_K.
bool ggml_type_can_quantize(GgmlType type);
// Quantizes n finite floats (n / block_size blocks) into `type`'s blocks at
// dst, in llama.cpp's layouts (dequantize_row reads them back). Q8_0 and
// Q5_0 as llama.cpp's reference quantizers; the K-quants from each
// sub-block's range. kUnsupported for other types, kInvalidArgument for n
// not whole blocks, null pointers or a non-finite value (nothing written).
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

// GGUF metadata value types.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u32", "string", ...; nullptr for ids outside the list.
const char* gguf_value_type_name(GgufValueType type);

// One metadata entry. For arrays, elem_type and count describe the elements
// (count is 1 and elem_type == type for scalars).
struct GgufKeyInfo {
  std::string key;
  GgufValueType type = GgufValueType::kU8;
  GgufValueType elem_type = GgufValueType::kU8;
  uint64_t count = 0;
};

// One tensor of the file. data points into the mapping and stays valid as
// long as the GgufFile that produced it lives (moves included).
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] innermost; unused dims are 1
  uint64_t offset = 0;           // bytes from the start of the data section
  uint64_t size = 0;             // bytes
  const uint8_t* data = nullptr;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes of one row of ne[0] elements.
  uint64_t row_size() const;
};

// Dequantizes rows [row_begin, row_begin + row_count) of a tensor (a row is
// ne[0] elements) into dst, which holds row_count * ne[0] floats. Used for
// embedding lookups and for expanding weights at load time.
Status dequantize_rows(const GgufTensor& tensor, int64_t row_begin, int64_t row_count, float* dst);

// kCorruptData naming the tensor and the row and column of its first NaN or
// infinite weight. F32, F16 and BF16 are read whole; for the block types the
// engine runs (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) only the block
// scales, which is enough: the quants are small integers. Other types pass
// unchecked.
Status check_tensor_finite(const GgufTensor& tensor);

class GgufFile {
 public:
  // Maps `path` read-only and validates it. kIoError when the file cannot be
  // opened or mapped; kCorruptData / kUnsupported when its contents fail.
  static Result<GgufFile> open(const std::string& path);
  // Parses a caller-owned buffer, which must outlive the returned object.
  static Result<GgufFile> from_memory(const void* data, size_t size);
  // Parses a buffer the GgufFile takes over (tests, synthetic models).
  static Result<GgufFile> from_buffer(std::vector<uint8_t> bytes);

  // An empty file: no keys, no tensors. Exists for Result<GgufFile>.
  GgufFile();
  ~GgufFile();
  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t file_size() const;
  uint64_t data_offset() const;  // where the data section starts in the file
  const std::string& path() const;  // empty for in-memory files

  // --- metadata -------------------------------------------------------------
  // Missing keys and type mismatches are kCorruptData naming the key and
  // the type found, so a loader can pass them straight up. Use has_key for
  // optional keys.
  const std::vector<GgufKeyInfo>& keys() const;
  bool has_key(const std::string& key) const;
  Result<GgufKeyInfo> key_info(const std::string& key) const;

  // Any integer type (u8..u64, i8..i64); u64 above INT64_MAX is an error.
  Result<int64_t> get_int(const std::string& key) const;
  // f32 or f64; integers are converted too.
  Result<double> get_float(const std::string& key) const;
  Result<bool> get_bool(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  // Arrays: the element type must match (any integer type for int arrays,
  // f32/f64 for float arrays).
  Result<std::vector<std::string>> get_string_array(const std::string& key) const;
  Result<std::vector<int64_t>> get_int_array(const std::string& key) const;
  Result<std::vector<float>> get_float_array(const std::string& key) const;
  // A readable rendering of any value, arrays cut after max_elems elements:
  // for `flashscope-cli info` and error reports.
  Result<std::string> format_value(const std::string& key, size_t max_elems = 8) const;

  // --- tensors --------------------------------------------------------------
  const std::vector<GgufTensor>& tensors() const;
  // nullptr when absent.
  const GgufTensor* find_tensor(const std::string& name) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  static Result<GgufFile> parse(std::unique_ptr<Impl> impl);
  const Impl& impl() const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace flashscope
