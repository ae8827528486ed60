// The q4_0 KV cache of the CPU engine: K and V rows in blocks of 32 along
// head_dim, each block 32 four-bit codes and one fp16 scale (llama.cpp's
// --cache-type-k/-v q4_0's blocks: x ≈ d · (code − 8), 18 bytes per 32 elements
// against 34 in q8_0 and 64 in bf16). For long contexts on a machine whose
// decode step is bound by the bytes it reads: at 4096 keys SmolLM2's q8_0
// cache is half again its weights' bytes a token, this one a quarter.
//
// K is kept rotated: each 32-dim block of a K row is multiplied by the
// orthonormal Walsh-Hadamard matrix H (32 × 32, symmetric, H·H = I) before
// it is quantized, and the decode kernel rotates q's blocks the same way, so
// (Hq)·(Hk) = q·k. Keys have channels far larger than the rest; at 4 bits
// such a channel sets its block's step and the others round to a few
// levels. H spreads it over the block; V, which gains little from it, is
// stored as it is (SmolLM2's agreement with the bf16 cache: bench/TUNING.md#cpu).
//
// The layout is kv_q8.hpp's with two codes a byte, chosen so that splitting
// a 64-byte line into its low and high nibbles gives two of kv_q8.hpp's
// lines (the decode kernel splits them in its registers, or unpacks a
// 16-key group into that layout in L1 and runs the q8_0 kernels on it:
// decode_attention_q8.inc). Per (page, kv-head) block of P tokens × D dims:
//   K  [P/16][D/8][16][4]  token i's byte 4·(i%16) + e of line (i/16, g):
//                          low nibble dim 8g + e, high nibble dim 8g + 4 + e
//      fp16 [D/32][P]      at byte P·D/2: block c of token i at (c·P + i)·2
//   V  [P/4][D/32][16][4]  token i's byte 4·e + i%4 of line (i/4, c):
//                          low nibble dim 32c + e, high nibble dim 32c + 16 + e
//      fp16 [D/32][P]      as for K
// A 16-token group's K and V are each 8·D consecutive bytes.
//
// Rounding (of K's rotated blocks, V's as they are): d = fp16(max|x| / 7.5),
// code = clamp(round(x / d) + 8, 0, 15), so x / d in [−7.5, 7.5] rounds to
// −8..8 and only 8 (x within half a step of +max) is clamped, to 7:
// |x − d·(code − 8)| <= max|x| / 15 · (1 + 2^-7) for every element (d/2, or
// at the clamp max − 7d with d rounded down). llama.cpp's q4_0 signs d
// (m / −8, m the element of largest magnitude), which holds m exactly but is
// off by up to |d| at the other end; the kernels here need d >= 0 (V's scale
// is folded into P, rounded to unsigned steps: decode_attention_q8.inc).
#pragma once

#include <cstdint>

namespace flashscope::cpu {

constexpr int kKvQ4Block = 32;  // elements per scale
constexpr float kKvQ4Steps = 7.5f;  // max|x| / d (see the top)

// Bytes of one (page, kv-head) block of page_size tokens (K or V alike).
constexpr int64_t kv_q4_head_bytes(int page_size, int head_dim) {
  return int64_t{page_size} * head_dim / 2 + int64_t{page_size} * (head_dim / kKvQ4Block) * 2;
}

// Byte of K's dim d of token `row` in a head block; the code is its high nibble when (d / 4) is odd.
constexpr int64_t kv_q4_k_offset(int row, int d, int head_dim) {
  return (int64_t{row / 16} * (head_dim / 8) + d / 8) * 64 + (row % 16) * 4 + d % 4;
}
constexpr bool kv_q4_k_high(int d) { return (d / 4) % 2 == 1; }

// Byte of V's dim d of token `row` in a head block; the code is its high nibble when (d % 32) >= 16.
constexpr int64_t kv_q4_v_offset(int row, int d, int head_dim) {
  return (int64_t{row / 4} * (head_dim / kKvQ4Block) + d / kKvQ4Block) * 64 + (d % 16) * 4 + row % 4;
}
constexpr bool kv_q4_v_high(int d) { return d % kKvQ4Block >= 16; }

// Quantizes one token's K and V rows (kv_heads × head_dim floats each, head
// h at h · head_dim) into row `row` (< page_size) of a page: k_page and
// v_page point at the page (kv_heads head blocks of kv_q4_head_bytes).
void kv_q4_store(const float* k, const float* v, int kv_heads, int head_dim, int page_size, uint8_t* k_page,
                 uint8_t* v_page, int row);

// x [32] ← H·x (the rotation above; its own inverse).
void kv_q4_rotate(float* x);

// Row `row` of one head block back to float: out [head_dim] (K rotated back).
void kv_q4_load_k(const uint8_t* head_block, int head_dim, int page_size, int row, float* out);
void kv_q4_load_v(const uint8_t* head_block, int head_dim, int page_size, int row, float* out);

}  // namespace flashscope::cpu
