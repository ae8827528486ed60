// What the quantized matmuls share beyond quant_matmul.hpp: the block
// field readers, the fork/join threshold, and the row-block driver of the 16-token prefill GEMMs
// (quant_matmul_t16.cpp, quant_matmul_kquant.cpp; quant_matmul_kdot.cpp
// takes the threshold). Private to those files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/quant_matmul.hpp"
#include "flashscope/half.hpp"
#include "util/math.hpp"

namespace flashscope::cpu {

// An fp16 field of a block, at any alignment.
inline float load_fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_float(h);
}

// A Q4_K/Q5_K super-block's eight 6-bit scale/min pairs (12 packed bytes)
// as 16 bytes, sc[0..8) then m[0..8), by 32-bit word operations (for the
// vector kernels, which widen them eight at a time).
inline void unpack_k4_scales16(const uint8_t* q, uint8_t* out) {
  uint32_t u[3];
  std::memcpy(u, q, sizeof u);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t words[4] = {u[0] & kLow6, (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4), u[1] & kLow6,
                             ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4)};
  std::memcpy(out, words, sizeof words);
}

// The K-quant super-blocks (GGUF): 256 elements in 8 sub-blocks of 32.
constexpr int kSubBlocks = 8;
constexpr int kQ4_KBytes = 144;  // d, dmin, scales[12], qs[128]
constexpr int kQ5_KBytes = 176;  // d, dmin, scales[12], qh[32], qs[128]
constexpr int kQ6_KBytes = 210;  // ql[128], qh[64], int8 scales[16], d

// The integer sums of one Q4_K / Q5_K super-block against 256 int8
// activations, as the portable kernels define them for every ISA's to
// match: *isum = Σ_s sc_s · Σ code·x over sub-block s, *imin = Σ_s m_s ·
// sum32(s). Element l of sub-block s is nibble s&1 of qs[32·(s/2) + l], plus
// bit s of qh[l] as the fifth bit (Q5_K). act(i): activation i; sum32(s):
// the activations' sum over sub-block s.
template <bool kFifthBit, typename Act, typename Sum32>
inline void q45_k_superblock_sums(const uint8_t* blk, Act act, Sum32 sum32, int32_t* isum, int32_t* imin) {
  uint8_t sc_m[16];
  unpack_k4_scales16(blk + 4, sc_m);
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (kFifthBit ? 48 : 16);
  int32_t total = 0, mins = 0;
  for (int s = 0; s < kSubBlocks; ++s) {
    const uint8_t* q = qs + 32 * (s / 2);
    int32_t part = 0;
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> (4 * (s & 1))) & 0xF;
      if (kFifthBit) v |= ((qh[l] >> s) & 1) << 4;
      part += v * act(32 * s + l);
    }
    total += sc_m[s] * part;
    mins += sc_m[8 + s] * sum32(s);
  }
  *isum = total;
  *imin = mins;
}

// The same for Q6_K: Σ sc · Σ (code − 32)·x over its 16 groups of 16.
// Element l + 32k of half h is (nibble k/2 of ql[64h + 32(k&1) + l]) |
// (bits 2k, 2k+1 of qh[32h + l]) << 4, minus 32, scaled by sc[8h + 2k + l/16].
template <typename Act>
inline int32_t q6_k_superblock_sum(const uint8_t* blk, Act act) {
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  int32_t isum = 0;
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      const uint8_t* ql = blk + 64 * h + 32 * (k & 1);
      const uint8_t* qh = blk + 128 + 32 * h;
      int32_t group[2] = {0, 0};
      for (int l = 0; l < 32; ++l) {
        const int v = (((ql[l] >> (4 * (k / 2))) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        group[l / 16] += v * act(32 * (4 * h + k) + l);
      }
      isum += sc[8 * h + 2 * k] * group[0] + sc[8 * h + 2 * k + 1] * group[1];
    }
  }
  return isum;
}

// Products smaller than this many multiply-adds (about 10 µs on one core)
// run on the calling thread: a fork/join costs a few µs on an idle machine
// and a whole scheduler time slice when another process holds the second
// core, so tiny decode matmuls (K and V: 576 × 192) gain nothing from it.
constexpr int64_t kParallelMinMacs = 256 * 1024;

// Rows a row block of the 16-token GEMMs holds at most (its outputs of one
// tile, 64 × 16 floats, sit on the stack until they are stored).
constexpr int64_t kTile16MaxBlockRows = 64;

// y [kTokens · n_tiles, w.rows] (row stride ldy) = every tile run · Wᵀ, by
//   kernel(w_row + block · block_bytes, tiles + block, count, out[kTokens])
// over the row's `blocks` weight blocks (tile i's are tiles[i · blocks ..]).
// Columns run in segments of seg_blocks and rows in blocks of at most
// row_block_bytes of their segments (at most kTile16MaxBlockRows): a
// block's segments meet every tile's segment before the next, both staying
// in L1. A segment past the first adds onto y. Rows split over the OpenMP
// team when the product is large enough.
template <int kTokens, class Tile, class Kernel>
void tile16_rows(Kernel kernel, const QuantMatrix& w, const Tile* tiles, int64_t n_tiles, int64_t blocks,
                 uint64_t block_bytes, int64_t seg_blocks, uint64_t row_block_bytes, float* y, int64_t ldy) {
  const int64_t rows = w.rows;
  const int64_t block_rows = std::clamp<int64_t>(static_cast<int64_t>(row_block_bytes / (block_bytes * seg_blocks)),
                                                 1, kTile16MaxBlockRows);
  const int64_t row_blocks = ceil_div(rows, block_rows);
  [[maybe_unused]] const bool parallel = rows * w.cols * n_tiles * kTokens >= kParallelMinMacs;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t r0 = rb * block_rows, r1 = std::min(rows, r0 + block_rows);
    // The block's outputs of one tile, row-major, then stored by token:
    // runs of contiguous y instead of kTokens strided stores per row.
    float out[kTile16MaxBlockRows][kTokens];
    for (int64_t seg = 0; seg < blocks; seg += seg_blocks) {
      const int64_t seg_n = std::min<int64_t>(seg_blocks, blocks - seg);
      for (int64_t i = 0; i < n_tiles; ++i) {
        for (int64_t r = r0; r < r1; ++r) {
          kernel(w.data + static_cast<uint64_t>(r) * w.row_bytes + static_cast<uint64_t>(seg) * block_bytes,
                 tiles + i * blocks + seg, seg_n, out[r - r0]);
        }
        for (int t = 0; t < kTokens; ++t) {
          float* yt = y + (i * kTokens + t) * ldy;
          if (seg == 0) {
            for (int64_t r = r0; r < r1; ++r) yt[r] = out[r - r0][t];
          } else {
            for (int64_t r = r0; r < r1; ++r) yt[r] += out[r - r0][t];
          }
        }
      }
    }
  }
}

}  // namespace flashscope::cpu
