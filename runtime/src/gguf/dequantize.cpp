// Dequantization of ggml block types to float, one row at a time.
//
// Each function follows llama.cpp's dequantize_row_* (ggml-quants.c) step
// for step, including the order of the float operations, so a value we
// produce is the value llama.cpp produces on a build without FMA
// contraction. Blocks are read byte by byte (memcpy for the fp16 fields):
// a block inside a GGUF file has no alignment beyond the file's, and Q4_1's
// 20-byte blocks put fp16 fields at any even offset.
//
// Block layouts (bytes; "d", "m", "dmin" are fp16):
//   Q4_0  18: d, qs[16]            x = (nibble - 8) * d
//   Q4_1  20: d, m, qs[16]         x = nibble * d + m
//   Q5_0  22: d, qh[4], qs[16]     x = ((nibble | hibit << 4) - 16) * d
//   Q5_1  24: d, m, qh[4], qs[16]  x = (nibble | hibit << 4) * d + m
//   Q8_0  34: d, int8 qs[32]       x = q * d
// In the 32-element types, byte j's low nibble is element j and its high
// nibble element j + 16; qh is a little-endian u32 whose bit j is element
// j's fifth bit.
//   Q4_K 144: d, dmin, scales[12], qs[128]: 8 sub-blocks of 32 with 6-bit
//             scale sc and min m each; x = (d * sc) * q - (dmin * m).
//   Q5_K 176: d, dmin, scales[12], qh[32], qs[128]: Q4_K's sub-blocks with
//             a fifth bit per element (bit j of qh[l] for sub-block j).
//   Q6_K 210: ql[128], qh[64], int8 scales[16], d: 16 groups of 16 with an
//             8-bit signed scale; x = (d * scale) * (q6 - 32).
#include <cstdint>
#include <cstring>
#include <string>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"

namespace flashscope {
namespace {

constexpr int kQK32 = 32;   // elements per block of the 32-element types
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

void dequant_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 18;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      dst[j] = x0 * d;
      dst[j + kQK32 / 2] = x1 * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 20;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int x0 = qs[j] & 0x0F;
      const int x1 = qs[j] >> 4;
      dst[j] = x0 * d + m;
      dst[j + kQK32 / 2] = x1 * d + m;
    }
  }
}

void dequant_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 22;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const uint32_t qh = uint32_t{src[2]} | uint32_t{src[3]} << 8 | uint32_t{src[4]} << 16 |
                        uint32_t{src[5]} << 24;
    const uint8_t* qs = src + 6;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const uint8_t xh_0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
      const uint8_t xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
      dst[j] = x0 * d;
      dst[j + kQK32 / 2] = x1 * d;
    }
  }
}

void dequant_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 24;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint32_t qh = uint32_t{src[4]} | uint32_t{src[5]} << 8 | uint32_t{src[6]} << 16 |
                        uint32_t{src[7]} << 24;
    const uint8_t* qs = src + 8;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const uint8_t xh_0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
      const uint8_t xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (qs[j] & 0x0F) | xh_0;
      const int x1 = (qs[j] >> 4) | xh_1;
      dst[j] = x0 * d + m;
      dst[j + kQK32 / 2] = x1 * d + m;
    }
  }
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 34;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes, dst += kQK32) {
    const float d = load_fp16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQK32; ++j) dst[j] = qs[j] * d;
  }
}

// The 8 (scale, min) pairs of a Q4_K block, 6 bits each, in 12 bytes:
//   j < 4:  sc = q[j] & 63,                        m = q[j+4] & 63
//   j >= 4: sc = (q[j+4] & 0xF) | (q[j-4] >> 6) << 4,  m = (q[j+4] >> 4) | (q[j] >> 6) << 4
// i.e. bytes 0..3 hold sc0..3 plus the top two bits of sc4..7, bytes 4..7
// hold m0..3 plus the top bits of m4..7, bytes 8..11 the low nibbles of
// sc4..7 (low half) and m4..7 (high half).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// Q4_K: 256 elements as 4 chunks of 64; chunk c uses 32 bytes of qs, the low
// nibbles for sub-block 2c (elements 0..31), the high nibbles for 2c+1.
void dequant_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 144;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const float d = load_fp16(src);
    const float min = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc;
      uint8_t m;
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// Q5_K: Q4_K's chunks of 64, the fifth bits of chunk c's two sub-blocks
// in bits 2c and 2c + 1 of qh[l].
void dequant_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 176;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const float d = load_fp16(src);
    const float min = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* ql = src + 48;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc;
      uint8_t m;
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

// Q6_K: two halves of 128 elements; each half uses 64 bytes of ql, 32 of qh
// and 8 scales. Element l + 32k of a half (k = 0..3, l = 0..31) takes its
// low 4 bits from ql[l + 32(k&1)] (low nibble for k < 2, high for k >= 2)
// and its top 2 bits from qh[l] >> 2k; its scale is sc[l/16 + 2k].
void dequant_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int kBytes = 210;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_fp16(src + 208);
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = d * sc[is + 0] * q1;
        dst[l + 32] = d * sc[is + 2] * q2;
        dst[l + 64] = d * sc[is + 4] * q3;
        dst[l + 96] = d * sc[is + 6] * q4;
      }
      dst += 128;
      ql += 64;
      qh += 32;
      sc += 8;
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
                       "Q5_1, Q4_K, Q5_K, Q6_K)");
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
    case GgmlType::kQ4_0: dequant_q4_0(s, dst, n_blocks); break;
    case GgmlType::kQ4_1: dequant_q4_1(s, dst, n_blocks); break;
    case GgmlType::kQ5_0: dequant_q5_0(s, dst, n_blocks); break;
    case GgmlType::kQ5_1: dequant_q5_1(s, dst, n_blocks); break;
    case GgmlType::kQ8_0: dequant_q8_0(s, dst, n_blocks); break;
    case GgmlType::kQ4_K: dequant_q4_k(s, dst, n_blocks); break;
    case GgmlType::kQ5_K: dequant_q5_k(s, dst, n_blocks); break;
    case GgmlType::kQ6_K: dequant_q6_k(s, dst, n_blocks); break;
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
