// Dequantization of ggml block types to float, one row at a time.
//
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K, the types the GPU also
// keeps in their blocks, decode through kernels/quant/quant_blocks.h: one
// reader of those layouts for host and device (its header has the layouts),
// whose floats are llama.cpp's dequantize_row_* (ggml-quants.c) bit for bit
// (tests/test_quant_blocks.cpp holds it to llama.cpp's loops written out,
// test_dequant.cpp to hand-worked values). Q2_K and Q3_K, which only the
// CPU reads, follow llama.cpp step for step below, including the order of
// the float operations, so a value we produce is the value llama.cpp
// produces on a build without FMA contraction. Blocks are read byte by byte
// (memcpy for the fp16 fields): a block inside a GGUF file has no alignment
// beyond the file's.
//
//   Q2_K 84, Q3_K 110: at their functions below.

#include <cstdint>
#include <cstring>
#include <string>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "kernels/quant/quant_blocks.h"

namespace flashscope {
namespace {

constexpr int kQK_K = 256;  // elements per K-quant super-block

inline float load_fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_float(h);
}

void dequant_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(src + 2 * i);
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = bf16_to_float(h);
  }
}

// The block types the GPU also reads in place go through quant_blocks.h's
// part reader, the one decoder of these layouts that host and device share:
// a step's four parts (groups, or a K-quant's groups that share their
// bytes), each loaded once and decoded group by group into group_value's
// floats, which are llama.cpp's (quant_blocks.h says why, test_quant_blocks
// holds them against llama.cpp's loops written out).
template <int T>
void dequant_parts(const uint8_t* src, float* dst, int64_t n_blocks) {
  namespace q = kernels::quant;
  const int64_t groups = n_blocks * q::block_elems(T) / q::kGroup;
  const int64_t step_bytes = int64_t{q::block_bytes(T)} * (q::block_elems(T) == kQK_K ? 1 : 4);
  for (int64_t first = 0; first < groups; first += q::step_groups(T), src += step_bytes) {
    for (int part = 0; part < 4; ++part) {
      if (first + q::part_group(T, 0, part, 0) >= groups) continue;  // a last step of fewer than 4 blocks
      q::PartBytes b{};
      q::load_part<T>(src, 0, part, b);
      for (int sub = 0; sub < q::part_groups(T); ++sub) {
        float qv[q::kGroup];
        const q::GroupScales sc = q::decode_part<T>(b, part, sub, qv);
        float* out = dst + (first + q::part_group(T, 0, part, sub)) * q::kGroup;
        for (int i = 0; i < q::kGroup; ++i) out[i] = q::group_value(sc, i, qv[i]);
      }
    }
  }
}

// Q2_K 84: scales[16], qs[64], d, dmin. 16 groups of 16 elements; group g's
// byte scales[g] holds a 4-bit scale (low) and a 4-bit min (high):
// x = (d * sc) * q - (dmin * m) with q 2 bits. Two halves of 128 elements,
// each over 32 bytes of qs: element l + 32k of a half (k = 0..3) is bits
// 2k..2k+1 of qs[l]; groups run in element order.
void dequant_q2_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 84;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const uint8_t* scales = src;
    const uint8_t* q = src + 16;
    const float d = load_fp16(src + 80);
    const float min = load_fp16(src + 82);
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = scales[is++];
        float dl = d * (sc & 0xF);
        float ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
        sc = scales[is++];
        dl = d * (sc & 0xF);
        ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

// Q3_K 110: hmask[32], qs[64], scales[12], d. 16 groups of 16 with a signed
// 6-bit scale (stored + 32): the low 4 bits of scale g are the low (g < 8)
// or high (g >= 8) nibble of scales[g % 8], the top 2 bits are bits
// 2(g / 4)..+1 of scales[8 + g % 4]. The low 2 bits of element l + 32k of a
// half come from qs as in Q2_K; its third bit is bit (4h + k) of hmask[l]
// (h the half), and a clear bit subtracts 4: x = d * (sc - 32) * (q - 4·!hbit).
void dequant_q3_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 110;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const uint8_t* hm = src;
    const uint8_t* q = src + 32;
    const uint8_t* packed = src + 96;
    const float d_all = load_fp16(src + 108);
    int8_t scales[16];
    for (int g = 0; g < 16; ++g) {
      const int low = g < 8 ? (packed[g] & 0xF) : (packed[g - 8] >> 4);
      const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
      scales[g] = static_cast<int8_t>((low | (high << 4)) - 32);
    }
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l)
          *dst++ = dl * static_cast<int8_t>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l)
          *dst++ = dl * static_cast<int8_t>(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

}  // namespace

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  if (!ggml_type_can_dequantize(type)) {
    const char* name = ggml_type_name(type);
    return unsupported(std::string("dequantization of ") +
                       (name ? name : "ggml type " + std::to_string(static_cast<uint32_t>(type))) +
                       " is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                       "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
  }
  const int64_t block = ggml_block_size(type);
  if (n < 0 || n % block != 0) {
    return invalid_argument("dequantize_row: n = " + std::to_string(n) + " is not a multiple of " +
                            ggml_type_name(type) + "'s block size " + std::to_string(block));
  }
  if (n == 0) return Status::ok_status();
  if (src == nullptr || dst == nullptr) {
    return invalid_argument(std::string("dequantize_row: ") + (src ? "dst" : "src") + " is null");
  }
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t n_blocks = n / block;
  switch (type) {
    case GgmlType::kF32: dequant_f32(s, dst, n); break;
    case GgmlType::kF16: dequant_f16(s, dst, n); break;
    case GgmlType::kBF16: dequant_bf16(s, dst, n); break;
    case GgmlType::kQ4_0: dequant_parts<kernels::quant::kQ4_0>(s, dst, n_blocks); break;
    case GgmlType::kQ4_1: dequant_parts<kernels::quant::kQ4_1>(s, dst, n_blocks); break;
    case GgmlType::kQ5_0: dequant_parts<kernels::quant::kQ5_0>(s, dst, n_blocks); break;
    case GgmlType::kQ5_1: dequant_parts<kernels::quant::kQ5_1>(s, dst, n_blocks); break;
    case GgmlType::kQ8_0: dequant_parts<kernels::quant::kQ8_0>(s, dst, n_blocks); break;
    case GgmlType::kQ4_K: dequant_parts<kernels::quant::kQ4_K>(s, dst, n_blocks); break;
    case GgmlType::kQ6_K: dequant_parts<kernels::quant::kQ6_K>(s, dst, n_blocks); break;
    case GgmlType::kQ2_K: dequant_q2_k(s, dst, n_blocks); break;
    case GgmlType::kQ3_K: dequant_q3_k(s, dst, n_blocks); break;
    case GgmlType::kQ5_K: dequant_parts<kernels::quant::kQ5_K>(s, dst, n_blocks); break;
    default:  // unreachable: ggml_type_can_dequantize and this switch list the same types
      return unsupported(std::string("dequantization of ") + ggml_type_name(type) + " is not supported");
  }
  return Status::ok_status();
}

Status dequantize_rows(const GgufTensor& tensor, int64_t row_begin, int64_t row_count, float* dst) {
  const int64_t n_rows = tensor.n_rows();
  if (row_begin < 0 || row_count < 0 || row_begin > n_rows || row_count > n_rows - row_begin) {
    return invalid_argument("dequantize_rows: rows [" + std::to_string(row_begin) + ", +" +
                            std::to_string(row_count) + ") are outside tensor '" + tensor.name +
                            "' with " + std::to_string(n_rows) + " rows");
  }
  if (row_count == 0) return Status::ok_status();
  if (tensor.data == nullptr) return invalid_argument("dequantize_rows: tensor '" + tensor.name + "' has no data");
  const uint64_t row_bytes = tensor.row_size();
  // Rows are contiguous, so a run of rows is one long row of the same type.
  Status s = dequantize_row(tensor.type, tensor.data + static_cast<uint64_t>(row_begin) * row_bytes, dst,
                            row_count * tensor.ne[0]);
  if (!s.ok()) return Status(s.code(), "tensor '" + tensor.name + "': " + s.message());
  return s;
}

uint64_t GgufTensor::row_size() const {
  const int64_t block = ggml_block_size(type);
  if (block <= 0) return 0;
  return static_cast<uint64_t>(ne[0] / block) * static_cast<uint64_t>(ggml_type_size(type));
}

}  // namespace flashscope
