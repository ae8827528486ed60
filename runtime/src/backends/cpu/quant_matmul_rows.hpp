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
  const int64_t row_blocks = (rows + block_rows - 1) / block_rows;
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
