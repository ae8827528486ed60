// One (token, head) of rope_append (model_ops.h) done by one warp: what
// rope_append_kernel runs for each of its warps and what the few-token QKV
// GEMM's kRopeHeads epilogue runs for a head once its rows are stored.
//
//   qkv row t [(H + 2·KV)·D] fp32 (p.qkv, p.qkv_stride): head h's D elements at h·D
//   → q_out [t, h] (h < H) or the K/V page slot of token t (KV heads), bf16,
//     after the bias, the per-head RMSNorm (q_norm / k_norm) and the rotation.
//
// Lane l holds pairs l, l + 32, ... of the head (D <= 256: at most four) in
// registers between the sum and the rotation. Two halves so a caller can
// read what its producer did not write (norm weights, angles: prepare) before
// it waits for the producer, then the rest (finish). finish reads qkv from L2
// (ld.global.cg): in the GEMM's epilogue other CTAs wrote it during this grid.
// The arithmetic is spelled with explicit roundings (__fmaf_rn, __fmul_rn),
// so both callers compute the same bits whatever the compiler contracts.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/model/model_ops.h"

namespace flashscope::kernels::rope_head {

constexpr int kMaxPairsPerLane = kRopeAppendMaxHeadDim / 2 / 32;

__device__ __forceinline__ uint16_t to_bf16(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(to_bf16(lo)) | (uint32_t(to_bf16(hi)) << 16);
}

// The two elements of a head that pair `i` holds, and whether they rotate.
struct Pair {
  int e0, e1;
  bool rotated;
};

__device__ __forceinline__ Pair pair_of(int i, int rope_dim, bool neox) {
  const int rope_pairs = rope_dim / 2;
  if (!neox) return {2 * i, 2 * i + 1, i < rope_pairs};
  if (i < rope_pairs) return {i, i + rope_pairs, true};
  const int e = rope_dim + 2 * (i - rope_pairs);  // past rope_dim: adjacent, copied
  return {e, e + 1, false};
}

// A lane's pairs of one (token, head): norm weights and rotation (cos, sin),
// identity where unused.
struct Lane {
  float wa[kMaxPairsPerLane], wb[kMaxPairsPerLane], c[kMaxPairsPerLane], s[kMaxPairsPerLane];
};

__device__ __forceinline__ const float* norm_weight_of(const RopeAppendKernelParams& p, int head) {
  return head < p.q_heads ? p.q_norm : head < p.q_heads + p.kv_heads ? p.k_norm : nullptr;
}

__device__ __forceinline__ void prepare(const RopeAppendKernelParams& p, int t, int head, int lane, Lane& r) {
  const bool is_v = head >= p.q_heads + p.kv_heads;
  const float* norm_w = norm_weight_of(p, head);
  const int rope_pairs = p.rope_dim / 2;
  const float* cos_t = p.rope_cos + int64_t(t) * rope_pairs;
  const float* sin_t = p.rope_sin + int64_t(t) * rope_pairs;
#pragma unroll
  for (int m = 0; m < kMaxPairsPerLane; ++m) {
    const int i = lane + 32 * m;
    r.wa[m] = r.wb[m] = r.c[m] = 1.0f;
    r.s[m] = 0.0f;
    if (i >= p.head_dim / 2) continue;
    const Pair e = pair_of(i, p.rope_dim, p.neox != 0);
    if (norm_w != nullptr) {
      r.wa[m] = norm_w[e.e0];
      r.wb[m] = norm_w[e.e1];
    }
    if (!is_v && e.rotated) {
      r.c[m] = cos_t[i];
      r.s[m] = sin_t[i];
    }
  }
}

// Every lane of the warp calls it (the norm's sum is a warp shuffle).
__device__ __forceinline__ void finish(const RopeAppendKernelParams& p, int t, int head, int lane, const Lane& r) {
  const bool neox = p.neox != 0;
  const int half_d = p.head_dim / 2;
  const bool is_q = head < p.q_heads;
  const bool is_v = head >= p.q_heads + p.kv_heads;
  const float* norm_w = norm_weight_of(p, head);
  const float* src = p.qkv + int64_t(t) * p.qkv_stride + int64_t(head) * p.head_dim;
  const float* bias = p.bias != nullptr ? p.bias + int64_t(head) * p.head_dim : nullptr;
  const int64_t slot = p.slots[t];
  const bool write_kv = slot >= 0 && (p.num_slots <= 0 || slot < p.num_slots);

  float a_rmem[kMaxPairsPerLane], b_rmem[kMaxPairsPerLane];
  float ss = 0.0f;
#pragma unroll
  for (int m = 0; m < kMaxPairsPerLane; ++m) {
    const int i = lane + 32 * m;
    a_rmem[m] = b_rmem[m] = 0.0f;
    if (i >= half_d) continue;
    const Pair e = pair_of(i, p.rope_dim, neox);
    if (e.e1 == e.e0 + 1) {
      const float2 v = __ldcg(reinterpret_cast<const float2*>(src + e.e0));
      a_rmem[m] = v.x;
      b_rmem[m] = v.y;
    } else {
      a_rmem[m] = __ldcg(src + e.e0);
      b_rmem[m] = __ldcg(src + e.e1);
    }
    if (bias != nullptr) {
      a_rmem[m] += bias[e.e0];
      b_rmem[m] += bias[e.e1];
    }
    ss = __fmaf_rn(b_rmem[m], b_rmem[m], __fmaf_rn(a_rmem[m], a_rmem[m], ss));
  }
  float scale = 1.0f;
  if (norm_w != nullptr) {  // uniform over the warp: every lane shuffles
#pragma unroll
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    scale = 1.0f / sqrtf(ss / float(p.head_dim) + p.norm_eps);
  }

  const int kv_head = is_v ? head - p.q_heads - p.kv_heads : head - p.q_heads;
  const int64_t page = write_kv ? slot / p.page_size : 0;
  const int64_t offset = write_kv ? slot % p.page_size : 0;
  uint16_t* dst = is_q       ? p.q_out + int64_t(t) * p.q_stride + int64_t(head) * p.head_dim
                  : write_kv ? (is_v ? p.v_pages : p.k_pages) +
                                   ((page * p.kv_heads + kv_head) * p.page_size + offset) * p.head_dim
                             : nullptr;
  if (dst == nullptr) return;
#pragma unroll
  for (int m = 0; m < kMaxPairsPerLane; ++m) {
    const int i = lane + 32 * m;
    if (i >= half_d) continue;
    const Pair e = pair_of(i, p.rope_dim, neox);
    float a = a_rmem[m], b = b_rmem[m];
    if (norm_w != nullptr) {
      a = __fmul_rn(__fmul_rn(a, scale), r.wa[m]);
      b = __fmul_rn(__fmul_rn(b, scale), r.wb[m]);
    }
    if (!is_v && e.rotated) {
      const float x0 = a, x1 = b;
      a = __fmaf_rn(x0, r.c[m], -__fmul_rn(x1, r.s[m]));
      b = __fmaf_rn(x0, r.s[m], __fmul_rn(x1, r.c[m]));
    }
    if (e.e1 == e.e0 + 1) {
      *reinterpret_cast<uint32_t*>(dst + e.e0) = pack_bf16x2(a, b);
    } else {
      dst[e.e0] = to_bf16(a);
      dst[e.e1] = to_bf16(b);
    }
  }
}

}  // namespace flashscope::kernels::rope_head
