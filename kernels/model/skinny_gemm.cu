// Few-token GEMM for decode steps, with the neighbouring element-wise op
// fused in front of it (RMSNorm) or behind it (RoPE + K/V append, SwiGLU,
// the residual add).
//
//   w   : [n_w, k] bf16 row-major (a fused weight: Wqkv, Wo, Wgate|up, Wdown, Wout)
//   in  : kBf16     x [rows, k] bf16 (row stride ldx)
//         kSplitKv  paged attention's split-KV partials, merged here (the combine kernel's job)
//         kRmsNorm  xf [rows, k] fp32 (row stride ldxf), normalized here exactly as
//                   rms_norm_kernel does: bf16(x · (1/sqrt(Σx²/k + eps)) · weight)
//         kAddRmsNorm  the same of r = xf + rms_norm(res_y) · res_weight (Gemma's post-norm
//                   and residual add of the block before, add_rms_norm's job); CTA 0
//                   stores r into res_out, the residual's other buffer, after the
//                   producer wait (whoever read res_out before has finished: every
//                   kernel of the step waits for its producer before it reads)
//   out : kStore      y [rows, n_out] fp32  = in · wᵀ           (logits)
//         kAccumulate y [rows, n_out] fp32 += in · wᵀ           (residual stream)
//         kRopeAppend the rope_append op on in · wᵀ              (QKV → q, K/V pages)
//         kSwiglu     act [rows, n_out] bf16 = silu(in · w_gateᵀ) · (in · w_upᵀ),
//                     gate rows [0, n_out), up rows [n_out, 2·n_out) of w
//         kGegluTanh  the same with gelu_tanh (Gemma)
//         kRopeHeads  kStore into qkv, then rope_append of each head by the last CTA to
//                     store its rows (q/k norms, biases, NeoX pairs: what kRopeAppend
//                     cannot do in registers; rope_heads_epilogue)
//   rows <= kSkinnyMaxRows (8).
//
// Why: with 1..8 tokens a decode step is a chain of GEMVs that each read a
// weight matrix once; cuBLAS takes a few µs per call plus the separate
// norm / rope / swiglu launches around it. Here a layer is four launches,
// each one pass over its weights at close to DRAM speed (bench/TUNING.md#figures-moved-out-of-product-comments).
//
// Grid: one warp per output unit (several in turn for the LM head) — two adjacent weight rows (kStore,
// kAccumulate, kRopeAppend: outputs 2u and 2u+1, which is also a RoPE pair,
// so the rotation needs nothing from another warp) or a gate row and its up
// row (kSwiglu: output u). kWarps warps per CTA. Each lane owns 16-byte
// chunks lane, lane+32, ... of a row; a pass covers kChunksPerLane chunks
// per lane (2048 elements) so the first pass's weights are requested before
// the CTA stages its input rows in shared memory (the two latencies overlap).
// Lanes then reduce their partial dot products with shuffles and lane t
// writes token t's outputs.
//
// Weights kept in their GGUF blocks take skinny_gemm_quant_kernel (below):
// the same staging and epilogue (store_unit), the products on the tensor
// cores over 16-row tiles decoded once per step.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/common/ptx.cuh"
#include "kernels/common/math.h"
#include "kernels/model/activation.cuh"
#include "kernels/model/model_ops.h"
#include "kernels/model/rope_head.cuh"
#include "kernels/quant/quant_blocks.h"

namespace flashscope::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// A launch switch of this file's kernels (FLASHSCOPE_QUANT_GEMV...): what the
// environment says, read on first use, unless a setter (tests, benchmarks)
// set it before. -1 until either happens.
class EnvSwitch {
 public:
  template <typename ReadEnv>
  int get(ReadEnv read_env) {
    if (const int v = value_.load(std::memory_order_relaxed); v >= 0) return v;
    int unset = -1;
    value_.compare_exchange_strong(unset, read_env(), std::memory_order_relaxed);
    return value_.load(std::memory_order_relaxed);
  }
  void set(int v) { value_.store(v, std::memory_order_relaxed); }

 private:
  std::atomic<int> value_{-1};
};
constexpr int kChunkElems = 8;      // bf16 per 16-byte chunk
constexpr int kChunksPerLane = 8;   // per pass: 32 lanes × 8 chunks × 8 = 2048 elements of a row
constexpr int kPassElems = 32 * kChunksPerLane * kChunkElems;

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// Two floats rounded to nearest-even bf16, lo in the low half (one packed convert).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Σ of 8 products of two chunks of bf16, in order, onto acc.
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  acc = fmaf(bf16_lo(w.x), bf16_lo(x.x), acc);
  acc = fmaf(bf16_hi(w.x), bf16_hi(x.x), acc);
  acc = fmaf(bf16_lo(w.y), bf16_lo(x.y), acc);
  acc = fmaf(bf16_hi(w.y), bf16_hi(x.y), acc);
  acc = fmaf(bf16_lo(w.z), bf16_lo(x.z), acc);
  acc = fmaf(bf16_hi(w.z), bf16_hi(x.z), acc);
  acc = fmaf(bf16_lo(w.w), bf16_lo(x.w), acc);
  acc = fmaf(bf16_hi(w.w), bf16_hi(x.w), acc);
  return acc;
}

// Weights are read once per step and never by this CTA again: don't keep them in L1.
__device__ __forceinline__ uint4 load_streaming(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Staging the input rows: each thread has kStageChunks chunks in flight per
// round, all loads issued before any is used (a loop that loads and stores
// chunk by chunk pays one memory latency per chunk: 12 in a row for 8 rows
// of k = 1536, measured as the slowest part of the kernel).
// Four at 128 threads; wider CTAs keep the 512 chunks of a round (a 4096-wide
// row), fewer a thread.
template <int kCtaThreads>
constexpr int kStageChunks = kCtaThreads >= 512 ? 1 : 512 / kCtaThreads;
template <int kCtaThreads>
constexpr int kStageRound = kCtaThreads * kStageChunks<kCtaThreads>;

// Element idx = t·kc + c of the staged rows, as (token t, chunk c): one row
// needs no division (a run-time division is ~20 instructions a chunk).
template <int kTok>
__device__ __forceinline__ int token_of(int idx, int kc) {
  if constexpr (kTok == 1) return 0;
  return idx / kc;
}
template <int kTok>
__device__ __forceinline__ int chunk_of(int idx, int kc) {
  if constexpr (kTok == 1) return idx;
  return idx % kc;
}

// x [rows, k] bf16 → x_smem [kTok][kc]; rows past p.rows are zero.
template <int kTok, int kCtaThreads = kThreads>
__device__ void stage_bf16(const SkinnyGemmKernelParams& p, uint4* x_smem, int kc) {
  constexpr int kChunksT = kStageChunks<kCtaThreads>;  // chunks a thread has in flight
  const int total = kTok * kc;
  for (int base = 0; base < total; base += kStageRound<kCtaThreads>) {
    uint4 v_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = base + j * kCtaThreads + threadIdx.x;
      const int t = token_of<kTok>(idx, kc), c = chunk_of<kTok>(idx, kc);
      v_rmem[j] = idx < total && t < p.rows ? *reinterpret_cast<const uint4*>(p.x + t * p.ldx + c * kChunkElems)
                                            : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = base + j * kCtaThreads + threadIdx.x;
      if (idx < total) x_smem[idx] = v_rmem[j];
    }
  }
}

// rms_norm(xf [rows, k] fp32) · norm_weight → x_smem [kTok][kc] bf16, with
// rms_norm_kernel's formula (x · scale) · weight; rows past p.rows are zero.
// Two passes over the rows: the sums of squares (every thread a slice of
// every row, per-token partials reduced by warps then across warps in
// shared memory), then the scaled values (the second read of x hits L1).
template <int kTok, int kCtaThreads = kThreads>
__device__ void stage_rms_norm(const SkinnyGemmKernelParams& p, uint4* x_smem, int kc) {
  constexpr int kChunksT = kStageChunks<kCtaThreads>;  // chunks a thread has in flight
  __shared__ float ss_smem[kTok][kCtaThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int total = kTok * kc;
  float part[kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) part[t] = 0.0f;

  // Rows that fit one round (a decode step: 1 row of k <= 4096): x and the
  // norm weight are requested together and x stays in registers, so the
  // staging costs one memory round trip instead of two.
  if (total <= kStageRound<kCtaThreads>) {
    float4 a_rmem[kChunksT], b_rmem[kChunksT], wa_rmem[kChunksT], wb_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = j * kCtaThreads + threadIdx.x;
      const int t = token_of<kTok>(idx, kc), c = chunk_of<kTok>(idx, kc);
      const bool live = idx < total && t < p.rows;
      const float* xc = p.xf + t * p.ldxf + c * kChunkElems;
      const float* wc = p.norm_weight + c * kChunkElems;
      a_rmem[j] = live ? *reinterpret_cast<const float4*>(xc) : make_float4(0, 0, 0, 0);
      b_rmem[j] = live ? *reinterpret_cast<const float4*>(xc + 4) : make_float4(0, 0, 0, 0);
      wa_rmem[j] = live ? make_float4(wc[0], wc[1], wc[2], wc[3]) : make_float4(0, 0, 0, 0);
      wb_rmem[j] = live ? make_float4(wc[4], wc[5], wc[6], wc[7]) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int t = token_of<kTok>(j * kCtaThreads + threadIdx.x, kc);
      const float4 a = a_rmem[j], b = b_rmem[j];
      const float ss = a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) part[tt] += t == tt ? ss : 0.0f;
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) part[t] += __shfl_xor_sync(0xffffffffu, part[t], offset);
      if (lane == 0) ss_smem[t][warp] = part[t];
    }
    __syncthreads();  // every warp's partial sums are in shared memory before the scales are formed
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = j * kCtaThreads + threadIdx.x;
      if (idx >= total) continue;
      const int t = token_of<kTok>(idx, kc);
      float total_ss = 0.0f;
#pragma unroll
      for (int w = 0; w < kCtaThreads / 32; ++w) total_ss += ss_smem[t][w];
      const float sc = 1.0f / sqrtf(total_ss / float(p.k) + p.eps);
      const float4 a = a_rmem[j], b = b_rmem[j], wa = wa_rmem[j], wb = wb_rmem[j];
      x_smem[idx] = make_uint4(pack_bf16x2(a.x * sc * wa.x, a.y * sc * wa.y), pack_bf16x2(a.z * sc * wa.z, a.w * sc * wa.w),
                               pack_bf16x2(b.x * sc * wb.x, b.y * sc * wb.y), pack_bf16x2(b.z * sc * wb.z, b.w * sc * wb.w));
    }
    return;
  }
  for (int base = 0; base < total; base += kStageRound<kCtaThreads>) {
    float4 a_rmem[kChunksT], b_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = base + j * kCtaThreads + threadIdx.x;
      const int t = token_of<kTok>(idx, kc), c = chunk_of<kTok>(idx, kc);
      const bool live = idx < total && t < p.rows;
      const float* xc = p.xf + t * p.ldxf + c * kChunkElems;
      a_rmem[j] = live ? *reinterpret_cast<const float4*>(xc) : make_float4(0, 0, 0, 0);
      b_rmem[j] = live ? *reinterpret_cast<const float4*>(xc + 4) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int t = token_of<kTok>(base + j * kCtaThreads + threadIdx.x, kc);
      const float4 a = a_rmem[j], b = b_rmem[j];
      const float ss = a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) part[tt] += t == tt ? ss : 0.0f;
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) part[t] += __shfl_xor_sync(0xffffffffu, part[t], offset);
    if (lane == 0) ss_smem[t][warp] = part[t];
  }
  __syncthreads();  // every warp's partial sums are in shared memory before the scales are formed
  float scale[kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    float total_ss = 0.0f;
#pragma unroll
    for (int w = 0; w < kCtaThreads / 32; ++w) total_ss += ss_smem[t][w];
    scale[t] = 1.0f / sqrtf(total_ss / float(p.k) + p.eps);
  }
  for (int base = 0; base < total; base += kStageRound<kCtaThreads>) {
    float4 a_rmem[kChunksT], b_rmem[kChunksT], wa_rmem[kChunksT], wb_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = base + j * kCtaThreads + threadIdx.x;
      const int t = token_of<kTok>(idx, kc), c = chunk_of<kTok>(idx, kc);
      const bool live = idx < total && t < p.rows;
      const float* xc = p.xf + t * p.ldxf + c * kChunkElems;
      const float* wc = p.norm_weight + c * kChunkElems;
      a_rmem[j] = live ? *reinterpret_cast<const float4*>(xc) : make_float4(0, 0, 0, 0);
      b_rmem[j] = live ? *reinterpret_cast<const float4*>(xc + 4) : make_float4(0, 0, 0, 0);
      wa_rmem[j] = live ? make_float4(wc[0], wc[1], wc[2], wc[3]) : make_float4(0, 0, 0, 0);
      wb_rmem[j] = live ? make_float4(wc[4], wc[5], wc[6], wc[7]) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = base + j * kCtaThreads + threadIdx.x;
      if (idx >= total) continue;
      const int t = token_of<kTok>(idx, kc);
      float sc = 0.0f;
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) sc = t == tt ? scale[tt] : sc;
      const float4 a = a_rmem[j], b = b_rmem[j], wa = wa_rmem[j], wb = wb_rmem[j];
      x_smem[idx] = make_uint4(pack_bf16x2(a.x * sc * wa.x, a.y * sc * wa.y), pack_bf16x2(a.z * sc * wa.z, a.w * sc * wa.w),
                               pack_bf16x2(b.x * sc * wb.x, b.y * sc * wb.y), pack_bf16x2(b.z * sc * wb.z, b.w * sc * wb.w));
    }
  }
}

// Paged attention's split-KV partials → x_smem [kTok][kc] bf16: the combine
// kernel's merge, done here for the rows this CTA needs (every CTA of the O
// projection merges the same few rows from L2: cheaper than a launch of its
// own in a decode step). A chunk of 8 columns lies inside one head; its
// thread reads every split's lse and 8 columns of its partial.
constexpr int kMergeBatch = 8;  // splits whose loads are in flight together
template <int kTok, int kCtaThreads = kThreads>
__device__ void stage_split_kv(const SkinnyGemmKernelParams& p, uint4* x_smem, int kc) {
  const SkinnySplitKvInput& s = p.split_kv;
  const int total = kTok * kc;
  for (int idx = threadIdx.x; idx < total; idx += kCtaThreads) {
    const int t = token_of<kTok>(idx, kc), c = chunk_of<kTok>(idx, kc);
    if (t >= p.rows) {
      x_smem[idx] = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int h = c * kChunkElems / s.head_dim, d0 = c * kChunkElems % s.head_dim;
    const int64_t row = (int64_t(t / s.q_len) * s.q_heads + h) * s.q_len + t % s.q_len;
    // One pass, kMergeBatch splits' loads at a time, rescaling what is summed
    // so far when a batch raises the max (the online softmax over splits).
    float m = -INFINITY, sum = 0.0f, acc[kChunkElems] = {};
    for (int s0 = 0; s0 < s.num_splits; s0 += kMergeBatch) {
      float lse_rmem[kMergeBatch];
      float4 lo_rmem[kMergeBatch], hi_rmem[kMergeBatch];
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const bool live = s0 + j < s.num_splits;
        const float* o = s.o_partial + ((s0 + j) * s.partial_rows + row) * s.head_dim + d0;
        lse_rmem[j] = live ? __ldcg(s.lse_partial + (s0 + j) * s.partial_rows + row) : -INFINITY;
        lo_rmem[j] = live ? __ldcg(reinterpret_cast<const float4*>(o)) : make_float4(0, 0, 0, 0);
        hi_rmem[j] = live ? __ldcg(reinterpret_cast<const float4*>(o) + 1) : make_float4(0, 0, 0, 0);
      }
      float m_new = m;
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) m_new = fmaxf(m_new, lse_rmem[j]);
      if (m_new == -INFINITY) continue;  // no split so far saw a key
      const float rescale = __expf(m - m_new);  // 0 while m is still -inf
      sum *= rescale;
#pragma unroll
      for (int e = 0; e < kChunkElems; ++e) acc[e] *= rescale;
      m = m_new;
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const float w = __expf(lse_rmem[j] - m);  // 0 for a split that saw no key
        sum += w;
        acc[0] += w * lo_rmem[j].x;
        acc[1] += w * lo_rmem[j].y;
        acc[2] += w * lo_rmem[j].z;
        acc[3] += w * lo_rmem[j].w;
        acc[4] += w * hi_rmem[j].x;
        acc[5] += w * hi_rmem[j].y;
        acc[6] += w * hi_rmem[j].z;
        acc[7] += w * hi_rmem[j].w;
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    x_smem[idx] = make_uint4(pack_bf16x2(acc[0] * inv, acc[1] * inv), pack_bf16x2(acc[2] * inv, acc[3] * inv),
                             pack_bf16x2(acc[4] * inv, acc[5] * inv), pack_bf16x2(acc[6] * inv, acc[7] * inv));
  }
}

// kAddRmsNorm's staging: Gemma's post-norm and residual add, then the
// pre-norm (add_rms_norm_kernel's formulas, then stage_rms_norm's):
//   r [t] = xf[t] + rms_norm(res_y[t]) · res_weight      (CTA 0 stores r into res_out)
//   x_smem [kTok][kc] bf16 = rms_norm(r[t]) · norm_weight; rows past p.rows are zero.
// Three passes over the rows, kFuseChunks chunks of loads in flight per
// thread: Σ res_y², then Σ r², then r again into bf16 (recomputed from the
// same loads by the same instructions, so every CTA and the stored copy hold
// one r). A decode step's rows are a few KiB: the later passes hit L1.
template <int kCtaThreads>
constexpr int kFuseChunks = kCtaThreads >= 256 ? 1 : 256 / kCtaThreads;
template <int kCtaThreads>
constexpr int kFuseRound = kCtaThreads * kFuseChunks<kCtaThreads>;

// Per-token sums of every thread's part[t] over the CTA, into every thread's
// part[t]; sums_smem is free again when this returns.
template <int kTok, int kCtaThreads = kThreads>
__device__ __forceinline__ void cta_token_sums(float (&part)[kTok], float (*sums_smem)[kCtaThreads / 32]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) part[t] += __shfl_xor_sync(0xffffffffu, part[t], offset);
    if (lane == 0) sums_smem[t][warp] = part[t];
  }
  __syncthreads();  // every warp's partial sums are in shared memory
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kCtaThreads / 32; ++w) total += sums_smem[t][w];
    part[t] = total;
  }
  __syncthreads();  // every thread has read them before a next call overwrites them
}

// 8 fp32 of a chunk (two float4), zeros when !live.
struct Chunk8 {
  float4 a, b;
};
__device__ __forceinline__ Chunk8 load_chunk8(const float* p, bool live) {
  if (!live) return {make_float4(0, 0, 0, 0), make_float4(0, 0, 0, 0)};
  return {*reinterpret_cast<const float4*>(p), *reinterpret_cast<const float4*>(p + 4)};
}
__device__ __forceinline__ float sum_squares(const Chunk8& v) {
  return v.a.x * v.a.x + v.a.y * v.a.y + v.a.z * v.a.z + v.a.w * v.a.w + v.b.x * v.b.x + v.b.y * v.b.y +
         v.b.z * v.b.z + v.b.w * v.b.w;
}
// x + y · y_scale · w element-wise: add_rms_norm_kernel's residual, one fma per element.
__device__ __forceinline__ float residual1(float x, float y, float y_scale, float w) {
  return __fmaf_rn(y * y_scale, w, x);
}
__device__ __forceinline__ Chunk8 residual8(const Chunk8& x, const Chunk8& y, float y_scale, const Chunk8& w) {
  return {make_float4(residual1(x.a.x, y.a.x, y_scale, w.a.x), residual1(x.a.y, y.a.y, y_scale, w.a.y),
                      residual1(x.a.z, y.a.z, y_scale, w.a.z), residual1(x.a.w, y.a.w, y_scale, w.a.w)),
          make_float4(residual1(x.b.x, y.b.x, y_scale, w.b.x), residual1(x.b.y, y.b.y, y_scale, w.b.y),
                      residual1(x.b.z, y.b.z, y_scale, w.b.z), residual1(x.b.w, y.b.w, y_scale, w.b.w))};
}
// Element idx = t · kc + c of the rows: where token t's chunk c lies in each input.
struct FuseChunk {
  int t, c;
  bool live;  // idx < total and t < p.rows
};
template <int kTok>
__device__ __forceinline__ FuseChunk fuse_chunk(const SkinnyGemmKernelParams& p, int idx, int kc, int total) {
  const int t = token_of<kTok>(idx, kc);
  return {t, chunk_of<kTok>(idx, kc), idx < total && t < p.rows};
}
// The value of `from` (per token) that belongs to token t (registers only: t is not a constant).
template <int kTok>
__device__ __forceinline__ float token_value(const float (&from)[kTok], int t) {
  float v = 0.0f;
#pragma unroll
  for (int tt = 0; tt < kTok; ++tt) v = t == tt ? from[tt] : v;
  return v;
}

template <int kTok, int kCtaThreads = kThreads>
__device__ void stage_add_rms_norm(const SkinnyGemmKernelParams& p, uint4* x_smem, int kc) {
  constexpr int kChunksT = kFuseChunks<kCtaThreads>;  // chunks a thread has in flight
  __shared__ float sums_smem[kTok][kCtaThreads / 32];
  const SkinnyResidualInput& q = p.residual;
  const int total = kTok * kc;
  const bool store = blockIdx.x == 0 && q.res_out != nullptr;
  float y_scale[kTok], x_scale[kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) y_scale[t] = x_scale[t] = 0.0f;

  for (int base = 0; base < total; base += kFuseRound<kCtaThreads>) {  // Σ res_y² per token
    Chunk8 y_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const FuseChunk e = fuse_chunk<kTok>(p, base + j * kCtaThreads + threadIdx.x, kc, total);
      y_rmem[j] = load_chunk8(q.res_y + e.t * q.ld_res_y + e.c * kChunkElems, e.live);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int t = fuse_chunk<kTok>(p, base + j * kCtaThreads + threadIdx.x, kc, total).t;
      const float ss = sum_squares(y_rmem[j]);
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) y_scale[tt] += t == tt ? ss : 0.0f;
    }
  }
  cta_token_sums<kTok, kCtaThreads>(y_scale, sums_smem);
#pragma unroll
  for (int t = 0; t < kTok; ++t) y_scale[t] = 1.0f / sqrtf(y_scale[t] / float(p.k) + p.eps);

  for (int base = 0; base < total; base += kFuseRound<kCtaThreads>) {  // r, stored by CTA 0; Σ r² per token
    Chunk8 x_rmem[kChunksT], y_rmem[kChunksT], w_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const FuseChunk e = fuse_chunk<kTok>(p, base + j * kCtaThreads + threadIdx.x, kc, total);
      x_rmem[j] = load_chunk8(p.xf + e.t * p.ldxf + e.c * kChunkElems, e.live);
      y_rmem[j] = load_chunk8(q.res_y + e.t * q.ld_res_y + e.c * kChunkElems, e.live);
      w_rmem[j] = load_chunk8(q.res_weight + e.c * kChunkElems, e.live);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const FuseChunk e = fuse_chunk<kTok>(p, base + j * kCtaThreads + threadIdx.x, kc, total);
      const Chunk8 r = residual8(x_rmem[j], y_rmem[j], token_value<kTok>(y_scale, e.t), w_rmem[j]);
      if (store && e.live) {
        float* out = q.res_out + e.t * q.ld_res_out + e.c * kChunkElems;
        *reinterpret_cast<float4*>(out) = r.a;
        *reinterpret_cast<float4*>(out + 4) = r.b;
      }
      const float ss = e.live ? sum_squares(r) : 0.0f;
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) x_scale[tt] += e.t == tt ? ss : 0.0f;
    }
  }
  cta_token_sums<kTok, kCtaThreads>(x_scale, sums_smem);
#pragma unroll
  for (int t = 0; t < kTok; ++t) x_scale[t] = 1.0f / sqrtf(x_scale[t] / float(p.k) + p.eps);

  for (int base = 0; base < total; base += kFuseRound<kCtaThreads>) {  // bf16(r · x_scale · norm_weight)
    Chunk8 x_rmem[kChunksT], y_rmem[kChunksT], w_rmem[kChunksT], n_rmem[kChunksT];
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const FuseChunk e = fuse_chunk<kTok>(p, base + j * kCtaThreads + threadIdx.x, kc, total);
      x_rmem[j] = load_chunk8(p.xf + e.t * p.ldxf + e.c * kChunkElems, e.live);
      y_rmem[j] = load_chunk8(q.res_y + e.t * q.ld_res_y + e.c * kChunkElems, e.live);
      w_rmem[j] = load_chunk8(q.res_weight + e.c * kChunkElems, e.live);
      n_rmem[j] = load_chunk8(p.norm_weight + e.c * kChunkElems, e.live);
    }
#pragma unroll
    for (int j = 0; j < kChunksT; ++j) {
      const int idx = base + j * kCtaThreads + threadIdx.x;
      const FuseChunk e = fuse_chunk<kTok>(p, idx, kc, total);
      if (idx >= total) continue;
      const Chunk8 r = residual8(x_rmem[j], y_rmem[j], token_value<kTok>(y_scale, e.t), w_rmem[j]);
      const float sc = token_value<kTok>(x_scale, e.t);
      const float4 a = r.a, b = r.b, wa = n_rmem[j].a, wb = n_rmem[j].b;
      x_smem[idx] = !e.live ? make_uint4(0, 0, 0, 0)
                            : make_uint4(pack_bf16x2(a.x * sc * wa.x, a.y * sc * wa.y),
                                         pack_bf16x2(a.z * sc * wa.z, a.w * sc * wa.w),
                                         pack_bf16x2(b.x * sc * wb.x, b.y * sc * wb.y),
                                         pack_bf16x2(b.z * sc * wb.z, b.w * sc * wb.w));
    }
  }
}

// The input rows into x_smem [kTok][kc] bf16, from whichever input p names
// (kAddRmsNorm only where kAddNorm: the kernel that leaves it out keeps its
// registers, see skinny_gemm_kernel).
template <int kTok, bool kAddNorm = true, int kCtaThreads = kThreads>
__device__ __forceinline__ void stage_input(const SkinnyGemmKernelParams& p, uint4* x_smem, int kc) {
  if (p.input == SkinnyInput::kBf16) {
    stage_bf16<kTok, kCtaThreads>(p, x_smem, kc);
  } else if (p.input == SkinnyInput::kRmsNorm) {
    stage_rms_norm<kTok, kCtaThreads>(p, x_smem, kc);
  } else if (p.input == SkinnyInput::kAddRmsNorm) {
    if constexpr (kAddNorm) stage_add_rms_norm<kTok, kCtaThreads>(p, x_smem, kc);
  } else {
    stage_split_kv<kTok, kCtaThreads>(p, x_smem, kc);
  }
}

// What an output unit's epilogue reads besides its sums (the residual it
// adds to, the RoPE angle and the K/V slot), for token t of the unit whose
// first row is r. Requested while the input rows are staged, so the stores
// at the end wait for no load.
struct EpilogueInputs {
  float y0 = 0.0f, y1 = 0.0f;  // kAccumulate: y[t][r], y[t][r + 1]
  float c = 1.0f, s = 0.0f;    // kRopeAppend: cos, sin of the pair's angle (identity when not rotated)
  int64_t slot = -1;           // kRopeAppend, k and v heads: the token's pool slot
};

__device__ EpilogueInputs load_epilogue_inputs(const SkinnyGemmKernelParams& p, int t, int r, bool has1) {
  EpilogueInputs e;
  if (p.output == SkinnyOutput::kAccumulate) {
    e.y0 = p.y[t * p.ldy + r];
    if (has1) e.y1 = p.y[t * p.ldy + r + 1];
  } else if (p.output == SkinnyOutput::kRopeAppend) {
    const RopeAppendKernelParams& q = p.rope;
    const int head = r / q.head_dim, i = (r % q.head_dim) / 2;
    if (head < q.q_heads + q.kv_heads && 2 * i < q.rope_dim) {
      const int rope_pairs = q.rope_dim / 2;
      e.c = q.rope_cos[t * rope_pairs + i];
      e.s = q.rope_sin[t * rope_pairs + i];
    }
    if (head >= q.q_heads) e.slot = q.slots[t];
  }
  return e;
}

// RoPE on the pair (a, b) = outputs (r, r+1) of the QKV row space, then q out
// or K/V into its page slot: rope_append_kernel's arithmetic, element for element.
__device__ void rope_append_pair(const RopeAppendKernelParams& p, int t, int r, float a, float b,
                                 const EpilogueInputs& e) {
  const int head = r / p.head_dim;
  const int i = (r % p.head_dim) / 2;
  const bool is_v = head >= p.q_heads + p.kv_heads;
  if (!is_v && 2 * i < p.rope_dim) {
    const float x0 = a, x1 = b;
    a = x0 * e.c - x1 * e.s;
    b = x0 * e.s + x1 * e.c;
  }
  const uint32_t packed = pack_bf16x2(a, b);
  if (head < p.q_heads) {
    *reinterpret_cast<uint32_t*>(p.q_out + t * p.q_stride + r) = packed;
    return;
  }
  const int64_t slot = e.slot;
  if (slot < 0 || (p.num_slots > 0 && slot >= p.num_slots)) return;
  const int64_t page = slot / p.page_size, offset = slot % p.page_size;
  const int kv_head = is_v ? head - p.q_heads - p.kv_heads : head - p.q_heads;
  const int64_t dst = ((page * p.kv_heads + kv_head) * p.page_size + offset) * p.head_dim + 2 * i;
  *reinterpret_cast<uint32_t*>((is_v ? p.v_pages : p.k_pages) + dst) = packed;
}

// An output unit: two adjacent weight rows (kStore, kAccumulate,
// kRopeAppend: outputs row0 = 2u and row1 = 2u + 1 of the output space, a
// RoPE pair) or a gate row and its up row (kSwiglu, kGegluTanh: output u);
// has0/has1 whether each row exists.
struct UnitRows {
  int unit, row0, row1;
  bool has0, has1;
};

// Token t's outputs of unit r, the unit's two dot products a (row0) and b
// (row1): the epilogue both kernels share.
__device__ __forceinline__ void store_unit(const SkinnyGemmKernelParams& p, int t, const UnitRows& r, float a, float b,
                                           const EpilogueInputs& e) {
  switch (p.output) {
    case SkinnyOutput::kStore:
    case SkinnyOutput::kRopeHeads:
      p.y[t * p.ldy + r.row0] = a;
      if (r.has1) p.y[t * p.ldy + r.row1] = b;
      break;
    case SkinnyOutput::kAccumulate:
      p.y[t * p.ldy + r.row0] = e.y0 + a;
      if (r.has1) p.y[t * p.ldy + r.row1] = e.y1 + b;
      break;
    case SkinnyOutput::kSwiglu:
      p.act[t * p.ld_act + r.unit] = __bfloat16_as_ushort(__float2bfloat16_rn(gated(GateActivation::kSilu, a, b)));
      break;
    case SkinnyOutput::kGegluTanh:
      p.act[t * p.ld_act + r.unit] = __bfloat16_as_ushort(__float2bfloat16_rn(gated(GateActivation::kGeluTanh, a, b)));
      break;
    case SkinnyOutput::kRopeAppend:
      rope_append_pair(p.rope, t, r.row0, a, b, e);
      break;
  }
}

// kRopeHeads, after the CTA's rows of qkv are stored: a CTA's kWarps units
// are 2·kWarps rows of one head, head_dim / (2·kWarps) CTAs a head. Each
// counts itself in its head's counter (its stores released first); the last
// one (its reads acquired after the count, from L2) runs rope_append's
// arithmetic on the head for every token, a warp a token, and sets the
// counter back to zero: no other CTA of this grid counts that head again,
// and the next launch on the counters starts after this grid completes.
__device__ void rope_heads_epilogue(const SkinnyGemmKernelParams& p) {
  __shared__ int last_smem;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const RopeAppendKernelParams& q = p.rope;
  constexpr int kRowsPerCta = 2 * kWarps;
  const int head = blockIdx.x * kRowsPerCta / q.head_dim;
  fence_acq_rel_gpu();  // this thread's stores of qkv before the count
  __syncthreads();      // every thread's stores (and fences) before thread 0 counts
  if (threadIdx.x == 0) {
    const int done = atomicAdd(p.rope_counters + head, 1) + 1;
    last_smem = done == q.head_dim / kRowsPerCta;
    if (last_smem) {
      p.rope_counters[head] = 0;
      fence_acq_rel_gpu();  // the other CTAs' stores, counted before ours, are visible to the reads below
    }
  }
  __syncthreads();  // last_smem is written
  if (!last_smem) return;
  for (int t = warp; t < p.rows; t += kWarps) {
    rope_head::Lane r;
    rope_head::prepare(q, t, head, lane, r);
    rope_head::finish(q, t, head, lane, r);
  }
}

// kFolds: the code of the two kernels a decode step folds into its GEMMs
// (kAddRmsNorm's staging, kRopeHeads' epilogue) is compiled in. Without it
// the kernel keeps the registers of its plain paths, and one more CTA an SM
// (bench/TUNING.md#engine); the launch takes the folding kernel only for the
// calls that fold. The plain four-row kernel is held to three CTAs an SM,
// which ptxas otherwise leaves it short of registers for (bench/TUNING.md#engine);
// 0 leaves the others free, which is not the same code as asking for one CTA.
constexpr int skinny_min_ctas(int tok, bool folds) { return tok == 4 && !folds ? 3 : 0; }

template <int kTok, bool kFolds>
__global__ void __launch_bounds__(kThreads, skinny_min_ctas(kTok, kFolds)) skinny_gemm_kernel(const __grid_constant__ SkinnyGemmKernelParams p) {
  extern __shared__ uint4 x_smem[];  // [kTok][k / 8] bf16 chunks of the (normalized) input rows
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kc = p.k / kChunkElems;
  const bool swiglu = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;  // gate/up units
  const int passes = ceil_div(p.k, kPassElems);

  // Unit u of this warp: its two weight rows and whether each exists.
  auto rows_of = [&](int u) {
    UnitRows r;
    r.unit = (blockIdx.x * p.units_per_warp + u) * kWarps + warp;
    r.row0 = swiglu ? r.unit : 2 * r.unit;
    r.row1 = swiglu ? r.unit + p.n_out : 2 * r.unit + 1;
    r.has0 = swiglu ? r.unit < p.n_out : r.row0 < p.n_out;
    r.has1 = swiglu ? r.has0 : r.row1 < p.n_out;
    return r;
  };
  uint4 w_rmem[2][kChunksPerLane];
  auto load_pass = [&](const UnitRows& r, int pass) {
    const uint16_t* w0 = p.w + int64_t(r.row0) * p.k;
    const uint16_t* w1 = p.w + int64_t(r.row1) * p.k;
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const int c = pass * 32 * kChunksPerLane + i * 32 + lane;
      w_rmem[0][i] = r.has0 && c < kc ? load_streaming(w0 + c * kChunkElems) : make_uint4(0, 0, 0, 0);
      w_rmem[1][i] = r.has1 && c < kc ? load_streaming(w1 + c * kChunkElems) : make_uint4(0, 0, 0, 0);
    }
  };

  // The weights do not depend on the kernel before this one: request them,
  // then wait for that kernel's outputs (x, o or act; programmatic dependent
  // launch, see launch_skinny_gemm), and let the next kernel start its own
  // weight requests while this one finishes.
  load_pass(rows_of(0), 0);
  pdl_wait();
  pdl_launch_dependents();
  // Lane t's epilogue inputs for token t of unit 0 (later units load theirs at the end).
  EpilogueInputs epi;
  {
    const UnitRows r0 = rows_of(0);
    if (lane < kTok && lane < p.rows && r0.has0 && !swiglu) epi = load_epilogue_inputs(p, lane, r0.row0, r0.has1);
  }
  stage_input<kTok, kFolds>(p, x_smem, kc);
  __syncthreads();  // every input row is in shared memory before any warp reads one

  // A warp takes units_per_warp units in turn (the LM head's 24576 units in
  // 512 CTAs: the staging above is paid once per 48 units, not per 4).
  for (int u = 0; u < p.units_per_warp; ++u) {
    const UnitRows r = rows_of(u);
    float acc_rmem[2][kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc_rmem[0][t] = acc_rmem[1][t] = 0.0f;
    for (int pass = 0; pass < passes; ++pass) {
      // Pass 0 of unit u was requested before (the prologue, or unit u-1) when a row is one pass.
      if (pass > 0 || (u > 0 && passes > 1)) load_pass(r, pass);
#pragma unroll
      for (int i = 0; i < kChunksPerLane; ++i) {
        const int c = pass * 32 * kChunksPerLane + i * 32 + lane;
        if (c >= kc) break;
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          const uint4 x = x_smem[t * kc + c];
          acc_rmem[0][t] = dot8(w_rmem[0][i], x, acc_rmem[0][t]);
          acc_rmem[1][t] = dot8(w_rmem[1][i], x, acc_rmem[1][t]);
        }
      }
    }
    // The next unit's weights are in flight during this one's reduction and stores.
    if (passes == 1 && u + 1 < p.units_per_warp) load_pass(rows_of(u + 1), 0);
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        acc_rmem[0][t] += __shfl_xor_sync(0xffffffffu, acc_rmem[0][t], offset);
        acc_rmem[1][t] += __shfl_xor_sync(0xffffffffu, acc_rmem[1][t], offset);
      }
    }
    if (!r.has0) break;  // units only grow with u

    // Lane t writes token t (the loop keeps acc_rmem's indices compile-time).
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (lane != t || t >= p.rows) continue;
      const float a = acc_rmem[0][t], b = acc_rmem[1][t];
      if (u > 0 && !swiglu) epi = load_epilogue_inputs(p, t, r.row0, r.has1);
      store_unit(p, t, r, a, b, epi);
    }
  }
  if constexpr (kFolds) {
    if (p.output == SkinnyOutput::kRopeHeads) rope_heads_epilogue(p);  // uniform over the grid: no warp returned above
  }
}


// The same products over weights kept in their GGUF blocks (p.wq), on the
// tensor cores. A warp's mma.m16n8k16 multiplies a tile of 16 weight rows
// (8 units: unit g's row0 as the tile's row g, its row1 as row g + 8) by the
// token rows (8 columns; those past kTok are zeros), so each weight is
// decoded once per step however many rows the step has: rows 1..8 cost the
// same. Lane (g, c) = (lane / 4, lane % 4) decodes part c (quant_blocks.h:
// one group, or the two groups of a K-quant that share their bytes) of unit
// g's two rows in each step and rounds each value to bf16 as dequantize_bf16
// does, so a decode step multiplies by exactly the weights cuBLAS reads in a
// prompt step. The order of k inside an mma is free as long as A and B agree:
// lane (g, c)'s 4 k-slots of an mma are 4 consecutive elements of its own
// part's group, and its B fragment is token g's input at the same elements.
//
// Why not FP32 multiply-adds or dp4a: at 8 rows the
// multiply-adds were 8 per weight on top of the decode, beyond what an SM
// issues per weight byte at HBM speed; the mma leaves only the decode (about
// 4 instructions a weight). dp4a would multiply by int8-rounded inputs,
// another model than the bf16 weights the prompt path multiplies by.
//
// Grid: as many CTAs as the device holds at once, up to one per tile; a
// CTA takes tiles blockIdx.x, + gridDim.x, ...; its kWarps warps
// split a tile's steps (warp w: steps w, w + kWarps, ...), each with the
// next step's bytes (at a tile's end, the next tile's) in flight while it
// decodes the current one. Their fragments are summed through shared memory
// and warp 0 writes the tile (lane (g, c): unit g, tokens 2c and 2c + 1)
// through the bf16 kernel's epilogue.
//
//   w rows: kStore / kAccumulate / kRopeAppend outputs [row_begin, row_end) of n_out,
//           row r at data + (r − row_begin)·row_bytes; kSwiglu / kGegluTanh gate row u
//           at data, up row u at up_data.
constexpr int kTileUnits = 8;  // units per tile: 16 weight rows, the mma's M
// The quantized kernels' static shared memory (frag_smem, stage_rms_norm's
// sums: 2.3 KiB at 8 rows; the int8 GEMV's partial_smem and those sums:
// 2.5 KiB), rounded up: what its input rows leave of a CTA's.
constexpr size_t kQuantStaticSmem = 4 * 1024;

// What the current device lets a quantized kernel's CTA opt into beyond
// kQuantStaticSmem (0 without a device).
size_t quant_smem_optin() {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // no device: nothing fits, and no error is left for the next call to find
    return 0;
  }
  return size_t(optin) > kQuantStaticSmem ? size_t(optin) - kQuantStaticSmem : 0;
}

struct QuantUnit {
  UnitRows rows;
  const uint8_t* w0;  // row0's bytes
  const uint8_t* w1;  // row1's bytes
};

// Unit g of tile `tile` (pointer arithmetic only: a tile past the end is never read).
__device__ __forceinline__ QuantUnit quant_unit(const SkinnyGemmKernelParams& p, bool swiglu, int tile, int g) {
  const SkinnyQuantWeights& wq = p.wq;
  QuantUnit u;
  UnitRows& r = u.rows;
  r.unit = tile * kTileUnits + g;
  if (swiglu) {
    r.row0 = r.row1 = r.unit;
    r.has0 = r.has1 = r.unit < p.n_out;
    u.w0 = wq.data + int64_t(r.unit) * wq.row_bytes;
    u.w1 = wq.up_data + int64_t(r.unit) * wq.row_bytes;
  } else {
    r.row0 = wq.row_begin + 2 * r.unit;
    r.row1 = r.row0 + 1;
    r.has0 = r.row0 < wq.row_end;
    r.has1 = r.row1 < wq.row_end;
    u.w0 = wq.data + int64_t(r.row0 - wq.row_begin) * wq.row_bytes;
    u.w1 = u.w0 + wq.row_bytes;
  }
  return u;
}

// Part `part` of step `step` of the unit's two rows (a row that does not
// exist, or a part past the row's last group, is not read).
template <int kType>
__device__ __forceinline__ void load_unit_part(const QuantUnit& u, int step, int part, bool live,
                                               quant::PartBytes (&b)[2]) {
  if (live && u.rows.has0) quant::load_part<kType>(u.w0, step, part, b[0]);
  if (live && u.rows.has1) quant::load_part<kType>(u.w1, step, part, b[1]);
}

// Group `sub` of a loaded part as 16 bf16 pairs (elements 2i, 2i + 1), zeros where `has` is false.
template <int kType>
__device__ __forceinline__ void bf16_group(const quant::PartBytes& b, int part, int sub, bool has, uint32_t (&w)[16]) {
  if (!has) {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = 0u;
    return;
  }
  float q[quant::kGroup];
  const quant::GroupScales s = quant::decode_part<kType>(b, part, sub, q);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    w[i] = pack_bf16x2(quant::group_value(s, 2 * i, q[2 * i]), quant::group_value(s, 2 * i + 1, q[2 * i + 1]));
  }
}

// acc (the tile's m16n8 fragment) += the part's groups · the tokens' inputs.
// x_row: this lane's token row in shared memory, read where has_x (its token
// is below kTok). Every lane runs every mma (mma.sync), with zeros where it
// has nothing.
template <int kType>
__device__ __forceinline__ void mma_part(const quant::PartBytes (&b)[2], const QuantUnit& u, int step, int part,
                                         int groups, const uint16_t* x_row, bool has_x, float (&acc)[4]) {
#pragma unroll
  for (int sub = 0; sub < quant::part_groups(kType); ++sub) {
    const int g = quant::part_group(kType, step, part, sub);
    const bool live = g < groups;
    uint32_t w0[16], w1[16];
    bf16_group<kType>(b[0], part, sub, live && u.rows.has0, w0);
    bf16_group<kType>(b[1], part, sub, live && u.rows.has1, w1);
    const uint4* xg = reinterpret_cast<const uint4*>(x_row + int64_t(live ? g : 0) * quant::kGroup);
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // elements 8c .. 8c + 7 of the group: two mmas of 4 each
      const uint4 xv = live && has_x ? xg[c] : make_uint4(0, 0, 0, 0);
      const uint32_t a_lo[4] = {w0[4 * c], w1[4 * c], w0[4 * c + 1], w1[4 * c + 1]};
      const uint32_t b_lo[2] = {xv.x, xv.y};
      MmaType<__nv_bfloat16>::mma(a_lo, b_lo, acc);
      const uint32_t a_hi[4] = {w0[4 * c + 2], w1[4 * c + 2], w0[4 * c + 3], w1[4 * c + 3]};
      const uint32_t b_hi[2] = {xv.z, xv.w};
      MmaType<__nv_bfloat16>::mma(a_hi, b_hi, acc);
    }
  }
}

// CTAs an SM holds that the quantized kernel's registers are capped for:
// 3 keeps the K-quant instantiations at <= 168 registers (from ~210 on
// sm_90a, 4 bytes of spills in three of them): 12 warps an SM with their
// next steps' bytes in flight instead of 8. Not yet measured against 1 (no
// cap): bench/quant_gemm_sweep.sh times both.
#ifndef FLASHSCOPE_QUANT_GEMM_MIN_CTAS
#define FLASHSCOPE_QUANT_GEMM_MIN_CTAS 3
#endif

template <int kTok, int kType>
__global__ void __launch_bounds__(kThreads, FLASHSCOPE_QUANT_GEMM_MIN_CTAS) skinny_gemm_quant_kernel(const __grid_constant__ SkinnyGemmKernelParams p) {
  extern __shared__ uint4 x_smem[];             // [kTok][k / 8] bf16 chunks of the (normalized) input rows
  __shared__ float4 frag_smem[kWarps][32];      // each warp's share of the tile, summed by warp 0
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, part = lane % 4;
  const int kc = p.k / kChunkElems;
  const int groups = p.k / quant::kGroup;
  constexpr int kStepGroups = quant::step_groups(kType);
  const int steps = ceil_div(groups, kStepGroups);
  const bool swiglu = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;  // gate/up units
  const int units = swiglu ? p.n_out : (p.wq.row_end - p.wq.row_begin + 1) / 2;
  const int tiles = ceil_div(units, kTileUnits);
  auto live = [&](int step) { return quant::part_group(kType, step, part, 0) < groups; };

  quant::PartBytes cur[2] = {}, nxt[2] = {};
  int tile = blockIdx.x;
  QuantUnit u = quant_unit(p, swiglu, tile, gid);
  // The weights do not depend on the kernel before this one: the first
  // step's are requested, then that kernel's outputs waited for (see
  // launch_skinny_gemm), and the next kernel may start its own requests.
  if (tile < tiles && warp < steps) load_unit_part<kType>(u, warp, part, live(warp), cur);
  pdl_wait();
  pdl_launch_dependents();
  stage_input<kTok>(p, x_smem, kc);
  __syncthreads();  // every input row is in shared memory before any warp reads one
  const bool has_x = gid < kTok;
  const uint16_t* x_row = reinterpret_cast<const uint16_t*>(x_smem) + int64_t(has_x ? gid : 0) * p.k;

  for (; tile < tiles; tile += gridDim.x) {
    // Warp 0's lanes write tokens 2c and 2c + 1 of unit g: what their epilogue reads goes out now.
    EpilogueInputs epi[2];
    if (warp == 0 && !swiglu && u.rows.has0) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int t = 2 * part + j;
        if (t < kTok && t < p.rows) epi[j] = load_epilogue_inputs(p, t, u.rows.row0, u.rows.has1);
      }
    }
    const int next_tile = tile + gridDim.x;
    const QuantUnit next_u = quant_unit(p, swiglu, next_tile, gid);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int step = warp; step < steps; step += kWarps) {
      if (step + kWarps < steps) {
        load_unit_part<kType>(u, step + kWarps, part, live(step + kWarps), nxt);
      } else if (next_tile < tiles) {
        load_unit_part<kType>(next_u, warp, part, live(warp), nxt);
      }
      mma_part<kType>(cur, u, step, part, groups, x_row, has_x, acc);
      cur[0] = nxt[0];
      cur[1] = nxt[1];
    }
    frag_smem[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();  // every warp's share is in shared memory
    if (warp == 0) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float4 f = frag_smem[w][lane];
        c[0] += f.x;
        c[1] += f.y;
        c[2] += f.z;
        c[3] += f.w;
      }
      // c[j]: row0 at token 2c + j; c[2 + j]: row1 at token 2c + j (the m16n8 accumulator's layout)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int t = 2 * part + j;
        if (t < kTok && t < p.rows && u.rows.has0) store_unit(p, t, u.rows, c[j], c[2 + j], epi[j]);
      }
    }
    __syncthreads();  // frag_smem is read before the next tile's shares overwrite it
    u = next_u;
  }
}

// Above this many CTAs a warp takes several units (the LM head); below, one
// (a layer's products: 72 to 384 CTAs, every one on its own SM slot).
constexpr int kMaxCtas = 512;

int units_per_warp_for(int units) {
  const int warps = ceil_div(units, kWarps) * kWarps;
  return std::max(1, warps / (kMaxCtas * kWarps));
}

// cudaFuncSetAttribute holds for the current device only: once per kernel
// and device (devices 0-63; past them on every launch).
template <auto kKernel>
cudaError_t opt_in_dynamic_smem(int bytes) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_relaxed) & bit) != 0) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_relaxed);
  return e;
}

template <int kTok>
cudaError_t launch_tokens(SkinnyGemmKernelParams p, cudaStream_t stream, bool programmatic) {
  const bool gated_units = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;
  const int units = gated_units ? p.n_out : (p.n_out + 1) / 2;
  p.units_per_warp = units_per_warp_for(units);
  if (p.output == SkinnyOutput::kRopeHeads && !skinny_gemm_rope_heads_supported(p.n_out, p.rope.head_dim))
    return cudaErrorInvalidValue;
  // The staging's static shared memory comes on top of the rows (up to 48
  // KiB, model_ops_cuda.cpp): past the default limit without this opt-in.
  const bool folds = p.input == SkinnyInput::kAddRmsNorm || p.output == SkinnyOutput::kRopeHeads;
  auto kernel = folds ? skinny_gemm_kernel<kTok, true> : skinny_gemm_kernel<kTok, false>;
  if (const cudaError_t e = folds ? opt_in_dynamic_smem<skinny_gemm_kernel<kTok, true>>(48 * 1024)
                                  : opt_in_dynamic_smem<skinny_gemm_kernel<kTok, false>>(48 * 1024);
      e != cudaSuccess)
    return e;
  return launch_maybe_programmatic(kernel, dim3(ceil_div(units, kWarps * p.units_per_warp)), dim3(kThreads),
                                   size_t(kTok) * p.k * sizeof(uint16_t), stream, programmatic, p);
}

// The CTAs of a quantized kernel that takes its tiles in turn: as many as
// the device holds at once (its occupancy, at most per_sm_cap an SM, times
// the SMs), as each CTA stages the input once; more would leave a tail wave
// of CTAs that each stage it again. kMaxCtas where the SM count is unknown
// (model_ops.h) or the occupancy cannot be read (the launch reports a real
// problem).
template <typename Kernel>
int resident_ctas(Kernel kernel, size_t smem, int sm_count, int per_sm_cap = std::numeric_limits<int>::max()) {
  if (sm_count <= 0) return kMaxCtas;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) != cudaSuccess || per_sm <= 0) {
    (void)cudaGetLastError();
    return kMaxCtas;
  }
  return std::min(per_sm, per_sm_cap) * sm_count;
}

template <int kTok, int kType>
cudaError_t launch_quant(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  const bool gated_units = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;
  const int rows = gated_units ? p.n_out : p.wq.row_end - p.wq.row_begin;
  const int units = gated_units ? rows : (rows + 1) / 2;
  const int tiles = ceil_div(units, kTileUnits);
  const size_t smem = size_t(kTok) * p.k * sizeof(uint16_t);
  auto kernel = skinny_gemm_quant_kernel<kTok, kType>;
  if (smem + kQuantStaticSmem > 48 * 1024) {
    const cudaError_t e = opt_in_dynamic_smem<skinny_gemm_quant_kernel<kTok, kType>>(int(skinny_gemm_quant_smem_limit()));
    if (e != cudaSuccess) return e;
  }
  const int ctas = resident_ctas(kernel, smem, p.sm_count);
  return launch_maybe_programmatic(kernel, dim3(std::min(tiles, ctas)), dim3(kThreads), smem, stream, programmatic,
                                   p);
}

template <int kTok>
cudaError_t launch_quant_tokens(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  switch (p.wq.type) {
    case quant::kQ4_0: return launch_quant<kTok, quant::kQ4_0>(p, stream, programmatic);
    case quant::kQ4_1: return launch_quant<kTok, quant::kQ4_1>(p, stream, programmatic);
    case quant::kQ5_0: return launch_quant<kTok, quant::kQ5_0>(p, stream, programmatic);
    case quant::kQ5_1: return launch_quant<kTok, quant::kQ5_1>(p, stream, programmatic);
    case quant::kQ8_0: return launch_quant<kTok, quant::kQ8_0>(p, stream, programmatic);
    case quant::kQ4_K: return launch_quant<kTok, quant::kQ4_K>(p, stream, programmatic);
    case quant::kQ5_K: return launch_quant<kTok, quant::kQ5_K>(p, stream, programmatic);
    case quant::kQ6_K: return launch_quant<kTok, quant::kQ6_K>(p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

#include "kernels/model/quant_gemv.cuh"
#include "kernels/model/quant_gemv_q8.cuh"

int skinny_gemm_tokens(int rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8; }

size_t skinny_gemm_smem_bytes(int rows, int k) { return size_t(skinny_gemm_tokens(rows)) * k * sizeof(uint16_t); }

bool skinny_gemm_rope_heads_supported(int n_out, int head_dim) {
  return head_dim >= 2 * kWarps && head_dim % (2 * kWarps) == 0 && n_out > 0 && n_out % head_dim == 0 &&
         units_per_warp_for(n_out / 2) == 1;
}

cudaError_t launch_skinny_gemm(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.output == SkinnyOutput::kRopeHeads && p.wq.type != 0) return cudaErrorInvalidValue;  // bf16 kernel only
  if (p.wq.type != 0) {
    if (quant_gemv_q8_takes(p.rows, p.k)) return launch_quant_gemv_q8(p, stream, programmatic);
    if (quant_gemv_takes(p.rows, p.k)) return launch_quant_gemv(p, stream, programmatic);
    switch (skinny_gemm_tokens(p.rows)) {
      case 1: return launch_quant_tokens<1>(p, stream, programmatic);
      case 2: return launch_quant_tokens<2>(p, stream, programmatic);
      case 4: return launch_quant_tokens<4>(p, stream, programmatic);
      default: return launch_quant_tokens<8>(p, stream, programmatic);
    }
  }
  switch (skinny_gemm_tokens(p.rows)) {
    case 1: return launch_tokens<1>(p, stream, programmatic);
    case 2: return launch_tokens<2>(p, stream, programmatic);
    case 4: return launch_tokens<4>(p, stream, programmatic);
    default: return launch_tokens<8>(p, stream, programmatic);
  }
}

size_t skinny_gemm_quant_smem_limit() { return std::min(kSkinnyQuantSmemLimit, quant_smem_optin()); }

cudaError_t skinny_gemm_waits_on_producer(bool* waits) {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, skinny_gemm_kernel<1, false>);
  *waits = err == cudaSuccess && attr.ptxVersion >= 90;
  return err;
}

}  // namespace flashscope::kernels
