// Token sampling on the device: one logits row in, one token id out, with
// the rules and the arithmetic of the host's flashscope::sample()
// (runtime/src/engine/sampling.cpp), so the same uniform draw picks the same
// token on both sides.
//
//   logits [vocab] fp32 (overwritten: it is the working copy)
//   1. sanitize: non-finite → -inf; -0 → +0 here and after every later
//      rewrite (so the radix keys below order exactly as floats compare)
//   2. penalties on the distinct ids given: the first num_repeat l > 0 ?
//      l / r : l · r (repetition), then l -= penalty_sub[j] (presence and
//      frequency, computed on the host)
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

// The CTA's shared memory for one row.
struct SampleSmem {
  float cand_logit[kMaxCand];  // the top-k candidates, then sorted
  int32_t cand_id[kMaxCand];
  double prob[kMaxCand];  // step 7's probabilities, in sorted order
  uint32_t hist[256];     // one radix digit's histogram
  float warp_val[kWarps];
  int warp_idx[kWarps];
  int warp_gt[kWarps], warp_eq[kWarps];
  uint32_t prefix, mask;  // the radix select's digits so far
  int remaining;          // keys still to take at the threshold
  float best_val;
  int best_idx;
};

// The reduction of (best_v, best_i) across a warp: the host's `better`.
__device__ __forceinline__ void warp_best(float& best_v, int& best_i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, best_v, offset);
    const int oi = __shfl_xor_sync(kFullMask, best_i, offset);
    if (better(ov, oi, best_v, best_i)) best_v = ov, best_i = oi;
  }
}

// 1. and, without a penalty, 3.'s per-thread argmax on the same pass: the
// row is read once (greedy decoding writes nothing back). Loads go out
// kBatch at a time: a loop that loads and stores one entry at a time pays
// an L2 round trip per entry (48 in a row over a 49152-entry vocabulary).
__device__ __forceinline__ void sanitize_row(const SampleKernelParams& p, bool penalized, float& best_v, int& best_i) {
  const int tid = threadIdx.x;
  float* logits = p.logits;
  const bool write_back = penalized || p.temperature > 0.0f;
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
}

// 2. Distinct ids: no two threads touch one entry.
__device__ __forceinline__ void apply_repetition_penalty(const SampleKernelParams& p) {
  float* logits = p.logits;
  for (int j = threadIdx.x; j < p.num_penalty; j += kThreads) {
    const int id = p.penalty_ids[j];
    if (id < 0 || id >= p.vocab) continue;
    float l = logits[id];
    if (j < p.num_repeat) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    if (p.penalty_sub != nullptr) l -= p.penalty_sub[j];
    logits[id] = positive_zero(l);
  }
}

// 3. Argmax: per thread (ascending ids; done by sanitize_row without a
// penalty), per warp by shuffles, then warp 0; the row's best lands in
// s.best_val and s.best_idx.
__device__ __forceinline__ void row_argmax(const SampleKernelParams& p, bool penalized, float best_v, int best_i,
                                           SampleSmem& s) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* logits = p.logits;
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
  warp_best(best_v, best_i);
  if (lane == 0) s.warp_val[warp] = best_v, s.warp_idx[warp] = best_i;
  __syncthreads();  // every warp's best is in shared memory
  if (warp == 0) {
    best_v = s.warp_val[lane];
    best_i = s.warp_idx[lane];
    warp_best(best_v, best_i);
    if (lane == 0) s.best_val = best_v, s.best_idx = best_i;
  }
  __syncthreads();  // the row's best is visible to every thread
}

// 4. l /= temperature.
__device__ __forceinline__ void apply_temperature(const SampleKernelParams& p) {
  float* logits = p.logits;
  for (int base = threadIdx.x; base < p.vocab; base += kThreads * kBatch) {
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
}

// 5a. Radix select of the keep-th largest key, most significant byte first:
// leaves the threshold key in s.prefix and how many keys equal to it to keep
// in s.remaining (>= 1).
__device__ __forceinline__ void radix_select(const SampleKernelParams& p, SampleSmem& s) {
  const int tid = threadIdx.x;
  const float* logits = p.logits;
  if (tid == 0) {
    s.prefix = 0;
    s.mask = 0;
    s.remaining = p.keep;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) s.hist[b] = 0;
    __syncthreads();  // cleared bins, scaled logits and the previous digit's prefix are visible
    const uint32_t prefix = s.prefix, mask = s.mask;
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
        if (i < p.vocab && (key_rmem[j] & mask) == prefix) atomicAdd(&s.hist[(key_rmem[j] >> shift) & 0xFFu], 1u);
      }
    }
    __syncthreads();  // the histogram is complete
    if (tid == 0) {
      const uint32_t remaining = uint32_t(s.remaining);
      uint32_t above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + s.hist[d] >= remaining) break;
        above += s.hist[d];
      }
      s.remaining = int(remaining - above);
      s.prefix = prefix | (uint32_t(d) << shift);
      s.mask = mask | (0xFFu << shift);
    }
    __syncthreads();  // thread 0 is done with the bins before they are cleared again
  }
}

// 5b. Collect in id order: every key above the threshold (n_gt of them) and
// the lowest ids of those equal to it (take_eq); ranks within a warp from
// ballots, warp offsets from the per-warp counts.
__device__ __forceinline__ void collect_candidates(const SampleKernelParams& p, uint32_t threshold, int take_eq,
                                                   int n_gt, SampleSmem& s) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* logits = p.logits;
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
      s.warp_gt[warp] = __popc(gt_ballot);
      s.warp_eq[warp] = __popc(eq_ballot);
    }
    __syncthreads();  // per-warp counts of this chunk are visible
    int gt_off = 0, eq_off = 0, gt_total = 0, eq_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) gt_off += s.warp_gt[w], eq_off += s.warp_eq[w];
      gt_total += s.warp_gt[w];
      eq_total += s.warp_eq[w];
    }
    if (gt) {
      const int idx = gt_base + gt_off + __popc(gt_ballot & lanes_below);
      if (idx < n_gt) s.cand_logit[idx] = v, s.cand_id[idx] = i;
    }
    if (eq) {
      const int e = eq_base + eq_off + __popc(eq_ballot & lanes_below);
      if (e < take_eq) s.cand_logit[n_gt + e] = v, s.cand_id[n_gt + e] = i;
    }
    gt_base += gt_total;
    eq_base += eq_total;
    __syncthreads();  // the counts are rewritten by the next chunk
    if (gt_base >= n_gt && eq_base >= take_eq) break;  // uniform: from shared totals
  }
}

// 6. Bitonic sort of the keep candidates, best first; padding to a power of
// two sorts after every real candidate.
__device__ __forceinline__ void sort_candidates(const SampleKernelParams& p, SampleSmem& s) {
  const int tid = threadIdx.x;
  int np = 1;
  while (np < p.keep) np <<= 1;
  for (int i = p.keep + tid; i < np; i += kThreads) s.cand_logit[i] = -INFINITY, s.cand_id[i] = INT_MAX;
  __syncthreads();  // candidates and padding written
  for (int size = 2; size <= np; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < np; i += kThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const float li = s.cand_logit[i], lj = s.cand_logit[j];
        const int ii = s.cand_id[i], ij = s.cand_id[j];
        const bool best_first = (i & size) == 0;
        if (best_first ? better(lj, ij, li, ii) : better(li, ii, lj, ij)) {
          s.cand_logit[i] = lj, s.cand_id[i] = ij;
          s.cand_logit[j] = li, s.cand_id[j] = ii;
        }
      }
      __syncthreads();  // this compare-exchange stage is finished before the next reads its pairs
    }
  }
}

// 7. The host's loop, in double, in sorted order (one thread): drop the -inf
// tail, softmax, top_p, min_p, inverse-CDF draw at `uniform`.
__device__ __forceinline__ int32_t draw_token(const SampleKernelParams& p, SampleSmem& s) {
  int size = p.keep;
  while (size > 1 && s.cand_logit[size - 1] == -INFINITY) --size;
  const double max_logit = s.cand_logit[0];
  double total = 0.0;
  for (int k = 0; k < size; ++k) {
    const double e = exp(double(s.cand_logit[k]) - max_logit);
    s.prob[k] = e;
    total += e;
  }
  for (int k = 0; k < size; ++k) s.prob[k] /= total;
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    int n = 0;
    while (n < size) {
      mass += s.prob[n];
      ++n;
      if (mass >= double(p.top_p)) break;
    }
    size = n > 1 ? n : 1;
  }
  if (p.min_p > 0.0f) {
    const double floor_p = double(p.min_p) * s.prob[0];
    int n = 1;
    while (n < size && s.prob[n] >= floor_p) ++n;
    size = n;
  }
  double left = 0.0;
  for (int k = 0; k < size; ++k) left += s.prob[k];
  const double r = p.uniform * left;
  double acc = 0.0;
  int32_t token = s.cand_id[size - 1];  // r within rounding of `left`
  for (int k = 0; k < size; ++k) {
    acc += s.prob[k];
    if (r < acc) {
      token = s.cand_id[k];
      break;
    }
  }
  return token;
}

// The whole algorithm for one row, run by one CTA, step by step as the
// header comment numbers them. Returns early (the same way in every thread
// where the exit is uniform; thread 0 alone in step 7).
__device__ __forceinline__ void sample_one_row(const SampleKernelParams& p) {
  __shared__ SampleSmem s;
  const bool penalized = p.num_penalty > 0;
  float best_v = -INFINITY;
  int best_i = INT_MAX;
  sanitize_row(p, penalized, best_v, best_i);
  __syncthreads();  // the penalty below rewrites some of these entries from other threads
  apply_repetition_penalty(p);
  __syncthreads();  // penalized values visible to the whole CTA
  row_argmax(p, penalized, best_v, best_i, s);
  if (p.temperature <= 0.0f || s.best_val == -INFINITY) {
    if (threadIdx.x == 0) *p.token_out = s.best_idx;
    return;  // uniform: every thread read the same shared values
  }
  apply_temperature(p);
  radix_select(p, s);
  const uint32_t threshold = s.prefix;
  const int take_eq = s.remaining;  // keys equal to the threshold to keep (>= 1)
  const int n_gt = p.keep - take_eq;   // keys above it (all kept)
  collect_candidates(p, threshold, take_eq, n_gt, s);
  sort_candidates(p, s);
  if (threadIdx.x != 0) return;
  *p.token_out = draw_token(p, s);
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
