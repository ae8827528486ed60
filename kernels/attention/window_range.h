// The keys a sliding-window CTA visits, host and device alike (the views in
// attention_views.cuh use it; tests check it on the host). Plain C++
// outside nvcc.
#pragma once

#if defined(__CUDACC__)
#define FLASHSCOPE_WINDOW_HD __host__ __device__ __forceinline__
#else
#define FLASHSCOPE_WINDOW_HD inline
#endif

#include "kernels/common/math.h"

namespace flashscope::kernels {

// A sliding window's reach on one side, -1 (unbounded) made a distance no
// position reaches (positions stay below 2^30), so bounds need no branch.
constexpr int kUnboundedWindow = 1 << 30;
FLASHSCOPE_WINDOW_HD int window_reach(int w) { return w < 0 ? kUnboundedWindow : w; }

// The keys [begin, end) a windowed CTA visits, for rows at positions
// [first_pos, last_pos] (both window edges grow with the position): from
// `lo`, the first key its first row sees, rounded down to a whole tile of
// block_kv (tiles stay aligned to the sequence, as the trace numbers them),
// to the last key its last row sees. Tiles wholly left of every row's
// window are never visited, and the keys [begin, lo) of the first tile are
// zero-filled, never read (a page before every window may already hold
// another sequence's keys).
FLASHSCOPE_WINDOW_HD void windowed_key_range(int first_pos, int last_pos, int reach_left, int reach_right, int kv_len,
                                             int block_kv, int& lo, int& begin, int& end) {
  // In 64 bits: a position may be negative (more queries than keys) and a
  // reach unbounded.
  const long long first = (long long)first_pos - reach_left;
  lo = first < 0 ? 0 : first < kv_len ? int(first) : kv_len;
  begin = lo / block_kv * block_kv;
  const long long last = (long long)last_pos + 1 + reach_right;
  const int last_clamped = last < 0 ? 0 : last < kv_len ? int(last) : kv_len;
  end = last_clamped > begin ? last_clamped : begin;
}

// Split `split` of `num_splits` of the keys [begin, end) (begin a whole
// tile): equal shares of whole tiles, the last ones possibly empty.
FLASHSCOPE_WINDOW_HD void window_split(int begin, int end, int block_kv, int num_splits, int split, int& split_begin,
                                       int& split_end) {
  const int tiles = ceil_div(end - begin, block_kv);
  const int tiles_per_split = ceil_div(tiles, num_splits);
  const int b = begin + split * tiles_per_split * block_kv;
  split_begin = b < end ? b : end;
  const int e = split_begin + tiles_per_split * block_kv;
  split_end = e < end ? e : end;
}

}  // namespace flashscope::kernels

#undef FLASHSCOPE_WINDOW_HD
