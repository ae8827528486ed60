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
// a sum over the head's D elements: a warp's shuffles; rope_head.cuh). A
// decode step's heads spread over CTAs instead of queueing behind one CTA's
// four warps. Adjacent pairs are one float2 load and one 32-bit store; a
// warp's halves pairs are two coalesced 128-byte loads.
//
// Programmatic dependent launch (sm_90): the grid may be scheduled while the
// QKV GEMM finishes. What does not come from it is read first (the q/k norm
// weights; the angles and the slot, which the step's input copy wrote before
// its first kernel), then the GEMM is waited for (pdl_wait) before qkv is
// read, and attention may start its own launch at once.
#include <cuda_bf16.h>

#include "kernels/common/ptx.cuh"
#include "kernels/common/math.h"
#include "kernels/model/model_ops.h"
#include "kernels/model/rope_head.cuh"

namespace flashscope::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

__global__ void __launch_bounds__(kThreads) rope_append_kernel(const __grid_constant__ RopeAppendKernelParams p) {
  const int t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y * kWarps + warp;
  if (head >= p.q_heads + 2 * p.kv_heads) return;  // a whole warp: no shuffle is left waiting
  rope_head::Lane r;
  rope_head::prepare(p, t, head, lane, r);
  pdl_wait();  // qkv is the QKV GEMM's output
  pdl_launch_dependents();
  rope_head::finish(p, t, head, lane, r);
}

}  // namespace

cudaError_t launch_rope_append(const RopeAppendKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (p.n <= 0) return cudaSuccess;
  const int heads = p.q_heads + 2 * p.kv_heads;
  return launch_maybe_programmatic(rope_append_kernel, dim3(p.n, ceil_div(heads, kWarps)), dim3(kThreads), 0,
                                   stream, programmatic, p);
}

}  // namespace flashscope::kernels
