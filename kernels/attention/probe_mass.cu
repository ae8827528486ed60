// The trace capture's second pass (probe_launch.h, TileMassParams): final
// softmax probabilities of one traced (sequence, q-head), from the run's lse,
// summed and maximised per (q-tile, kv-tile) block, and written out whole for
// the sampled blocks. It runs once per capture, so it is written to be plain
// rather than fast: float FMAs, no tensor cores.
//
// One CTA of 4 warps per block: the block's keys are staged in shared memory
// as float [keys, head_dim + 1] (the +1 spreads a warp's 32 keys over 32
// banks), then each warp takes rows in turn, lane l computing keys l and
// l + 32 with q_i read as a broadcast:
//   p_ij = exp(scale · Σ_d q_id k_jd − lse_i)   (0 when masked or lse_i = -inf)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/attention/probe_launch.h"
#include "kernels/common/math.h"

namespace flashscope::kernels {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) tile_mass_kernel(const __grid_constant__ TileMassParams p) {
  static_assert(kTileMassMaxBlockKV == 64, "two keys per lane");
  // [kTileMassMaxBlockKV][head_dim + 1] floats: up to 64 KiB at head_dim 256.
  extern __shared__ float K_staged[];
  const int pitch = p.head_dim + 1;
  auto K_smem = [&](int c, int d) -> float& { return K_staged[c * pitch + d]; };
  __shared__ float sum_smem[kWarps], max_smem[kWarps];
  const int q_tile = blockIdx.x, kv_tile = blockIdx.y;
  const int i0 = q_tile * p.block_q, j0 = kv_tile * p.block_kv;
  const int rows = min(p.block_q, p.q_len - i0);
  const int keys = min(p.block_kv, p.kv_len - j0);
  const int dim = p.head_dim;
  const T* const K = static_cast<const T*>(p.k);

  // Rows past the block's keys are zeroed: every lane's dot reads a defined value.
  for (int e = threadIdx.x; e < kTileMassMaxBlockKV * dim; e += blockDim.x) {
    const int c = e / dim, d = e % dim, j = j0 + c;
    if (c >= keys) {
      K_smem(c, d) = 0.0f;
      continue;
    }
    int64_t row;
    if (p.block_table != nullptr) {
      const int64_t page = p.block_table[j >> p.page_size_log2];
      row = (((page * p.kv_heads + p.kv_head) << p.page_size_log2) + (j & ((1 << p.page_size_log2) - 1))) * dim;
    } else {
      row = int64_t(j) * p.k_row_stride;
    }
    K_smem(c, d) = to_float(K[row + d]);
  }
  __syncthreads();  // the block's keys are staged

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = p.sample_slot != nullptr ? p.sample_slot[q_tile * gridDim.y + kv_tile] : -1;
  const int shift = p.kv_len - p.q_len;
  float sum = 0.0f, max_p = 0.0f;
  for (int r = warp; r < rows; r += kWarps) {
    const int i = i0 + r;
    const T* const q = static_cast<const T*>(p.q) + int64_t(i) * p.q_row_stride;
    const float lse = p.lse[i];
    float dot[2] = {0.0f, 0.0f};
    for (int d = 0; d < dim; ++d) {
      const float qd = to_float(q[d]);
      dot[0] = fmaf(qd, K_smem(lane, d), dot[0]);
      dot[1] = fmaf(qd, K_smem(lane + 32, d), dot[1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = lane + 32 * h;
      if (c >= keys) continue;
      const int j = j0 + c, pos = i + shift;
      const bool visible = (!p.causal || j <= pos) && (p.window_left < 0 || j >= pos - p.window_left) &&
                           (p.window_right < 0 || j <= pos + p.window_right) && !isinf(lse);
      float logit = dot[h] * p.scale;
      if (p.softcap > 0.0f) logit = p.softcap * tanhf(logit / p.softcap);
      const float prob = visible ? expf(logit - lse) : 0.0f;
      sum += prob;
      max_p = fmaxf(max_p, prob);
      if (slot >= 0) p.samples[(int64_t(slot) * p.block_q + r) * p.block_kv + c] = prob;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    max_p = fmaxf(max_p, __shfl_xor_sync(0xffffffffu, max_p, o));
  }
  if (lane == 0) {
    sum_smem[warp] = sum;
    max_smem[warp] = max_p;
  }
  __syncthreads();  // every warp's partial is in shared memory
  if (threadIdx.x == 0) {
    float s = 0.0f, m = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      s += sum_smem[w];
      m = fmaxf(m, max_smem[w]);
    }
    p.mass_sum[q_tile * gridDim.y + kv_tile] = s;
    p.max_prob[q_tile * gridDim.y + kv_tile] = m;
  }
}

}  // namespace

cudaError_t launch_tile_mass(ElemType type, const TileMassParams& p, cudaStream_t stream) {
  if (p.head_dim > kTileMassMaxDim || p.block_kv > kTileMassMaxBlockKV || p.block_q < 1 || p.block_kv < 1)
    return cudaErrorInvalidValue;
  const unsigned q_tiles = unsigned(ceil_div(p.q_len, p.block_q));
  const unsigned kv_tiles = unsigned(ceil_div(p.kv_len, p.block_kv));
  if (q_tiles == 0 || kv_tiles == 0) return cudaSuccess;
  const dim3 grid(q_tiles, kv_tiles);
  const size_t smem = size_t(kTileMassMaxBlockKV) * (p.head_dim + 1) * sizeof(float);
  auto kernel = type == ElemType::kFP16 ? tile_mass_kernel<__half> : tile_mass_kernel<__nv_bfloat16>;
  if (smem > 48 * 1024) {
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        err != cudaSuccess)
      return err;
  }
  kernel<<<grid, kWarps * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
