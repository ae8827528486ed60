// Quantization of float rows into ggml blocks, for synthetic models and
// tests: Q8_0, Q5_0, Q4_K, Q5_K and Q6_K in llama.cpp's block layouts
// (dequantize.cpp reads them back; the layouts are described there).
//
// The 32-element types follow llama.cpp's reference quantizers
// (quantize_row_q8_0_ref, quantize_row_q5_0_ref) step for step. The
// K-quants take each sub-block's range as it is (min and max, no search):
// llama.cpp's make_qkx2_quants / make_qx_quants search for scales that lower
// the error a little further; the packing is theirs, so llama.cpp reads our
// blocks and we read its.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"

namespace flashscope {
namespace {

constexpr int kQK_K = 256;

void store_fp16(uint8_t* p, float f) {
  const uint16_t h = float_to_fp16(f);
  std::memcpy(p, &h, sizeof h);
}

int nearest_int(float f) { return static_cast<int>(std::lround(f)); }

void quant_q8_0(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_fp16(y, d);
    for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(nearest_int(x[j] * id)));
  }
}

void quant_q5_0(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += 22) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_fp16(y, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int xi0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int xi1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 16.5f)));
      y[6 + j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((xi0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((xi1 & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(y + 2, &qh, 4);
  }
}

// The 8 (scale, min) pairs into the 12 bytes get_scale_min_k4 reads.
void pack_scales_k4(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] = sc[j];
      out[j + 4] = m[j];
    } else {
      out[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      out[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// Q4_K (levels 15) and Q5_K (31): per sub-block of 32 a scale and a min
// (x ≈ d·sc·q − dmin·m), 6 bits each under the block's fp16 d and dmin.
void quant_k_asym(const float* x, uint8_t* y, int64_t blocks, int levels) {
  const int bytes = levels == 15 ? 144 : 176;
  for (int64_t b = 0; b < blocks; ++b, x += kQK_K, y += bytes) {
    float scale[8], min[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float lo = 0.0f, hi = 0.0f;  // the range always holds 0, so min >= 0
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, x[32 * j + l]);
        hi = std::max(hi, x[32 * j + l]);
      }
      scale[j] = (hi - lo) / static_cast<float>(levels);
      min[j] = -lo;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, min[j]);
    }
    const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    store_fp16(y, d);
    store_fp16(y + 2, dmin);
    // The stored scales, read back as the dequantizer will.
    const float d_q = fp16_to_float(float_to_fp16(d)), dmin_q = fp16_to_float(float_to_fp16(dmin));
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(std::clamp(d_q > 0.0f ? nearest_int(scale[j] / d_q) : 0, 0, 63));
      m[j] = static_cast<uint8_t>(std::clamp(dmin_q > 0.0f ? nearest_int(min[j] / dmin_q) : 0, 0, 63));
    }
    pack_scales_k4(sc, m, y + 4);
    uint8_t L[kQK_K];
    for (int j = 0; j < 8; ++j) {
      const float dj = d_q * sc[j], mj = dmin_q * m[j];
      for (int l = 0; l < 32; ++l) {
        const int q = dj > 0.0f ? nearest_int((x[32 * j + l] + mj) / dj) : 0;
        L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, levels));
      }
    }
    uint8_t* qh = levels == 15 ? nullptr : y + 16;
    uint8_t* qs = y + (levels == 15 ? 16 : 48);
    if (qh) std::memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t a = L[64 * c + l], b2 = L[64 * c + 32 + l];
        qs[32 * c + l] = static_cast<uint8_t>((a & 0xF) | ((b2 & 0xF) << 4));
        if (qh) {
          if (a > 15) qh[l] |= static_cast<uint8_t>(1u << (2 * c));
          if (b2 > 15) qh[l] |= static_cast<uint8_t>(1u << (2 * c + 1));
        }
      }
    }
  }
}

// Q6_K: 16 groups of 16 with an int8 scale under the block's fp16 d; q in [-32, 31].
void quant_q6_k(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK_K, y += 210) {
    float scale[16], max_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * g + l]));
      scale[g] = amax / 31.0f;
      max_scale = std::max(max_scale, scale[g]);
    }
    const float d = max_scale / 127.0f;
    store_fp16(y + 208, d);
    const float d_q = fp16_to_float(float_to_fp16(d));
    int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
    uint8_t L[kQK_K];
    for (int g = 0; g < 16; ++g) {
      sc[g] = static_cast<int8_t>(std::clamp(d_q > 0.0f ? nearest_int(scale[g] / d_q) : 0, -128, 127));
      const float dg = d_q * sc[g];
      for (int l = 0; l < 16; ++l) {
        const int q = dg != 0.0f ? nearest_int(x[16 * g + l] / dg) : 0;
        L[16 * g + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = y;
    uint8_t* qh = y + 128;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[64 * h + l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[64 + l] & 0xF) << 4));
        ql[64 * h + 32 + l] = static_cast<uint8_t>((Lh[32 + l] & 0xF) | ((Lh[96 + l] & 0xF) << 4));
        qh[32 * h + l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[32 + l] >> 4) << 2) | ((Lh[64 + l] >> 4) << 4) |
                                              ((Lh[96 + l] >> 4) << 6));
      }
    }
  }
}

}  // namespace

bool ggml_type_can_quantize(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!ggml_type_can_quantize(type)) {
    const char* name = ggml_type_name(type);
    return unsupported(std::string("quantization into ") +
                       (name ? name : "ggml type " + std::to_string(static_cast<uint32_t>(type))) +
                       " is not supported (supported: Q8_0, Q5_0, Q4_K, Q5_K, Q6_K)");
  }
  const int64_t block = ggml_block_size(type);
  if (n < 0 || n % block != 0) {
    return invalid_argument("quantize_row: n = " + std::to_string(n) + " is not a multiple of " +
                            ggml_type_name(type) + "'s block size " + std::to_string(block));
  }
  if (n == 0) return Status::ok_status();
  if (src == nullptr || dst == nullptr) {
    return invalid_argument(std::string("quantize_row: ") + (src ? "dst" : "src") + " is null");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i])) return invalid_argument("quantize_row: element " + std::to_string(i) + " is not finite");
  }
  auto* y = static_cast<uint8_t*>(dst);
  const int64_t blocks = n / block;
  switch (type) {
    case GgmlType::kQ8_0: quant_q8_0(src, y, blocks); break;
    case GgmlType::kQ5_0: quant_q5_0(src, y, blocks); break;
    case GgmlType::kQ4_K: quant_k_asym(src, y, blocks, 15); break;
    case GgmlType::kQ5_K: quant_k_asym(src, y, blocks, 31); break;
    default: quant_q6_k(src, y, blocks); break;
  }
  return Status::ok_status();
}

}  // namespace flashscope
