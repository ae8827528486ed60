// q4_0 KV rows in and out (layout: kv_q4.hpp).
#include "attention/cpu/kv_q4.hpp"

#include "attention/cpu/kv_block_scale.hpp"

#include <algorithm>
#include <cmath>

#include "flashscope/half.hpp"

namespace flashscope::cpu {
namespace {

// Block of 32: its scale, and the codes 0..15 against it (zeros, code 8, under a NaN scale).
float quantize_block(const float* x, uint8_t* code) {
  const float d = kv_block_scale(x, kKvQ4Block, kKvQ4Steps);
  if (std::isnan(d)) {
    std::fill(code, code + kKvQ4Block, uint8_t{8});
    return d;
  }
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kKvQ4Block; ++i)
    code[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(x[i] * inv) + 8.0f, 0.0f, 15.0f));
  return d;
}

uint16_t* scales(uint8_t* head_block, int head_dim, int page_size) {
  return reinterpret_cast<uint16_t*>(head_block + int64_t{page_size} * head_dim / 2);
}
const uint16_t* scales(const uint8_t* head_block, int head_dim, int page_size) {
  return reinterpret_cast<const uint16_t*>(head_block + int64_t{page_size} * head_dim / 2);
}

void put(uint8_t* byte, bool high, uint8_t code) {
  *byte = high ? static_cast<uint8_t>((*byte & 0x0F) | code << 4) : static_cast<uint8_t>((*byte & 0xF0) | code);
}
int get(uint8_t byte, bool high) { return high ? byte >> 4 : byte & 0x0F; }

}  // namespace

void kv_q4_rotate(float* x) {
  // Sylvester's order: five stages of butterflies, then 1/√32.
  for (int len = 1; len < kKvQ4Block; len *= 2)
    for (int i = 0; i < kKvQ4Block; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  constexpr float kNorm = 0.17677669529663688f;  // 1/√32
  for (int j = 0; j < kKvQ4Block; ++j) x[j] *= kNorm;
}

void kv_q4_store(const float* k, const float* v, int kv_heads, int head_dim, int page_size, uint8_t* k_page,
                 uint8_t* v_page, int row) {
  const int64_t head_bytes = kv_q4_head_bytes(page_size, head_dim);
  uint8_t code[kKvQ4Block];
  for (int h = 0; h < kv_heads; ++h) {
    uint8_t* kb = k_page + h * head_bytes;
    uint8_t* vb = v_page + h * head_bytes;
    const float* kr = k + int64_t{h} * head_dim;
    const float* vr = v + int64_t{h} * head_dim;
    for (int c = 0; c < head_dim / kKvQ4Block; ++c) {
      float rotated[kKvQ4Block];
      std::copy(kr + c * kKvQ4Block, kr + (c + 1) * kKvQ4Block, rotated);
      kv_q4_rotate(rotated);
      const float dk = quantize_block(rotated, code);
      scales(kb, head_dim, page_size)[int64_t{c} * page_size + row] = float_to_fp16(dk);
      for (int i = 0; i < kKvQ4Block; ++i) {
        const int d = c * kKvQ4Block + i;
        put(kb + kv_q4_k_offset(row, d, head_dim), kv_q4_k_high(d), code[i]);
      }
      const float dv = quantize_block(vr + c * kKvQ4Block, code);
      scales(vb, head_dim, page_size)[int64_t{c} * page_size + row] = float_to_fp16(dv);
      for (int i = 0; i < kKvQ4Block; ++i) {
        const int d = c * kKvQ4Block + i;
        put(vb + kv_q4_v_offset(row, d, head_dim), kv_q4_v_high(d), code[i]);
      }
    }
  }
}

void kv_q4_load_k(const uint8_t* head_block, int head_dim, int page_size, int row, float* out) {
  const uint16_t* s = scales(head_block, head_dim, page_size);
  for (int d = 0; d < head_dim; ++d) {
    const int q = get(head_block[kv_q4_k_offset(row, d, head_dim)], kv_q4_k_high(d)) - 8;
    out[d] = static_cast<float>(q) * fp16_to_float(s[int64_t{d / kKvQ4Block} * page_size + row]);
  }
  for (int c = 0; c < head_dim / kKvQ4Block; ++c) kv_q4_rotate(out + c * kKvQ4Block);
}

void kv_q4_load_v(const uint8_t* head_block, int head_dim, int page_size, int row, float* out) {
  const uint16_t* s = scales(head_block, head_dim, page_size);
  for (int d = 0; d < head_dim; ++d) {
    const int q = get(head_block[kv_q4_v_offset(row, d, head_dim)], kv_q4_v_high(d)) - 8;
    out[d] = static_cast<float>(q) * fp16_to_float(s[int64_t{d / kKvQ4Block} * page_size + row]);
  }
}

}  // namespace flashscope::cpu
