// Split-KV combine (flash-decoding's second step).
//
// Each split s of a row produced its own normalized output o_s and its
// log-sum-exp lse_s over its keys. The row's softmax over all keys is then
//   lse = M + ln Σ_s exp(lse_s − M),   o = Σ_s exp(lse_s − lse) · o_s
// with M = max_s lse_s for range safety; splits that saw no key have
// lse_s = −inf and weight 0.
//
// The combine is bound by latency, not bandwidth (128 splits x 32 rows x 128
// columns is 2 MiB, from L2): one thread per column looping over 64 splits
// was eight dependent rounds of loads (bench/TUNING.md#paged-decode). Here a row
// is cut into slices of columns, and a slice's splits are dealt to groups of
// threads: each thread issues all its loads (a float4 of columns from each of
// up to 8 splits, and the row's lse values, four per lane) before it uses
// any, so a row costs one round trip to memory, and the groups' sums meet in
// shared memory. A block reads at most 16 KiB of partials, so the 32 rows of
// a B1 decode at 128 splits spread over 128 blocks (about one per SM on an
// H200) instead of queueing behind a few SMs' L2 bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention/paged_configs.cuh"
#include "kernels/attention/paged_launch.h"
#include "kernels/common/math.h"
#include "kernels/common/ptx.cuh"

namespace flashscope::kernels {

namespace {

constexpr int kCombineLoads = 8;      // splits per thread: 8 float4 loads in flight, 32 registers
constexpr int kCombineThreads = 256;  // the most threads of a block
constexpr int kWarp = 32;
constexpr int kLsePerLane = 4;        // a warp holds a row's lse values, four per lane
// A slice is at least 8 float4 columns: each split's part is one whole
// 128-byte line of its partial row.
constexpr int kMinSliceChunks = 8;
// Bytes of partials one block reads at most, where a row can still be cut.
constexpr int kBlockBytes = 16 << 10;
static_assert(kMaxPagedSplits <= kLsePerLane * kWarp, "the combine's lse reduction covers at most 128 splits");
static_assert(ceil_div(kMaxPagedSplits, kCombineLoads) * kMinSliceChunks <= kCombineThreads,
              "the narrowest slice of the most splits must fit in a block");

// How a block is cut: slices_per_block slices, each of groups x slice_chunks
// threads (whole warps, so a warp lies in one row and its lse reduction is
// shuffles). A slice covers float4 columns [k·slice_chunks, (k+1)·slice_chunks)
// of one row; group g of it sums splits g, g + groups, g + 2·groups, ...
// (up to kCombineLoads of them).
struct CombineLayout {
  int groups;
  int slice_chunks;
  int slices_per_block;
};

template <int DIM>
CombineLayout combine_layout(int splits) {
  constexpr int kChunks = DIM / 4;
  // A row is whole slices (a slice is only ever halved while even). At
  // head_dim 80 (20 chunks, 10 at the narrowest) a slice ends inside a line.
  static_assert(kChunks >= kMinSliceChunks, "a row is at least the narrowest slice");
  int groups = ceil_div(splits, kCombineLoads);
  int slice_chunks = kChunks;
  auto slice_bytes = [&] { return int64_t(splits) * slice_chunks * int64_t(sizeof(float4)); };
  // Halved while a half is still whole rows of slices of at least
  // kMinSliceChunks (head_dim 96's 24 chunks stop at 12).
  while (slice_chunks % 2 == 0 && slice_chunks / 2 >= kMinSliceChunks &&
         (slice_bytes() > kBlockBytes || groups * slice_chunks > kCombineThreads))
    slice_chunks /= 2;
  while (groups * slice_chunks % kWarp != 0) ++groups;  // extra groups have no splits
  const int slice_threads = groups * slice_chunks;
  const int by_threads = kCombineThreads / slice_threads;
  const int by_bytes = int(std::max<int64_t>(1, kBlockBytes / slice_bytes()));
  return {groups, slice_chunks, std::max(1, std::min(by_threads, by_bytes))};
}

template <typename T>
__device__ void store4(T* dst, float4 v) {
  const uint2 packed = {MmaType<T>::pack(v.x, v.y), MmaType<T>::pack(v.z, v.w)};
  *reinterpret_cast<uint2*>(dst) = packed;  // o is 16-byte aligned, strides multiples of 8 (validate())
}

// Block: slices_per_block x groups x slice_chunks threads; thread (k, g, c)
// owns float4 column `chunk` of slice blockIdx.x · slices_per_block + k
// (of row slice / (DIM/4 / slice_chunks)), for the splits of group g.
//   o_partial   [splits, batch, q_heads, q_len, DIM] float
//   lse_partial [splits, batch, q_heads, q_len]       float
//   o           [batch, q_len, q_heads, DIM] through its strides
//   lse         [batch, q_heads, q_len] (row order), optional
template <typename T, int DIM>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __grid_constant__ PagedKernelParams p, const CombineLayout layout) {
  constexpr int kChunks = DIM / 4;
  __shared__ float4 acc_smem[kCombineThreads];  // [slices_per_block][groups][slice_chunks]
  const int slice_threads = layout.groups * layout.slice_chunks;
  const int slices_per_row = kChunks / layout.slice_chunks;
  const int group = threadIdx.x % slice_threads / layout.slice_chunks;
  const int lane = threadIdx.x % kWarp;
  const int splits = p.num_splits;
  const int64_t rows = int64_t(p.batch) * p.q_heads * p.q_len;
  const int64_t slice = int64_t(blockIdx.x) * layout.slices_per_block + threadIdx.x / slice_threads;
  const int64_t row = slice / slices_per_row;  // (seq · q_heads + head) · q_len + token
  const int chunk = int(slice % slices_per_row) * layout.slice_chunks + threadIdx.x % layout.slice_chunks;
  const bool live = row < rows;  // the last block may run past the rows; uniform over each warp

  pdl_wait();  // the attention grid has completed and its partials are visible

  // Every load this thread makes, issued before any is used. L2 only (.cg):
  // the partials are read once, and were written by other SMs.
  float4 o_rmem[kCombineLoads];
#pragma unroll
  for (int i = 0; i < kCombineLoads; ++i) {
    const int s = group + i * layout.groups;
    o_rmem[i] = live && s < splits
                    ? __ldcg(reinterpret_cast<const float4*>(p.o_partial + (s * rows + row) * DIM) + chunk)
                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float lse_rmem[kLsePerLane];  // split lane + j·32
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) {
    const int s = lane + j * kWarp;
    lse_rmem[j] = live && s < splits ? __ldcg(p.lse_partial + s * rows + row) : -INFINITY;
  }

  // Every warp of the row reduces the same lse values: no barrier needed.
  float m = lse_rmem[0];
#pragma unroll
  for (int j = 1; j < kLsePerLane; ++j) m = fmaxf(m, lse_rmem[j]);
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  // No split saw a key: subtract 0 so the weights are exp(-inf) = 0, not NaN.
  const float m_use = m == -INFINITY ? 0.0f : m;
  float w_rmem[kLsePerLane];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) {
    w_rmem[j] = __expf(lse_rmem[j] - m_use);
    sum += w_rmem[j];
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);

  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kCombineLoads; ++i) {
    // Split s's weight sits in lane s % 32, register s / 32. A warp may span
    // several groups (slices narrower than 32 columns), so each lane picks
    // its own register from shuffles of every register that holds a split.
    const int s = group + i * layout.groups;
    float w = 0.0f;  // stays 0 past the splits, where o_rmem holds 0
#pragma unroll
    for (int j = 0; j < kLsePerLane; ++j) {
      if (splits <= j * kWarp) break;  // uniform: no split in this register
      const float w_j = __shfl_sync(0xffffffffu, w_rmem[j], s % kWarp);
      if (s / kWarp == j) w = w_j;
    }
    acc.x += w * o_rmem[i].x;
    acc.y += w * o_rmem[i].y;
    acc.z += w * o_rmem[i].z;
    acc.w += w * o_rmem[i].w;
  }
  if (layout.groups > 1) {  // uniform over the block
    acc_smem[threadIdx.x] = acc;
    __syncthreads();  // every group's sum of its splits is in shared memory
    if (group != 0) return;
    for (int g = 1; g < layout.groups; ++g) {
      const float4 x = acc_smem[threadIdx.x + g * layout.slice_chunks];
      acc.x += x.x;
      acc.y += x.y;
      acc.z += x.z;
      acc.w += x.w;
    }
  }
  if (!live) return;
  const int token = int(row % p.q_len);
  const int head = int((row / p.q_len) % p.q_heads);
  const int seq = int(row / (int64_t(p.q_len) * p.q_heads));
  T* o = static_cast<T*>(p.o) + seq * p.o_batch_stride + token * p.o_seq_stride + head * p.o_head_stride;
  const bool seen = sum > 0.0f;  // false: no key at all, output 0
  store4(o + chunk * 4, seen ? make_float4(acc.x / sum, acc.y / sum, acc.z / sum, acc.w / sum)
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f));
  if (chunk == 0 && p.lse != nullptr) p.lse[row] = seen ? m + logf(sum) : -INFINITY;
}

// Programmatic: launch with programmatic stream serialization, so the grid is
// scheduled while the attention grid before it still runs (it waits in
// pdl_wait). Only where paged_combine_waits_on_producer() says yes.
template <typename T, int DIM>
cudaError_t combine_typed(const PagedKernelParams& p, cudaStream_t stream, bool programmatic) {
  const CombineLayout layout = combine_layout<DIM>(p.num_splits);
  const int64_t slices = int64_t(p.batch) * p.q_heads * p.q_len * (DIM / 4 / layout.slice_chunks);
  const cudaError_t err = launch_maybe_programmatic(
      combine_kernel<T, DIM>, dim3(unsigned(ceil_div<int64_t>(slices, layout.slices_per_block))),
      dim3(unsigned(layout.slices_per_block * layout.groups * layout.slice_chunks)), 0, stream, programmatic, p, layout);
  if (err != cudaSuccess) cudaGetLastError();  // leave no launch error behind for the next call
  return err;
}

template <typename T>
cudaError_t combine_dim(int head_dim, const PagedKernelParams& p, cudaStream_t stream, bool programmatic) {
  if (head_dim == 32) return combine_typed<T, 32>(p, stream, programmatic);
  if (head_dim == 64) return combine_typed<T, 64>(p, stream, programmatic);
  if (head_dim == 80) return combine_typed<T, 80>(p, stream, programmatic);
  if (head_dim == 96) return combine_typed<T, 96>(p, stream, programmatic);
  if (head_dim == 128) return combine_typed<T, 128>(p, stream, programmatic);
  if (head_dim == 256) return combine_typed<T, 256>(p, stream, programmatic);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_paged_combine(ElemType type, int head_dim, const PagedKernelParams& p, cudaStream_t stream,
                                 bool programmatic) {
  if (p.num_splits < 1 || p.num_splits > kMaxPagedSplits) return cudaErrorInvalidValue;
  return type == ElemType::kFP16 ? combine_dim<__half>(head_dim, p, stream, programmatic)
                                 : combine_dim<__nv_bfloat16>(head_dim, p, stream, programmatic);
}

cudaError_t paged_combine_waits_on_producer(bool* waits) {
  // Every instantiation comes from this file's compilation: one speaks for all.
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, combine_kernel<__nv_bfloat16, 128>);
  if (err != cudaSuccess) return err;
  *waits = attr.ptxVersion >= 90;
  return cudaSuccess;
}

}  // namespace flashscope::kernels
