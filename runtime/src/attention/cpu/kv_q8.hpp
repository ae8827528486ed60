// The q8_0 KV cache of the CPU engine: K and V rows in blocks of 32 along
// head_dim, each block 32 int8 values and one fp16 scale (what llama.cpp's
// --cache-type-k/-v q8_0 keeps: 34 bytes per 32 elements against 64 in bf16).
//
// Pools are paged like the bf16 cache ([pages, kv_heads, page]), but one
// (page, kv-head) block of P tokens × D dims is laid out for the decode
// kernel (decode_attention.hpp, DecodeParams::kv_q8), values apart from
// their scales:
//   K  uint8 [P/16][D/4][16][4]  k + 128: dims 4g..4g+3 of token i at
//                               ((i/16)·D/4 + g)·64 + (i%16)·4
//      fp16  [D/32][P]    at byte P·D: block c of token i at (c·P + i)·2
//   V  int8  [P/4][D][4]  tokens in quads: dim d of token i at ((i/4)·D + d)·4 + i%4
//      fp16  [D/32][P]    as for K
// Why: 16 consecutive tokens' bytes of 4 dims are one 64-byte line, so a
// vpdpbusd against 4 broadcast q bytes gives 16 keys' partial dots in its 16
// lanes with no horizontal sum, and the 16 tokens' scales of a block are
// one 32-byte load. A 16-token group's K lines are D·16 consecutive bytes,
// as its V rows are, so reading a page is a few sequential streams the
// hardware prefetchers follow (dim groups a page apart were 16 streams a
// head, which they did not). K biased to unsigned is vpdpbusd's u8 operand (q is the
// signed one; the bias comes back as −128·Σq, once per row and block). V's
// quads of tokens meet P in integers: four tokens' int8 of 16 dims are one
// 64-byte line, and vpdpbusd against a broadcast quad of 8-bit P (V's scale
// folded in) adds the four tokens' products in each dim's lane (AVX2 widens
// the line to int16 for pmaddwd, the portable kernel to int32). A 16-token
// group's V is still D·16 consecutive bytes (it starts where row-major rows
// would), its scales apart for the same one-load-per-16-tokens reason. P is a multiple of 16 so no 16-token group
// straddles a page.
//
// Rounding: a block's scale d = fp16(max|x| / 127), x ↦ round(x / d)
// clamped to ±127, so |x − q·d| <= d/2 <= max|x| / 254 (1 + 2^-11).
#pragma once

#include <cstdint>

namespace flashscope::cpu {

constexpr int kKvQ8Block = 32;  // elements per scale

// Bytes of one (page, kv-head) block of page_size tokens (K or V alike).
constexpr int64_t kv_q8_head_bytes(int page_size, int head_dim) {
  return int64_t{page_size} * head_dim + int64_t{page_size} * (head_dim / kKvQ8Block) * 2;
}

// Byte of K's dim d of token `row` in a head block (the layout above).
constexpr int64_t kv_q8_k_offset(int row, int d, int head_dim) {
  return (int64_t{row / 16} * (head_dim / 4) + d / 4) * 64 + (row % 16) * 4 + d % 4;
}

// Byte of V's dim d of token `row` in a head block.
constexpr int64_t kv_q8_v_offset(int row, int d, int head_dim) {
  return (int64_t{row / 4} * head_dim + d) * 4 + row % 4;
}

// Whether a q8_0 cache can hold rows of head_dim (whole blocks of 32).
constexpr bool kv_q8_supported(int head_dim) { return head_dim > 0 && head_dim % kKvQ8Block == 0; }

// Quantizes one token's K and V rows (kv_heads × head_dim floats each, head
// h at h · head_dim) into row `row` (< page_size) of a page: k_page and
// v_page point at the page (kv_heads head blocks of kv_q8_head_bytes).
void kv_q8_store(const float* k, const float* v, int kv_heads, int head_dim, int page_size, uint8_t* k_page,
                 uint8_t* v_page, int row);

// Row `row` of one head block back to float: out [head_dim].
void kv_q8_load_k(const uint8_t* head_block, int head_dim, int page_size, int row, float* out);
void kv_q8_load_v(const uint8_t* head_block, int head_dim, int page_size, int row, float* out);

}  // namespace flashscope::cpu
