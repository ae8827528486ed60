// q8_0 KV rows in and out (layout: kv_q8.hpp).
#include "attention/cpu/kv_q8.hpp"

#include "attention/cpu/kv_block_scale.hpp"

#include <algorithm>
#include <cmath>

#include "flashscope/half.hpp"

namespace flashscope::cpu {
namespace {

// Block c of a row: its scale, and the 32 values quantized against it (zeros under a NaN scale).
float quantize_block(const float* x, int8_t* q) {
  const float d = kv_block_scale(x, kKvQ8Block, 127.0f);
  if (std::isnan(d)) {
    std::fill(q, q + kKvQ8Block, int8_t{0});
    return d;
  }
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kKvQ8Block; ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
  return d;
}

uint16_t* scales(uint8_t* head_block, int head_dim, int page_size) {
  return reinterpret_cast<uint16_t*>(head_block + int64_t{page_size} * head_dim);
}
const uint16_t* scales(const uint8_t* head_block, int head_dim, int page_size) {
  return reinterpret_cast<const uint16_t*>(head_block + int64_t{page_size} * head_dim);
}

}  // namespace

void kv_q8_store(const float* k, const float* v, int kv_heads, int head_dim, int page_size, uint8_t* k_page,
                 uint8_t* v_page, int row) {
  const int64_t head_bytes = kv_q8_head_bytes(page_size, head_dim);
  int8_t q[kKvQ8Block];
  for (int h = 0; h < kv_heads; ++h) {
    uint8_t* kb = k_page + h * head_bytes;
    uint8_t* vb = v_page + h * head_bytes;
    const float* kr = k + int64_t{h} * head_dim;
    const float* vr = v + int64_t{h} * head_dim;
    for (int c = 0; c < head_dim / kKvQ8Block; ++c) {
      const float dk = quantize_block(kr + c * kKvQ8Block, q);
      scales(kb, head_dim, page_size)[int64_t{c} * page_size + row] = float_to_fp16(dk);
      for (int i = 0; i < kKvQ8Block; ++i) {
        const int d = c * kKvQ8Block + i;
        kb[kv_q8_k_offset(row, d, head_dim)] = static_cast<uint8_t>(q[i] + 128);
      }
      const float dv = quantize_block(vr + c * kKvQ8Block, q);
      scales(vb, head_dim, page_size)[int64_t{c} * page_size + row] = float_to_fp16(dv);
      for (int i = 0; i < kKvQ8Block; ++i)
        reinterpret_cast<int8_t*>(vb)[kv_q8_v_offset(row, c * kKvQ8Block + i, head_dim)] = q[i];
    }
  }
}

void kv_q8_load_k(const uint8_t* head_block, int head_dim, int page_size, int row, float* out) {
  const uint16_t* s = scales(head_block, head_dim, page_size);
  for (int d = 0; d < head_dim; ++d) {
    const int q = int{head_block[kv_q8_k_offset(row, d, head_dim)]} - 128;
    out[d] = static_cast<float>(q) * fp16_to_float(s[int64_t{d / kKvQ8Block} * page_size + row]);
  }
}

void kv_q8_load_v(const uint8_t* head_block, int head_dim, int page_size, int row, float* out) {
  const uint16_t* s = scales(head_block, head_dim, page_size);
  const auto* q = reinterpret_cast<const int8_t*>(head_block);
  for (int d = 0; d < head_dim; ++d)
    out[d] = static_cast<float>(q[kv_q8_v_offset(row, d, head_dim)]) *
             fp16_to_float(s[int64_t{d / kKvQ8Block} * page_size + row]);
}

}  // namespace flashscope::cpu
