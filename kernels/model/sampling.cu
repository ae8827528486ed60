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
// A row is split into `slices` CTAs of `chunk` entries (1024 threads each):
// one CTA reading a 262,144-entry row (Gemma 3) is bound by one SM's
// loads (bench/TUNING.md, "Sampling over a large vocabulary"). Each CTA runs 1-5 on
// its slice: 1-3 give the slice's best (value, id), 4-5 its best
// keep_s = min(keep, slice length) in id order. The global best `keep` by
// (logit desc, id asc) are among those: an entry with fewer than `keep`
// better entries in the row has fewer than keep_s in its slice. The last
// CTA to finish (an atomic counter per row, reset by that CTA, so a launch
// needs no memset and replays in a CUDA graph) merges the slices' bests
// with the same order (3), then runs 5-7 over the slices' candidates
// concatenated in slice order, which is id order, so ties at the threshold
// keep the lowest ids as on the host. The result is the single-CTA
// algorithm's, bit for bit. A launch of one slice (small vocabularies, many
// rows, no workspace) runs 1-7 in its CTA with no workspace.
//
// A batch of rows (one per sequence of a batched decode step) is one launch
// with `slices` CTAs per row, each row with its own parameters.
// Candidates are capped at kMaxSampleCandidates (the sort's shared
// buffer); the runtime refuses larger top-k (the host sampler takes over).
#include <algorithm>
#include <cfloat>
#include <climits>

#include "kernels/model/model_ops.h"
#include "kernels/common/math.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCand = kMaxSampleCandidates;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBatch = 8;  // row entries a thread has in flight
// A slice has at least this many entries (2 a thread): below, a CTA's fixed
// cost (its reductions and barriers) outweighs the loads it takes off the others.
constexpr int kMinSliceEntries = 2048;
// A sampled row's slice holds at least this many times its top-k, so the
// merge's candidate list (slices · keep) stays a fraction of the row.
constexpr int kSliceKeepRatio = 8;
// The workspace starts with one counter per row; several slices per row
// only while rows <= kCounterSlots (more rows fill the GPU with one CTA each).
constexpr int kCounterSlots = 1024;
constexpr size_t kCounterBytes = kCounterSlots * sizeof(unsigned);
constexpr size_t kRowAlign = 256;

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

// The CTA's shared memory for one slice (and, in the last CTA, the merge).
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
  bool last;  // this CTA finished its row's last slice
};

// Entries [begin, end) of the logits row; an entry's id is its index.
struct RowSlice {
  const float* vals;
  int begin, end;
  __device__ __forceinline__ float value(int i) const { return vals[i]; }
  __device__ __forceinline__ int id(int i) const { return i; }
};

// The slices' candidates, concatenated in slice (so id) order, [0, end).
// Written by other CTAs of this launch: loaded past L1 (.cg).
struct CandidateList {
  const float* vals;
  const int32_t* ids;
  int begin, end;
  __device__ __forceinline__ float value(int i) const { return __ldcg(vals + i); }
  __device__ __forceinline__ int id(int i) const { return __ldcg(ids + i); }
};

// One row's part of the workspace (kCounterBytes of counters come first).
//   best_val, best_idx [slices]       each slice's argmax
//   cand_val, cand_id  [slices · cap] each slice's candidates, cap = min(kMaxCand, chunk)
struct RowWorkspace {
  unsigned* done;
  float* best_val;
  int* best_idx;
  float* cand_val;
  int32_t* cand_id;
};

__host__ __device__ __forceinline__ int slice_cap(int chunk) { return chunk < kMaxCand ? chunk : kMaxCand; }

__host__ __device__ __forceinline__ size_t row_workspace_bytes(int slices, int chunk) {
  const size_t bytes = size_t(slices) * (sizeof(float) + sizeof(int)) +
                       size_t(slices) * size_t(slice_cap(chunk)) * (sizeof(float) + sizeof(int32_t));
  return ceil_div(bytes, kRowAlign) * kRowAlign;
}

__device__ __forceinline__ RowWorkspace row_workspace(char* ws, int row, int slices, int chunk) {
  RowWorkspace w;
  w.done = reinterpret_cast<unsigned*>(ws) + row;
  char* at = ws + kCounterBytes + size_t(row) * row_workspace_bytes(slices, chunk);
  const size_t n_cand = size_t(slices) * size_t(slice_cap(chunk));
  w.best_val = reinterpret_cast<float*>(at);
  w.best_idx = reinterpret_cast<int*>(w.best_val + slices);
  w.cand_val = reinterpret_cast<float*>(w.best_idx + slices);
  w.cand_id = reinterpret_cast<int32_t*>(w.cand_val + n_cand);
  return w;
}

// The reduction of (best_v, best_i) across a warp: the host's `better`.
__device__ __forceinline__ void warp_best(float& best_v, int& best_i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, best_v, offset);
    const int oi = __shfl_xor_sync(kFullMask, best_i, offset);
    if (better(ov, oi, best_v, best_i)) best_v = ov, best_i = oi;
  }
}

// Every thread's (best_v, best_i) reduced per warp by shuffles, then by
// warp 0; the CTA's best lands in s.best_val and s.best_idx.
__device__ __forceinline__ void block_best(float best_v, int best_i, SampleSmem& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  warp_best(best_v, best_i);
  if (lane == 0) s.warp_val[warp] = best_v, s.warp_idx[warp] = best_i;
  __syncthreads();  // every warp's best is in shared memory
  if (warp == 0) {
    best_v = s.warp_val[lane];
    best_i = s.warp_idx[lane];
    warp_best(best_v, best_i);
    if (lane == 0) s.best_val = best_v, s.best_idx = best_i;
  }
  __syncthreads();  // the CTA's best is visible to every thread
}

// 1. and, without a penalty, 3.'s per-thread argmax on the same pass: the
// slice is read once (greedy decoding writes nothing back). Loads go out
// kBatch at a time: a loop that loads and stores one entry at a time pays
// an L2 round trip per entry.
__device__ __forceinline__ void sanitize_slice(const SampleKernelParams& p, int begin, int end, bool penalized,
                                               float& best_v, int& best_i) {
  float* logits = p.logits;
  const bool write_back = penalized || p.temperature > 0.0f;
  for (int base = begin + int(threadIdx.x); base < end; base += kThreads * kBatch) {
    float v_rmem[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      v_rmem[j] = i < end ? sanitize(logits[i]) : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      if (i >= end) break;
      if (write_back) logits[i] = v_rmem[j];
      if (!penalized && better(v_rmem[j], i, best_v, best_i)) best_v = v_rmem[j], best_i = i;
    }
  }
}

// 2. on the slice's ids. Distinct ids: no two threads touch one entry.
__device__ __forceinline__ void apply_repetition_penalty(const SampleKernelParams& p, int begin, int end) {
  float* logits = p.logits;
  for (int j = threadIdx.x; j < p.num_penalty; j += kThreads) {
    const int id = p.penalty_ids[j];
    if (id < begin || id >= end) continue;  // another slice's, or out of the row
    float l = logits[id];
    if (j < p.num_repeat) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    if (p.penalty_sub != nullptr) l -= p.penalty_sub[j];
    logits[id] = positive_zero(l);
  }
}

// 3. Argmax of the slice: per thread (ascending ids; done by sanitize_slice
// without a penalty), then block_best into s.best_val and s.best_idx.
__device__ __forceinline__ void slice_argmax(const SampleKernelParams& p, int begin, int end, bool penalized,
                                             float best_v, int best_i, SampleSmem& s) {
  const float* logits = p.logits;
  if (penalized) {
    for (int base = begin + int(threadIdx.x); base < end; base += kThreads * kBatch) {
      float v_rmem[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        v_rmem[j] = i < end ? logits[i] : -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        if (i < end && better(v_rmem[j], i, best_v, best_i)) best_v = v_rmem[j], best_i = i;
      }
    }
  }
  block_best(best_v, best_i, s);
}

// 4. l /= temperature on the slice.
__device__ __forceinline__ void apply_temperature(const SampleKernelParams& p, int begin, int end) {
  float* logits = p.logits;
  for (int base = begin + int(threadIdx.x); base < end; base += kThreads * kBatch) {
    float v_rmem[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      v_rmem[j] = i < end ? logits[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      if (i < end) logits[i] = positive_zero(v_rmem[j] / p.temperature);
    }
  }
}

// 5a. Radix select of the keep-th largest key of the view's entries, most
// significant byte first: leaves the threshold key in s.prefix and how many
// keys equal to it to keep in s.remaining (>= 1).
template <class View>
__device__ __forceinline__ void radix_select(const View& v, int keep, SampleSmem& s) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    s.prefix = 0;
    s.mask = 0;
    s.remaining = keep;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) s.hist[b] = 0;
    __syncthreads();  // cleared bins, scaled logits and the previous digit's prefix are visible
    const uint32_t prefix = s.prefix, mask = s.mask;
    for (int base = v.begin + tid; base < v.end; base += kThreads * kBatch) {
      uint32_t key_rmem[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        key_rmem[j] = i < v.end ? order_key(v.value(i)) : 0u;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * kThreads;
        if (i < v.end && (key_rmem[j] & mask) == prefix) atomicAdd(&s.hist[(key_rmem[j] >> shift) & 0xFFu], 1u);
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

// 5b. Collect in view order (id order): every key above the threshold
// (n_gt of them) and the first of those equal to it (take_eq), into
// s.cand_*; ranks within a warp from ballots, warp offsets from the
// per-warp counts.
template <class View>
__device__ __forceinline__ void collect_candidates(const View& v, uint32_t threshold, int take_eq, int n_gt,
                                                   SampleSmem& s) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int gt_base = 0, eq_base = 0;
  for (int base = v.begin; base < v.end; base += kThreads) {
    const int i = base + tid;
    float val = -INFINITY;
    bool gt = false, eq = false;
    if (i < v.end) {
      val = v.value(i);
      const uint32_t key = order_key(val);
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
      if (idx < n_gt) s.cand_logit[idx] = val, s.cand_id[idx] = v.id(i);
    }
    if (eq) {
      const int e = eq_base + eq_off + __popc(eq_ballot & lanes_below);
      if (e < take_eq) s.cand_logit[n_gt + e] = val, s.cand_id[n_gt + e] = v.id(i);
    }
    gt_base += gt_total;
    eq_base += eq_total;
    __syncthreads();  // the counts are rewritten by the next chunk; the candidates are visible
    if (gt_base >= n_gt && eq_base >= take_eq) break;  // uniform: from shared totals
  }
}

// 5. The view's best `keep` entries into s.cand_* in view order.
template <class View>
__device__ __forceinline__ void select_candidates(const View& v, int keep, SampleSmem& s) {
  radix_select(v, keep, s);
  const uint32_t threshold = s.prefix;
  const int take_eq = s.remaining;  // keys equal to the threshold to keep (>= 1)
  collect_candidates(v, threshold, take_eq, keep - take_eq, s);
}

// 6. Bitonic sort of the keep candidates, best first; padding to a power of
// two sorts after every real candidate.
__device__ __forceinline__ void sort_candidates(int keep, SampleSmem& s) {
  const int tid = threadIdx.x;
  int np = 1;
  while (np < keep) np <<= 1;
  for (int i = keep + tid; i < np; i += kThreads) s.cand_logit[i] = -INFINITY, s.cand_id[i] = INT_MAX;
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

// 6-7 on s.cand_* (the row's best p.keep in id order): the token.
__device__ __forceinline__ void sort_and_draw(const SampleKernelParams& p, SampleSmem& s) {
  sort_candidates(p.keep, s);
  if (threadIdx.x == 0) *p.token_out = draw_token(p, s);
}

// Slice `slice` of `slices` (chunk entries each, the last one shorter) of
// one row, step by step as the header comment numbers them; the last CTA
// of the row to finish merges. ws: the row workspace (unused when
// slices == 1). Returns early the same way in every thread of a CTA (the
// exits are uniform: they read shared values).
__device__ __forceinline__ void sample_slice(const SampleKernelParams& p, int slice, int slices, int chunk,
                                             char* ws, int row) {
  __shared__ SampleSmem s;
  const int tid = threadIdx.x;
  const int begin = slice * chunk;
  const int end = min(p.vocab, begin + chunk);
  const bool penalized = p.num_penalty > 0;
  const bool greedy = p.temperature <= 0.0f;
  float best_v = -INFINITY;
  int best_i = INT_MAX;
  sanitize_slice(p, begin, end, penalized, best_v, best_i);
  __syncthreads();  // the penalty below rewrites some of these entries from other threads
  apply_repetition_penalty(p, begin, end);
  __syncthreads();  // penalized values visible to the whole CTA
  slice_argmax(p, begin, end, penalized, best_v, best_i, s);

  if (slices == 1) {  // the whole row in this CTA
    if (greedy || s.best_val == -INFINITY) {
      if (tid == 0) *p.token_out = s.best_idx;
      return;
    }
    apply_temperature(p, begin, end);
    select_candidates(RowSlice{p.logits, begin, end}, p.keep, s);
    sort_and_draw(p, s);
    return;
  }

  const RowWorkspace w = row_workspace(ws, row, slices, chunk);
  if (!greedy) {  // this slice's best keep_s, in id order, at its place in the row's candidate list
    apply_temperature(p, begin, end);
    const int keep_s = min(p.keep, end - begin);
    select_candidates(RowSlice{p.logits, begin, end}, keep_s, s);
    const int at = slice * min(p.keep, chunk);
    for (int i = tid; i < keep_s; i += kThreads) w.cand_val[at + i] = s.cand_logit[i], w.cand_id[at + i] = s.cand_id[i];
  }
  if (tid == 0) w.best_val[slice] = s.best_val, w.best_idx[slice] = s.best_idx;
  __threadfence();  // this CTA's results are visible device-wide before its count
  __syncthreads();  // every thread's writes are fenced before thread 0 counts the slice
  if (tid == 0) s.last = atomicAdd(w.done, 1u) == unsigned(slices - 1);
  __syncthreads();  // s.last is visible
  if (!s.last) return;
  __threadfence();  // the other slices' results are read after their counts

  best_v = -INFINITY;
  best_i = INT_MAX;
  for (int t = tid; t < slices; t += kThreads) {
    const float v = __ldcg(w.best_val + t);
    const int i = __ldcg(w.best_idx + t);
    if (better(v, i, best_v, best_i)) best_v = v, best_i = i;
  }
  block_best(best_v, best_i, s);
  if (tid == 0) *w.done = 0;  // for the next launch on this workspace (stream order)
  if (greedy || s.best_val == -INFINITY) {
    if (tid == 0) *p.token_out = s.best_idx;
    return;
  }
  const int last_len = p.vocab - (slices - 1) * chunk;
  const int listed = (slices - 1) * min(p.keep, chunk) + min(p.keep, last_len);
  select_candidates(CandidateList{w.cand_val, w.cand_id, 0, listed}, p.keep, s);
  sort_and_draw(p, s);
}

// grid (1, slices): one row.
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const __grid_constant__ SampleKernelParams p, int chunk, char* ws) {
  sample_slice(p, blockIdx.y, gridDim.y, chunk, ws, 0);
}

// rows [gridDim.x] in device memory; grid (rows, slices): CTA (x, y) takes
// slice y of rows[x] (rows on x: up to 2^31 - 1 of them).
__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const SampleKernelParams* __restrict__ rows, int chunk, char* ws) {
  const SampleKernelParams p = rows[blockIdx.x];
  sample_slice(p, blockIdx.y, gridDim.y, chunk, ws, blockIdx.x);
}

struct Grid {
  int slices = 1, chunk = 0;
  size_t workspace_bytes = 0;  // 0: one slice, no workspace
};

// About one CTA per SM over the launch, slices of at least
// kMinSliceEntries and kSliceKeepRatio · max_keep entries. The workspace's
// size and the launches on it both come from here, with the same sm_count.
Grid sample_grid(int vocab, int rows, int max_keep, int sm_count) {
  Grid g;
  g.chunk = vocab;
  if (vocab < 1 || rows < 1 || rows > kCounterSlots || sm_count <= 0) return g;
  const int min_chunk = std::max(kMinSliceEntries, kSliceKeepRatio * std::max(max_keep, 0));
  const int want = ceil_div(sm_count, rows);
  const int most = std::max(1, vocab / min_chunk);
  const int slices = std::min(want, most);
  if (slices <= 1) return g;
  g.chunk = ceil_div(vocab, slices);
  g.slices = ceil_div(vocab, g.chunk);  // no empty slice
  g.workspace_bytes = kCounterBytes + size_t(rows) * row_workspace_bytes(g.slices, g.chunk);
  return g;
}

}  // namespace

size_t sample_workspace_bytes(int vocab, int rows, int max_keep, int sm_count) {
  return sample_grid(vocab, rows, max_keep, sm_count).workspace_bytes;
}

cudaError_t launch_sample(const SampleKernelParams& p, int sm_count, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  Grid g = sample_grid(p.vocab, 1, p.temperature > 0.0f ? p.keep : 0, sm_count);
  if (workspace == nullptr || workspace_bytes < g.workspace_bytes) g = Grid{1, p.vocab, 0};
  sample_kernel<<<dim3(1, g.slices), kThreads, 0, stream>>>(p, g.chunk, static_cast<char*>(workspace));
  return cudaGetLastError();
}

cudaError_t launch_sample_rows(const SampleKernelParams* rows, int n, int vocab, int max_keep, int sm_count,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  Grid g = sample_grid(vocab, n, max_keep, sm_count);
  if (workspace == nullptr || workspace_bytes < g.workspace_bytes) g = Grid{1, vocab, 0};
  sample_rows_kernel<<<dim3(n, g.slices), kThreads, 0, stream>>>(rows, g.chunk, static_cast<char*>(workspace));
  return cudaGetLastError();
}

}  // namespace flashscope::kernels
