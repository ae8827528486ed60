// Decode attention over the paged KV cache for the few rows of a decode
// step: the q-heads of one kv-head times 1..8 new tokens (rows <= kRows).
//
//   q     [batch, q_len, q_heads, D] T          (PagedKernelParams strides)
//   pages [num_pages, kv_heads, page_size, D] T (K and V alike)
//   o     [batch, q_len, q_heads, D] T, lse [batch, q_heads, q_len] natural log;
//         or with num_splits > 1 the split's float partials (the combine's input)
//   grid  (num_splits, kv_heads, batch), block kThreads (4 warps)
//
// Why not the 16-row MMA tile: a decode step has 1..8 rows per kv-head, so
// the tile's one warp computes 16 rows to use a few, and its chain (a
// prefill pipeline around a single key tile) sets a floor of several
// microseconds whatever the keys. Here the work is shaped by the keys:
//   Q·Kᵀ  lanes over keys, kLanesPerKey lanes a key each holding 32 of its
//         elements (one 64-byte row piece); the partial dots meet by shuffle.
//   P·V   lanes over head_dim (kVElems elements a lane), a key's probability
//         broadcast from the lanes that scored it.
// Each warp takes chunks of kKeysPerChunk keys in turn, loading chunk i+1's
// K and V while it computes chunk i; the four warps' running (max, sum, O)
// meet in shared memory at the end. Split ranges are the MMA tile's
// (kSplitTileKeys keys a tile), so the plan's split counts mean the same.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/prefill_config.cuh"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/window_range.h"
#include "kernels/common/math.h"
#include "kernels/common/ptx.cuh"

namespace flashscope::kernels {
namespace paged_decode {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// Two packed elements of T as floats.
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t v);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}
template <typename T>
__device__ __forceinline__ float unpack1(uint16_t v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(__ushort_as_half(v));
  } else {
    return __uint_as_float(uint32_t(v) << 16);
  }
}
template <typename T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else {
    return __float2bfloat16_rn(x);
  }
}

// A lane's kVElems elements of one V row, as raw bits (2 bytes an element).
template <int kVElems>
struct VBits;
template <>
struct VBits<1> {
  uint16_t x;
};
template <>
struct VBits<2> {
  uint32_t x;
};
template <>
struct VBits<4> {
  uint2 x;
};
template <>
struct VBits<8> {
  uint4 x;
};

template <typename T, int kVElems>
__device__ __forceinline__ void fma_v(float (&o)[kVElems], float p, const VBits<kVElems>& v) {
  if constexpr (kVElems == 1) {
    o[0] = fmaf(p, unpack1<T>(v.x), o[0]);
  } else {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v.x);
#pragma unroll
    for (int i = 0; i < kVElems / 2; ++i) {
      const float2 f = unpack2<T>(w[i]);
      o[2 * i] = fmaf(p, f.x, o[2 * i]);
      o[2 * i + 1] = fmaf(p, f.y, o[2 * i + 1]);
    }
  }
}

template <int D>
struct Shape {
  static constexpr int kLanesPerKey = D >= 64 ? D / 32 : 1;  // 32 elements (64 bytes) of K a lane
  static constexpr int kKElems = D / kLanesPerKey;
  static constexpr int kKeysPerChunk = 32 / kLanesPerKey;
  static constexpr int kVElems = D / 32;
  // The MMA decode tile's key tile (PagedDecodeConfig<D>::kBlockKV): split ranges in its units.
  static constexpr int kSplitTileKeys = D == 256 ? 16 : D <= 64 ? 64 : 32;
  static constexpr int kQPad = kKElems + 4;  // a lane part's q floats, padded: parts fall in other banks
  static_assert(kKElems == 32 && kVElems >= 1 && kVElems <= 8, "head_dim 32, 64, 128 or 256");
};

}  // namespace paged_decode

template <typename T, int D, int kRows, bool kCausal, int kMods>
__global__ void __launch_bounds__(paged_decode::kThreads)
    paged_decode_kernel(const __grid_constant__ PagedKernelParams p) {
  using namespace paged_decode;
  using S = Shape<D>;
  constexpr int LPK = S::kLanesPerKey, KPC = S::kKeysPerChunk, VE = S::kVElems;
  constexpr bool kWindow = (kMods & kModWindow) != 0;
  constexpr bool kSoftcap = (kMods & kModSoftcap) != 0;
  __shared__ __align__(16) float q_smem[kRows][LPK][S::kQPad];
  __shared__ float m_smem[kWarps][kRows], l_smem[kWarps][kRows];
  __shared__ __align__(16) float o_smem[kWarps][kRows][D];

  // Launched programmatically after the product that wrote q and the new
  // K/V: wait for it before any read; the combine (or the O product that
  // merges the splits) may be scheduled from here on.
  pdl_wait();
  pdl_launch_dependents();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x, kv_head = blockIdx.y, seq = blockIdx.z;
  const int rows = p.q_len * p.group;
  const int kv_len = p.kv_lens[seq];
  const int32_t* table = p.block_tables + int64_t(seq) * p.block_table_stride;
  auto position = [&](int r) { return kv_len - p.q_len + r / p.group; };

  // The split's keys, as the MMA tile splits them; loads start at load_lo.
  int kv_begin = 0, kv_end = 0, load_lo = 0;
  int reach_left = 0, reach_right = 0;
  if constexpr (kWindow) {
    reach_left = window_reach(p.window_left);
    reach_right = window_reach(p.window_right);
    int lo = 0, begin = 0, end = 0;
    windowed_key_range(position(0), position(rows - 1), reach_left, reach_right, kv_len, S::kSplitTileKeys, lo,
                       begin, end);
    window_split(begin, end, S::kSplitTileKeys, p.num_splits, split, kv_begin, kv_end);
    load_lo = max(kv_begin, lo);  // keys before the window's first are never read (their page may be reused)
  } else {
    const int tiles = ceil_div(kv_len, S::kSplitTileKeys);
    const int tiles_per_split = ceil_div(tiles, p.num_splits);
    kv_begin = min(kv_len, split * tiles_per_split * S::kSplitTileKeys);
    kv_end = min(kv_len, kv_begin + tiles_per_split * S::kSplitTileKeys);
    load_lo = kv_begin;
  }

  // q as floats, lane part by lane part; rows past `rows` are zeros.
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float x = 0.0f;
    if (r < rows) {
      const int t = r / p.group, h = kv_head * p.group + r % p.group;
      const T* q = static_cast<const T*>(p.q) + seq * p.q_batch_stride + t * p.q_seq_stride + h * p.q_head_stride;
      x = unpack1<T>(reinterpret_cast<const uint16_t*>(q)[d]);
    }
    q_smem[r][d / S::kKElems][d % S::kKElems] = x;
  }

  const int part = lane % LPK, key_slot = lane / LPK;
  const int page_mask = (1 << p.page_size_log2) - 1;
  // Element offset of key j's row in the pages (j must be a key of the cache).
  auto row_offset = [&](int j) -> int64_t {
    const int64_t page = table[j >> p.page_size_log2];
    return (((page * p.kv_heads + kv_head) << p.page_size_log2) + (j & page_mask)) * D;
  };

  // A chunk's loads: this lane's piece of its key's K row, and its VE
  // elements of every key's V row (zeros for keys it must not read).
  struct Chunk {
    uint4 k[4];
    VBits<VE> v[KPC];
  };
  const T* k_pages = static_cast<const T*>(p.k_pages);
  const T* v_pages = static_cast<const T*>(p.v_pages);
  auto load_chunk = [&](int k0, Chunk& c) {
    const int j = k0 + key_slot;
    const bool live = j >= load_lo && j < kv_end;
    const int64_t off = live ? row_offset(j) : 0;
    const uint4* kp = reinterpret_cast<const uint4*>(k_pages + off + part * S::kKElems);
#pragma unroll
    for (int i = 0; i < 4; ++i) c.k[i] = live ? kp[i] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int s = 0; s < KPC; ++s) {
      const int64_t voff = __shfl_sync(0xffffffffu, off, s * LPK);
      const bool vlive = k0 + s >= load_lo && k0 + s < kv_end;
      c.v[s] = vlive ? *reinterpret_cast<const VBits<VE>*>(v_pages + voff + lane * VE) : VBits<VE>{};
    }
  };

  float m[kRows], l[kRows], o[kRows][VE];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < VE; ++e) o[r][e] = 0.0f;
  }

  const int first_chunk = load_lo - (load_lo - kv_begin) % KPC;  // chunks aligned to the split's start
  const int stride = kWarps * KPC;
  int k0 = first_chunk + warp * KPC;
  Chunk cur, next;
  if (k0 < kv_end) load_chunk(k0, cur);
  __syncthreads();  // q_smem is written

  for (; k0 < kv_end; k0 += stride) {
    if (k0 + stride < kv_end) load_chunk(k0 + stride, next);
    const int j = k0 + key_slot;
    const bool key_live = j >= load_lo && j < kv_end;
    float kf[S::kKElems];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(&cur.k[i]);
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float2 f = unpack2<T>(w[h]);
        kf[i * 8 + 2 * h] = f.x;
        kf[i * 8 + 2 * h + 1] = f.y;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;  // uniform: every lane has the same rows
      float dot = 0.0f;
      const float4* q4 = reinterpret_cast<const float4*>(q_smem[r][part]);
#pragma unroll
      for (int i = 0; i < S::kKElems / 4; ++i) {
        const float4 q = q4[i];
        dot = fmaf(q.x, kf[4 * i], dot);
        dot = fmaf(q.y, kf[4 * i + 1], dot);
        dot = fmaf(q.z, kf[4 * i + 2], dot);
        dot = fmaf(q.w, kf[4 * i + 3], dot);
      }
#pragma unroll
      for (int off = 1; off < LPK; off *= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if constexpr (kSoftcap) dot = p.softcap.out * fmaf(-2.0f, fast_rcp(1.0f + fast_exp2(dot * p.softcap.exp2_in)), 1.0f);
      const int pos = position(r);
      bool visible = key_live;
      if constexpr (kCausal) visible = visible && j <= pos;
      if constexpr (kWindow) visible = visible && j >= pos - reach_left && j <= pos + reach_right;
      const float s = visible ? dot * p.scale_log2 : -INFINITY;
      float chunk_max = s;
#pragma unroll
      for (int off = LPK; off < 32; off *= 2) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, off));
      const float m_new = fmaxf(m[r], chunk_max);
      if (m_new == -INFINITY) continue;  // nothing visible yet: the state stays empty
      const float corr = fast_exp2(m[r] - m_new);
      const float prob = fast_exp2(s - m_new);
      m[r] = m_new;
      l[r] = fmaf(l[r], corr, part == 0 ? prob : 0.0f);
#pragma unroll
      for (int e = 0; e < VE; ++e) o[r][e] *= corr;
#pragma unroll
      for (int sk = 0; sk < KPC; ++sk) fma_v<T, VE>(o[r], __shfl_sync(0xffffffffu, prob, sk * LPK), cur.v[sk]);
    }
    cur = next;
  }

  // The warps' states into shared memory, then merged element by element.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float lr = l[r];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) lr += __shfl_xor_sync(0xffffffffu, lr, off);
    if (lane == 0) {
      m_smem[warp][r] = m[r];
      l_smem[warp][r] = lr;
    }
#pragma unroll
    for (int e = 0; e < VE; ++e) o_smem[warp][r][lane * VE + e] = o[r][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_smem[w][r]);
    float sum = 0.0f, acc = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = fast_exp2(m_smem[w][r] - mx);  // an empty warp: exp2(-inf) = 0
        sum = fmaf(l_smem[w][r], f, sum);
        acc = fmaf(o_smem[w][r][d], f, acc);
      }
    }
    const float out = sum > 0.0f ? acc / sum : 0.0f;  // no visible key: output 0
    const int t = r / p.group, h = kv_head * p.group + r % p.group;
    const int64_t out_index = (int64_t(seq) * p.q_heads + h) * p.q_len + t;
    if (p.num_splits > 1) {
      const int64_t partial = int64_t(split) * p.batch * p.q_heads * p.q_len + out_index;
      p.o_partial[partial * D + d] = out;
      if (d == 0) p.lse_partial[partial] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    } else {
      T* dst = static_cast<T*>(p.o) + seq * p.o_batch_stride + t * p.o_seq_stride + h * p.o_head_stride;
      dst[d] = from_float<T>(out);
      if (d == 0 && p.lse != nullptr) p.lse[out_index] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    }
  }
}

}  // namespace flashscope::kernels
