// Token sampling on the device: one logits row in, one token id out, with
// the rules and the arithmetic of the host's flashscope::sample()
// (runtime/src/engine/sampling.cpp), so the same uniform draw picks the same
// token on both sides.
//
//   logits [vocab] fp32 (overwritten: it is the working copy)
//   1. sanitize: non-finite → -inf; -0 → +0 here and after every later
//      rewrite (so the radix keys below order exactly as floats compare)
//   2. repetition penalty on the distinct ids given: l > 0 ? l / r : l · r
//   3. argmax, lowest id on ties; greedy (temperature <= 0) or an all -inf
//      row stops here
//   4. l /= temperature
//   5. top-k: the k-th best key by a 4-pass radix select (8 bits a pass,
//      256-bin histogram in shared memory), then the candidates collected in
//      id order with ballots and a block scan: every key above the
//      threshold, and the lowest ids among those equal to it, which is the
//      set the host's partial_sort by (logit desc, id asc) keeps
//   6. bitonic sort of the k candidates in shared memory by the same order
//   7. one thread, in double and in sorted order like the host: drop the -inf
//      tail, softmax, top_p, min_p, inverse-CDF draw at `uniform`
//
// One CTA of 1024 threads per row: a row is at most a few hundred KB, read
// ~7 times from L2; splitting it over CTAs would cost a second launch for
// less than that. A batch of rows (one per sequence of a batched decode
// step) is one launch with a CTA per row, each with its own parameters.
// Candidates are capped at kMaxSampleCandidates (the sort's shared
// buffer); the runtime refuses larger top-k (the host sampler takes over).
#include <cfloat>
#include <climits>

#include "kernels/model/model_ops.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCand = kMaxSampleCandidates;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBatch = 8;  // row entries a thread has in flight

// A uint32 whose unsigned order is the float order (NaN never reaches here).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The host's `better`: higher logit first, then lower id.
__device__ __forceinline__ bool better(float la, int ia, float lb, int ib) {
  return la > lb || (la == lb && ia < ib);
}

// -0 → +0: equal as floats, so they must get one key.
__device__ __forceinline__ float positive_zero(float v) { return v == 0.0f ? 0.0f : v; }
__device__ __forceinline__ float sanitize(float v) { return isfinite(v) ? positive_zero(v) : -INFINITY; }

// The whole algorithm for one row, run by one CTA. Returns early (the same
// way in every thread where the exit is uniform; thread 0 alone in step 7).
__device__ __forceinline__ void sample_one_row(const SampleKernelParams& p) {
  __shared__ float cand_logit_smem[kMaxCand];
  __shared__ int32_t cand_id_smem[kMaxCand];
  __shared__ double prob_smem[kMaxCand];
  __shared__ uint32_t hist_smem[256];
  __shared__ float warp_val_smem[kWarps];
  __shared__ int warp_idx_smem[kWarps];
  __shared__ int warp_gt_smem[kWarps], warp_eq_smem[kWarps];
  __shared__ uint32_t prefix_smem, mask_smem;
  __shared__ int remaining_smem;
  __shared__ float best_val_smem;
  __shared__ int best_idx_smem;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float* logits = p.logits;

  // 1. and, without a penalty, 3.'s per-thread argmax on the same pass: the
  // row is read once (greedy decoding writes nothing back). Loads go out
  // kBatch at a time: a loop that loads and stores one entry at a time pays
  // an L2 round trip per entry (48 in a row over a 49152-entry vocabulary).
  const bool penalized = p.num_penalty > 0;
  const bool write_back = penalized || p.temperature > 0.0f;
  float best_v = -INFINITY;
  int best_i = INT_MAX;
  for (int base = tid; base < p.vocab; base += kThreads * kBatch) {
    float v_rmem[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      v_rmem[j] = i < p.vocab ? sanitize(logits[i]) : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      if (i >= p.vocab) break;
      if (write_back) logits[i] = v_rmem[j];
      if (!penalized && better(v_rmem[j], i, best_v, best_i)) best_v = v_rmem[j], best_i = i;
    }
  }
  __syncthreads();  // the penalty below rewrites some of these entries from other threads
  // 2. Distinct ids: no two threads touch one entry.
  for (int j = tid; j < p.num_penalty; j += kThreads) {
    const int id = p.penalty_ids[j];
    if (id < 0 || id >= p.vocab) continue;
    const float l = logits[id];
    logits[id] = positive_zero(l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty);
  }
  __syncthreads();  // penalized values visible to the whole CTA

  // 3. Argmax: per thread (ascending ids; done above without a penalty), per
  // warp by shuffles, then warp 0.
  if (penalized) {
    for (int base = tid; base < p.vocab; base += kThreads * kBatch) {
      float v_rmem[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        v_rmem[j] = i < p.vocab ? logits[i] : -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        if (i < p.vocab && better(v_rmem[j], i, best_v, best_i)) best_v = v_rmem[j], best_i = i;
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, best_v, offset);
    const int oi = __shfl_xor_sync(kFullMask, best_i, offset);
    if (better(ov, oi, best_v, best_i)) best_v = ov, best_i = oi;
  }
  if (lane == 0) warp_val_smem[warp] = best_v, warp_idx_smem[warp] = best_i;
  __syncthreads();  // every warp's best is in shared memory
  if (warp == 0) {
    best_v = warp_val_smem[lane];
    best_i = warp_idx_smem[lane];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float ov = __shfl_xor_sync(kFullMask, best_v, offset);
      const int oi = __shfl_xor_sync(kFullMask, best_i, offset);
      if (better(ov, oi, best_v, best_i)) best_v = ov, best_i = oi;
    }
    if (lane == 0) best_val_smem = best_v, best_idx_smem = best_i;
  }
  __syncthreads();  // the row's best is visible to every thread
  if (p.temperature <= 0.0f || best_val_smem == -INFINITY) {
    if (tid == 0) *p.token_out = best_idx_smem;
    return;  // uniform: every thread read the same shared values
  }

  // 4.
  for (int base = tid; base < p.vocab; base += kThreads * kBatch) {
    float v_rmem[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      v_rmem[j] = i < p.vocab ? logits[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      if (i < p.vocab) logits[i] = positive_zero(v_rmem[j] / p.temperature);
    }
  }
  if (tid == 0) {
    prefix_smem = 0;
    mask_smem = 0;
    remaining_smem = p.keep;
  }

  // 5a. Radix select of the keep-th largest key, most significant byte first.
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) hist_smem[b] = 0;
    __syncthreads();  // cleared bins, scaled logits and the previous digit's prefix are visible
    const uint32_t prefix = prefix_smem, mask = mask_smem;
    for (int base = tid; base < p.vocab; base += kThreads * kBatch) {
      uint32_t key_rmem[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        key_rmem[j] = i < p.vocab ? order_key(logits[i]) : 0u;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        if (i < p.vocab && (key_rmem[j] & mask) == prefix) atomicAdd(&hist_smem[(key_rmem[j] >> shift) & 0xFFu], 1u);
      }
    }
    __syncthreads();  // the histogram is complete
    if (tid == 0) {
      const uint32_t remaining = uint32_t(remaining_smem);
      uint32_t above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + hist_smem[d] >= remaining) break;
        above += hist_smem[d];
      }
      remaining_smem = int(remaining - above);
      prefix_smem = prefix | (uint32_t(d) << shift);
      mask_smem = mask | (0xFFu << shift);
    }
    __syncthreads();  // thread 0 is done with the bins before they are cleared again
  }
  const uint32_t threshold = prefix_smem;
  const int take_eq = remaining_smem;  // keys equal to the threshold to keep (>= 1)
  const int n_gt = p.keep - take_eq;   // keys above it (all kept)

  // 5b. Collect in id order: ranks within a warp from ballots, warp offsets
  // from the per-warp counts.
  int gt_base = 0, eq_base = 0;
  for (int base = 0; base < p.vocab; base += kThreads) {
    const int i = base + tid;
    float v = -INFINITY;
    bool gt = false, eq = false;
    if (i < p.vocab) {
      v = logits[i];
      const uint32_t key = order_key(v);
      gt = key > threshold;
      eq = key == threshold;
    }
    const unsigned gt_ballot = __ballot_sync(kFullMask, gt);
    const unsigned eq_ballot = __ballot_sync(kFullMask, eq);
    const unsigned lanes_below = (1u << lane) - 1u;
    if (lane == 0) {
      warp_gt_smem[warp] = __popc(gt_ballot);
      warp_eq_smem[warp] = __popc(eq_ballot);
    }
    __syncthreads();  // per-warp counts of this chunk are visible
    int gt_off = 0, eq_off = 0, gt_total = 0, eq_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) gt_off += warp_gt_smem[w], eq_off += warp_eq_smem[w];
      gt_total += warp_gt_smem[w];
      eq_total += warp_eq_smem[w];
    }
    if (gt) {
      const int idx = gt_base + gt_off + __popc(gt_ballot & lanes_below);
      if (idx < n_gt) cand_logit_smem[idx] = v, cand_id_smem[idx] = i;
    }
    if (eq) {
      const int e = eq_base + eq_off + __popc(eq_ballot & lanes_below);
      if (e < take_eq) cand_logit_smem[n_gt + e] = v, cand_id_smem[n_gt + e] = i;
    }
    gt_base += gt_total;
    eq_base += eq_total;
    __syncthreads();  // the counts are rewritten by the next chunk
    if (gt_base >= n_gt && eq_base >= take_eq) break;  // uniform: from shared totals
  }

  // 6. Bitonic sort, best first; padding sorts after every real candidate.
  int np = 1;
  while (np < p.keep) np <<= 1;
  for (int i = p.keep + tid; i < np; i += kThreads) cand_logit_smem[i] = -INFINITY, cand_id_smem[i] = INT_MAX;
  __syncthreads();  // candidates and padding written
  for (int size = 2; size <= np; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < np; i += kThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const float li = cand_logit_smem[i], lj = cand_logit_smem[j];
        const int ii = cand_id_smem[i], ij = cand_id_smem[j];
        const bool best_first = (i & size) == 0;
        if (best_first ? better(lj, ij, li, ii) : better(li, ii, lj, ij)) {
          cand_logit_smem[i] = lj, cand_id_smem[i] = ij;
          cand_logit_smem[j] = li, cand_id_smem[j] = ii;
        }
      }
      __syncthreads();  // this compare-exchange stage is finished before the next reads its pairs
    }
  }

  // 7. The host's loop, in double, in sorted order.
  if (tid != 0) return;
  int size = p.keep;
  while (size > 1 && cand_logit_smem[size - 1] == -INFINITY) --size;
  const double max_logit = cand_logit_smem[0];
  double total = 0.0;
  for (int k = 0; k < size; ++k) {
    const double e = exp(double(cand_logit_smem[k]) - max_logit);
    prob_smem[k] = e;
    total += e;
  }
  for (int k = 0; k < size; ++k) prob_smem[k] /= total;
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    int n = 0;
    while (n < size) {
      mass += prob_smem[n];
      ++n;
      if (mass >= double(p.top_p)) break;
    }
    size = n > 1 ? n : 1;
  }
  if (p.min_p > 0.0f) {
    const double floor_p = double(p.min_p) * prob_smem[0];
    int n = 1;
    while (n < size && prob_smem[n] >= floor_p) ++n;
    size = n;
  }
  double left = 0.0;
  for (int k = 0; k < size; ++k) left += prob_smem[k];
  const double r = p.uniform * left;
  double acc = 0.0;
  int32_t token = cand_id_smem[size - 1];  // r within rounding of `left`
  for (int k = 0; k < size; ++k) {
    acc += prob_smem[k];
    if (r < acc) {
      token = cand_id_smem[k];
      break;
    }
  }
  *p.token_out = token;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleKernelParams p) {
  sample_one_row(p);
}

// rows [gridDim.x] in device memory: CTA b samples rows[b].
__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const SampleKernelParams* __restrict__ rows) {
  const SampleKernelParams p = rows[blockIdx.x];
  sample_one_row(p);
}

}  // namespace

cudaError_t launch_sample(const SampleKernelParams& p, cudaStream_t stream) {
  sample_kernel<<<1, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_sample_rows(const SampleKernelParams* rows, int n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  sample_rows_kernel<<<n, kThreads, 0, stream>>>(rows);
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
