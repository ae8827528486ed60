// Row operations of the online softmax on accumulator fragments, shared by
// the sm80 kernel (mma.m16n8k16) and the Hopper kernel (wgmma m64nNk16).
//
// Layout every function here expects: the C fragment of one m16 x N tile
// (for wgmma, the 16 rows of the warpgroup's m64 tile that one warp holds;
// the same layout), as N/8 n8 tiles of 4 floats per thread. Element (j, i),
// i in [0, 4), is
//   row    lane/4 + 8·(i/2)       (h = i/2: 0 the upper row, 1 the lower)
//   column 8j + 2·(lane%4) + i%2
// so the 4 threads of a quad share a row and each holds 2 columns of every
// n8 tile. A fragment is passed either as float[N/8][4] (sm80: one m16 tile
// of a warp's several) or flat as float[N/2] with element (j, i) at 4j + i
// (wgmma's accumulator registers, which this layout is).
//
// Row results (max, sum) of row h are per thread until quad-reduced; the
// functions say which they return. The order of operations is the kernels'
// own: these are the loops the kernels had inline, named.
#pragma once

#include <cstdint>

#include "kernels/common/ptx.cuh"

namespace flashscope::kernels::rows {

// Element (j, i) of a fragment in either form.
template <int kTiles>
__device__ __forceinline__ float& at(float (&c)[kTiles][4], int j, int i) {
  return c[j][i];
}
template <int kElems>
__device__ __forceinline__ float& at(float (&c)[kElems], int j, int i) {
  return c[4 * j + i];
}

// n8 tiles in a fragment (N/8).
template <typename Frag>
struct Tiles;
template <int kTiles>
struct Tiles<float[kTiles][4]> {
  static constexpr int value = kTiles;
};
template <int kElems>
struct Tiles<float[kElems]> {
  static constexpr int value = kElems / 4;
};
template <typename Frag>
constexpr int kTilesOf = Tiles<Frag>::value;

// Reductions across the quad that holds one row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Maximum of row h over this thread's elements, then over the quad: the
// row's maximum (of raw logits: the caller scales it).
template <typename Frag>
__device__ __forceinline__ float row_max(Frag& s, int h) {
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kTilesOf<Frag>; ++j) m = fmaxf(m, fmaxf(at(s, j, 2 * h), at(s, j, 2 * h + 1)));
  return quad_max(m);
}

// The exponent offset for a row whose running maximum is m: m itself, or 0
// for a row with every key masked so far (m = -inf), so that exp2 sees
// -inf - 0 (= 0) rather than -inf - -inf (= NaN).
__device__ __forceinline__ float exp2_offset(float m) { return m == -INFINITY ? 0.0f : m; }

// Row h in place: p = exp2(s · scale_log2 − offset). Returns this thread's
// sum of its p (not quad-reduced: the rescale factor is quad-uniform, so
// the sum l is reduced once, at the end).
template <typename Frag>
__device__ __forceinline__ float exp2_row(Frag& s, int h, float scale_log2, float offset) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kTilesOf<Frag>; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float prob = fast_exp2(fmaf(at(s, j, 2 * h + e), scale_log2, -offset));
      at(s, j, 2 * h + e) = prob;
      sum += prob;
    }
  return sum;
}

// Row h of an output fragment times `factor` (O's rescale when m grows).
template <typename Frag>
__device__ __forceinline__ void rescale_row(Frag& o, int h, float factor) {
#pragma unroll
  for (int j = 0; j < kTilesOf<Frag>; ++j) {
    at(o, j, 2 * h) *= factor;
    at(o, j, 2 * h + 1) *= factor;
  }
}

// Both rows at once, n8 tile by n8 tile (the order a rescale applied after
// the fact, outside the row loop, takes).
template <typename Frag>
__device__ __forceinline__ void rescale_rows(Frag& o, const float (&factor)[2]) {
#pragma unroll
  for (int j = 0; j < kTilesOf<Frag>; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      at(o, j, 2 * h) *= factor[h];
      at(o, j, 2 * h + 1) *= factor[h];
    }
}

// P as A fragments of the next MMA (bf16 or fp16 by Mma): the C layout of
// n8 tiles 2k and 2k+1 is exactly the A layout of k16 tile k, so P never
// leaves registers. p has N/16 entries of 4 packed pairs.
template <typename Mma, typename Frag>
__device__ __forceinline__ void pack_p(Frag& s, uint32_t (&p)[kTilesOf<Frag> / 2][4]) {
#pragma unroll
  for (int k = 0; k < kTilesOf<Frag> / 2; ++k) {
    p[k][0] = Mma::pack(at(s, 2 * k, 0), at(s, 2 * k, 1));
    p[k][1] = Mma::pack(at(s, 2 * k, 2), at(s, 2 * k, 3));
    p[k][2] = Mma::pack(at(s, 2 * k + 1, 0), at(s, 2 * k + 1, 1));
    p[k][3] = Mma::pack(at(s, 2 * k + 1, 2), at(s, 2 * k + 1, 3));
  }
}

// Row h of an output fragment times inv_l, stored to a row of DIM floats
// (a split's partial result) or of 16-bit values (O): this thread's two
// columns of every n8 tile.
template <typename Frag>
__device__ __forceinline__ void store_row_f32(Frag& o, int h, float inv_l, float* dst, int lane) {
#pragma unroll
  for (int j = 0; j < kTilesOf<Frag>; ++j)
    *reinterpret_cast<float2*>(dst + j * 8 + (lane % 4) * 2) =
        make_float2(at(o, j, 2 * h) * inv_l, at(o, j, 2 * h + 1) * inv_l);
}
template <typename Mma, typename T, typename Frag>
__device__ __forceinline__ void store_row(Frag& o, int h, float inv_l, T* dst, int lane) {
#pragma unroll
  for (int j = 0; j < kTilesOf<Frag>; ++j)
    *reinterpret_cast<uint32_t*>(dst + j * 8 + (lane % 4) * 2) =
        Mma::pack(at(o, j, 2 * h) * inv_l, at(o, j, 2 * h + 1) * inv_l);
}

}  // namespace flashscope::kernels::rows
