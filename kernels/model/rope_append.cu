// RoPE fused with the K/V append: turns one layer's QKV GEMM output into the
// attention's inputs in one pass, with the per-family steps that come before
// the rotation (Q/K/V bias, per-head RMSNorm of q and k) done on the way.
//
//   qkv      : [n, qkv_stride] fp32; q heads [H, D] at 0, k heads [KV, D] at
//              H·D, v heads [KV, D] at (H + KV)·D
//   bias     : [(H + 2·KV)·D] fp32 or null
//   q_norm, k_norm : [D] fp32 or null
//   cos, sin : [n, rope_dim / 2] fp32 (computed on the host in double, as
//              cpu::rope_table does; base and frequency factors are in them)
//   slots    : [n] int64, page * page_size + offset (from PagedKvCache)
//   q_out    : [n, H, D] bf16, rotated      (row stride q_stride)
//   K, V     : [num_pages, KV, page_size, D] bf16; token t's head h row is
//              at ((page · KV + h) · page_size + offset) · D
//
// Pairs (model_ops.h): adjacent (x[2i], x[2i+1]) in llama GGUFs, halves
// (x[i], x[i + rope_dim/2]) in NeoX-style ones; either is rotated by the
// angle of frequency i for i < rope_dim / 2, and the elements past rope_dim
// are copied in adjacent pairs. Q and K are rotated in fp32 and rounded to
// bf16 once, like the CPU path (rope in float, then bf16 for the cache).
//
// Grid: (token, group of kWarps heads); one warp per head (the q/k norm is
// a sum over the head's D elements: a warp's shuffles). A decode step's
// heads spread over CTAs instead of queueing behind one CTA's four warps. Lane l holds pairs l,
// l + 32, ... of its head (D <= 256: at most four) in registers between the
// sum and the rotation. Adjacent pairs are one float2 load and one 32-bit
// store; a warp's halves pairs are two coalesced 128-byte loads.
//
// Programmatic dependent launch (sm_90): the grid may be scheduled while the
// QKV GEMM finishes. What does not come from it is read first (the q/k norm
// weights; the angles and the slot, which the step's input copy wrote before
// its first kernel), then the GEMM is waited for (pdl_wait) before qkv is
// read, and attention may start its own launch at once.
#include <cuda_bf16.h>

#include "kernels/common/ptx.cuh"
#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
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

__global__ void __launch_bounds__(kThreads) rope_append_kernel(const __grid_constant__ RopeAppendKernelParams p) {
  const int t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y * kWarps + warp;
  const int heads = p.q_heads + 2 * p.kv_heads;
  if (head >= heads) return;  // a whole warp: no shuffle is left waiting
  const int half_d = p.head_dim / 2;
  const int rope_pairs = p.rope_dim / 2;
  const bool neox = p.neox != 0;
  const int64_t slot = p.slots[t];
  const bool write_kv = slot >= 0 && (p.num_slots <= 0 || slot < p.num_slots);
  const int64_t page = write_kv ? slot / p.page_size : 0;
  const int64_t offset = write_kv ? slot % p.page_size : 0;

  const float* row = p.qkv + int64_t(t) * p.qkv_stride;
  const float* cos_t = p.rope_cos + int64_t(t) * rope_pairs;
  const float* sin_t = p.rope_sin + int64_t(t) * rope_pairs;
  {
    const bool is_q = head < p.q_heads;
    const bool is_v = head >= p.q_heads + p.kv_heads;
    const float* norm_w = is_q ? p.q_norm : is_v ? nullptr : p.k_norm;
    const float* src = row + int64_t(head) * p.head_dim;
    const float* bias = p.bias != nullptr ? p.bias + int64_t(head) * p.head_dim : nullptr;

    // Lane's pairs: norm weights and rotation (cos, sin); identity where unused.
    float wa_rmem[kMaxPairsPerLane], wb_rmem[kMaxPairsPerLane], c_rmem[kMaxPairsPerLane], s_rmem[kMaxPairsPerLane];
#pragma unroll
    for (int m = 0; m < kMaxPairsPerLane; ++m) {
      const int i = lane + 32 * m;
      wa_rmem[m] = wb_rmem[m] = c_rmem[m] = 1.0f;
      s_rmem[m] = 0.0f;
      if (i >= half_d) continue;
      const Pair e = pair_of(i, p.rope_dim, neox);
      if (norm_w != nullptr) {
        wa_rmem[m] = norm_w[e.e0];
        wb_rmem[m] = norm_w[e.e1];
      }
      if (!is_v && e.rotated) {
        c_rmem[m] = cos_t[i];
        s_rmem[m] = sin_t[i];
      }
    }
    pdl_wait();  // qkv is the QKV GEMM's output
    pdl_launch_dependents();

    float a_rmem[kMaxPairsPerLane], b_rmem[kMaxPairsPerLane];
    float ss = 0.0f;
#pragma unroll
    for (int m = 0; m < kMaxPairsPerLane; ++m) {
      const int i = lane + 32 * m;
      a_rmem[m] = b_rmem[m] = 0.0f;
      if (i >= half_d) continue;
      const Pair e = pair_of(i, p.rope_dim, neox);
      if (e.e1 == e.e0 + 1) {
        const float2 v = *reinterpret_cast<const float2*>(src + e.e0);
        a_rmem[m] = v.x;
        b_rmem[m] = v.y;
      } else {
        a_rmem[m] = src[e.e0];
        b_rmem[m] = src[e.e1];
      }
      if (bias != nullptr) {
        a_rmem[m] += bias[e.e0];
        b_rmem[m] += bias[e.e1];
      }
      ss += a_rmem[m] * a_rmem[m] + b_rmem[m] * b_rmem[m];
    }
    float scale = 1.0f;
    if (norm_w != nullptr) {  // uniform over the warp: every lane shuffles
#pragma unroll
      for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      scale = 1.0f / sqrtf(ss / float(p.head_dim) + p.norm_eps);
    }

    const int kv_head = is_v ? head - p.q_heads - p.kv_heads : head - p.q_heads;
    uint16_t* dst = is_q ? p.q_out + int64_t(t) * p.q_stride + int64_t(head) * p.head_dim
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
        a = a * scale * wa_rmem[m];
        b = b * scale * wb_rmem[m];
      }
      if (!is_v && e.rotated) {
        const float c = c_rmem[m], s = s_rmem[m];
        const float x0 = a, x1 = b;
        a = x0 * c - x1 * s;
        b = x0 * s + x1 * c;
      }
      if (e.e1 == e.e0 + 1) {
        *reinterpret_cast<uint32_t*>(dst + e.e0) = pack_bf16x2(a, b);
      } else {
        dst[e.e0] = to_bf16(a);
        dst[e.e1] = to_bf16(b);
      }
    }
  }
}

}  // namespace

cudaError_t launch_rope_append(const RopeAppendKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (p.n <= 0) return cudaSuccess;
  const int heads = p.q_heads + 2 * p.kv_heads;
  return launch_maybe_programmatic(rope_append_kernel, dim3(p.n, (heads + kWarps - 1) / kWarps), dim3(kThreads), 0,
                                   stream, programmatic, p);
}

}  // namespace flashscope::kernels
