// XOR swizzle for tiles of rows of ROW_BYTES (a power of two >= 128) in
// shared memory.
//
// ldmatrix reads 8 rows x 16 bytes at a time. Unswizzled, those 8 rows share
// the same column, so with 128- or 256-byte rows all 8 addresses fall into
// the same 4 banks: an 8-way conflict. XOR-ing the 16-byte chunk index with
// (row % 8) puts the 8 rows' chunks in 8 different chunk slots, covering all
// 32 banks. cp.async writes through the same function, so data lands where
// ldmatrix looks.
//
// The XOR only touches address bits 4..6 with a value chosen by bits above
// the row size, so for a row offset that is a multiple of 8 rows and a column
// offset that is a multiple of 16 bytes, swizzle(base + off) == swizzle(base) ^ col
// + row: the kernels precompute a per-thread address and step it cheaply.
#pragma once

#include <cstdint>

namespace flashscope::kernels {

template <int ROW_BYTES, bool ENABLED>
__device__ __forceinline__ uint32_t swizzle(uint32_t offset) {
  static_assert(ROW_BYTES >= 128 && (ROW_BYTES & (ROW_BYTES - 1)) == 0, "rows of a power of two >= 128 bytes");
  if constexpr (!ENABLED) {
    return offset;
  } else {
    const uint32_t row = offset / ROW_BYTES;
    return offset ^ ((row % 8) << 4);
  }
}

}  // namespace flashscope::kernels
