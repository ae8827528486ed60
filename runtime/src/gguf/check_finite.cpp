// check_tensor_finite() (gguf.hpp) and the load-time check of a model's
// weights (check_finite.hpp).
//
// A weight that is NaN or infinite loads and runs, and every token after it
// is garbage; the check names the tensor instead. For block-quantized types
// only the block scales are read: the quants are small integers, so a block
// with finite scales dequantizes to finite values.
#include "gguf/check_finite.hpp"

#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include "flashscope/untrusted.hpp"

namespace flashscope {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool f16_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }
bool bf16_finite(uint16_t h) { return (h & 0x7f80u) != 0x7f80u; }

// Where a block's f16 scales lie: byte offsets inside the block (ggml's
// block_q4_0 ... block_q6_K). count 0: a type this check does not know.
struct ScaleLayout {
  int count;
  int offset[2];
};

ScaleLayout scale_layout(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0: return {1, {0, 0}};    // d first
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: return {2, {0, 2}};    // d, then m / dmin
    case GgmlType::kQ6_K: return {1, {208, 0}};  // ql[128] qh[64] scales[16], then d
    case GgmlType::kQ2_K: return {2, {80, 82}};  // scales[16] qs[64], then d, dmin
    case GgmlType::kQ3_K: return {1, {108, 0}};  // hmask[32] qs[64] scales[12], then d
    default: return {0, {0, 0}};
  }
}

Status non_finite(const GgufTensor& t, uint64_t element) {
  const uint64_t row_len = t.ne[0] > 0 ? static_cast<uint64_t>(t.ne[0]) : 1;
  return {StatusCode::kCorruptData,
          "tensor " + printable(t.name) + " has a NaN or infinite weight (row " + std::to_string(element / row_len) +
              ", column " + std::to_string(element % row_len) +
              "); the model would generate garbage (ModelOptions::check_weights = kNever skips this check)"};
}

}  // namespace

Status check_tensor_finite(const GgufTensor& t) {
  if (t.data == nullptr || t.size == 0) return Status::ok_status();
  const auto* p = static_cast<const uint8_t*>(t.data);
  switch (t.type) {
    case GgmlType::kF32: {
      const uint64_t n = t.size / 4;
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, p + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return non_finite(t, i);
      }
      return Status::ok_status();
    }
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const bool f16 = t.type == GgmlType::kF16;
      const uint64_t n = t.size / 2;
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = load_u16(p + 2 * i);
        if (f16 ? !f16_finite(h) : !bf16_finite(h)) return non_finite(t, i);
      }
      return Status::ok_status();
    }
    default: break;
  }
  const ScaleLayout layout = scale_layout(t.type);
  const auto block_bytes = static_cast<uint64_t>(ggml_type_size(t.type));
  const auto block_elems = static_cast<uint64_t>(ggml_block_size(t.type));
  if (layout.count == 0 || block_bytes == 0) return Status::ok_status();  // not a type the engine runs
  const uint64_t blocks = t.size / block_bytes;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = p + b * block_bytes;
    for (int s = 0; s < layout.count; ++s) {
      if (!f16_finite(load_u16(block + layout.offset[s]))) return non_finite(t, b * block_elems);
    }
  }
  return Status::ok_status();
}

namespace model {

Status check_weights_finite(const GgufFile& file, WeightCheck when) {
  if (when == WeightCheck::kNever) return Status::ok_status();
  // A file is "seen" once this process has checked it: same path, size and
  // modification time. Memory images (no path) are checked every time.
  static std::mutex mutex;
  static std::set<std::string> checked;
  std::string key;
  if (when == WeightCheck::kNewFiles && !file.path().empty()) {
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(file.path(), ec);
    if (!ec) {
      key = file.path() + '\n' + std::to_string(file.file_size()) + '\n' +
            std::to_string(mtime.time_since_epoch().count());
      std::lock_guard<std::mutex> lock(mutex);
      if (checked.count(key)) return Status::ok_status();
    }
  }
  for (const GgufTensor& t : file.tensors()) FLASHSCOPE_RETURN_IF_ERROR(check_tensor_finite(t));
  if (!key.empty()) {
    std::lock_guard<std::mutex> lock(mutex);
    checked.insert(key);
  }
  return Status::ok_status();
}

}  // namespace model
}  // namespace flashscope
