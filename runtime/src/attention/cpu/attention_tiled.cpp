// The CPU attention backend: FlashAttention-2 forward, step for step as the
// GPU kernel does it, so a machine without a GPU gets the same numbers (to
// rounding) and the same online-softmax story for the dashboard.
//
// Work item: one (sequence b, q-head h, block of kBlockQ = 64 queries), run
// by one OpenMP thread. For each tile of kBlockKV = 64 keys the block may see:
//   S     = Q · Kᵀ                   float32 accumulation (bf16/fp16 products are exact in float)
//   S    *= scale · log2(e)          folded so the exponentials are exp2, as on the GPU
//   m_new = max(m, rowmax(S))        masked keys are never looked at, i.e. count as -inf
//   alpha = exp2(m − m_new)          rescale factor of the previous tiles' l and O
//   P     = exp2(S − m_new)
//   l     = alpha · l + rowsum(P)    from the unrounded float P, as FlashAttention-2 does
//   O     = alpha · O + round(P) · V P rounded to p.dtype first: the GPU feeds P to the
//                                    tensor cores in bf16/fp16, and that rounding is the
//                                    largest error the kernel adds, so we add it too
// then O /= l, stored in p.dtype, and lse = m·ln2 + ln l (natural log).
// Soft-capping (softcap = c > 0) caps S before the max, in log2 units:
// S <- c' · tanh(S / c') with c' = c · log2(e), which is c · tanh(s / c) on
// the natural scaled score s, times log2(e).
// Rows that see no key keep l = 0 and store zeros and lse = -inf. A block
// runs only the tiles some row of it can see: causal blocks stop at the last
// tile their last row can see (the GPU's tile skip), a left window starts at
// the tile of its first row's first key, a right window stops like causal.
// Inside a tile each row reads only its own keys: with its position
// pos = i + (kv_len − q_len), pos − window_left <= j and j <= pos (causal) or
// j <= pos + window_right.
//
// Layouts: q, k, v, o through the PrefillParams strides (head_dim
// contiguous); lse dense [batch, q_heads, q_len] (varlen [q_heads, total_q]).
//
// Speed (the portable build is SSE2 only, no -march; with AVX2 the two
// micro-kernels below run in 8-lane registers, chosen at run time, same
// bits): K and V tiles
// are converted once per tile into float scratch owned by the thread, K
// transposed ([head_dim, 64]) so both products stream contiguous float rows
// (keys for S, head_dim for P·V). Two small register-blocked micro-kernels
// (qk_rows, pv_rows) keep a 4-row × 8-column accumulator in registers, so
// each K or V load feeds four query rows; plain loops that GCC and Clang
// vectorise without -ffast-math or intrinsics. P is stored transposed
// ([64 keys, 4 rows]): row-major P let GCC 12 vectorise pv_rows across keys
// with scalar gathers (bench/TUNING.md#figures-moved-out-of-product-comments). Scratch is allocated once per
// call, before the parallel region, so allocation failure is a Status and no
// exception crosses OpenMP.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "attention/attention_validate.hpp"
#include "attention/cpu/attention_cpu.hpp"
#include "attention/cpu/prefill_sequences.hpp"
#include "cpu_features.hpp"
#include "util/math.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FS_TILED_AVX2 1
#endif

namespace flashscope::cpu {
namespace {

constexpr int kBlockQ = 64;   // queries per work item (the GPU CTA's q tile)
constexpr int kBlockKV = 64;  // keys per tile (the GPU's KV tile)
constexpr int kRows = 4;      // query rows that share every K and V load of the micro-kernels
constexpr int kLanes = 8;     // columns per accumulator row: 4×8 floats stay in SSE registers

using kernels::align_up;

// Float scratch of one thread. Dp is head_dim rounded up to kLanes; the
// padding columns are zero from allocation on and never written, so the
// micro-kernels need no tail loops.
//   q  [kBlockQ, Dp]      the block's queries (rows past the block's end zero)
//   kt [Dp, kBlockKV]     the K tile, transposed
//   v  [kBlockKV, Dp]     the V tile
//   o  [kBlockQ, Dp]      unnormalised output
//   s  [kRows, kBlockKV]  scores of the rows in flight
//   pt [kBlockKV, kRows]  their rounded P, transposed: P·V reads one key's
//                         kRows values together
//   m, l [kBlockQ]        running max (log2 units) and running sum
struct Scratch {
  float *q, *kt, *v, *o, *s, *pt, *m, *l;
};

size_t padded_dim(int dim) { return align_up<size_t>(static_cast<size_t>(dim), kLanes); }

// Every buffer starts on a 64-byte boundary of the slab.
size_t scratch_floats(int dim) {
  const size_t tile = align_up<size_t>(kBlockQ * padded_dim(dim), 16);
  return 4 * tile + 2 * align_up<size_t>(kRows * kBlockKV, 16) + 2 * align_up<size_t>(kBlockQ, 16);
}

Scratch carve(float* base, int dim) {
  const size_t tile = align_up<size_t>(kBlockQ * padded_dim(dim), 16);
  Scratch w;
  w.q = base;
  w.kt = w.q + tile;
  w.v = w.kt + tile;
  w.o = w.v + tile;
  w.s = w.o + tile;
  w.pt = w.s + align_up<size_t>(kRows * kBlockKV, 16);
  w.m = w.pt + align_up<size_t>(kRows * kBlockKV, 16);
  w.l = w.m + align_up<size_t>(kBlockQ, 16);
  return w;
}

struct Problem {
  const PrefillParams* p;
  const uint16_t *q, *k, *v;
  uint16_t* o;
  int dim, group;
  float scale_log2;  // softmax scale · log2(e)
  float cap_log2;    // softcap · log2(e); 0: no soft-cap
  int64_t lse_head_stride;
};

// s[r][j] = scale_log2 · Σ_d q[r][d] · kt[d][j] for kRows rows, j < n rounded
// up to kLanes (the extra columns read stale K and are never used).
//   q [kRows, dp], kt [dp, kBlockKV], s [kRows, kBlockKV]
// A kRows × kLanes accumulator lives in registers across the whole d loop;
// each K load feeds kRows rows.
void qk_rows_portable(const float* q, const float* kt, int n, int dp, float scale_log2, float* s) {
  for (int j0 = 0; j0 < n; j0 += kLanes) {
    float acc[kRows][kLanes] = {};
    for (int d = 0; d < dp; ++d) {
      const float* k_d = kt + static_cast<size_t>(d) * kBlockKV + j0;
      for (int r = 0; r < kRows; ++r) {
        const float q_rd = q[static_cast<size_t>(r) * dp + d];
        for (int c = 0; c < kLanes; ++c) acc[r][c] += q_rd * k_d[c];
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kLanes; ++c) s[r * kBlockKV + j0 + c] = acc[r][c] * scale_log2;
  }
}

// One online-softmax step of one row over its scores s[begin, end) of this
// tile (begin < end), soft-capped first when cap_log2 > 0. Writes rounded P
// to p[j · kRows] for begin <= j < end and 0 for the other j < n, so the row
// can share the P·V product with rows that see other keys. Returns alpha,
// the factor that rescales the row's O and l from the old max to the new one.
template <typename T>
float softmax_row(float* s, int begin, int end, int n, float cap_log2, float* m, float* l, float* p) {
  if (cap_log2 > 0.0f)
    for (int j = begin; j < end; ++j) s[j] = cap_log2 * std::tanh(s[j] / cap_log2);
  float tile_max = s[begin];
  for (int j = begin + 1; j < end; ++j) tile_max = std::max(tile_max, s[j]);
  const float m_new = std::max(*m, tile_max);
  const float alpha = std::exp2(*m - m_new);  // 0 on the row's first tile (m = -inf)

  float row_sum = 0.0f;
  for (int j = 0; j < begin; ++j) p[j * kRows] = 0.0f;
  for (int j = begin; j < end; ++j) {
    const float pj = std::exp2(s[j] - m_new);
    row_sum += pj;
    p[j * kRows] = T::round(pj);
  }
  for (int j = end; j < n; ++j) p[j * kRows] = 0.0f;
  *l = *l * alpha + row_sum;
  *m = m_new;
  return alpha;
}

// o[r][:] = alpha[r] · o[r][:] + Σ_{begin <= j < end} p[r][j] · v[j][:] for kRows rows.
//   pt [kBlockKV, kRows], v [kBlockKV, dp], o [kRows, dp]
// Same register blocking as qk_rows: each V load feeds kRows rows.
void pv_rows_portable(const float* pt, const float* alpha, int begin, int end, const float* v, int dp, float* o) {
  for (int d0 = 0; d0 < dp; d0 += kLanes) {
    float acc[kRows][kLanes] = {};
    for (int j = begin; j < end; ++j) {
      const float* v_j = v + static_cast<size_t>(j) * dp + d0;
      for (int r = 0; r < kRows; ++r) {
        const float p_rj = pt[j * kRows + r];
        for (int c = 0; c < kLanes; ++c) acc[r][c] += p_rj * v_j[c];
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float* o_r = o + static_cast<size_t>(r) * dp + d0;
      for (int c = 0; c < kLanes; ++c) o_r[c] = o_r[c] * alpha[r] + acc[r][c];
    }
  }
}

#if FS_TILED_AVX2
// The two micro-kernels with AVX2 registers: one 8-lane register per row
// where the portable build holds two SSE halves. A multiply, then an add,
// never a fused multiply-add (no "fma" target): each output rounds as the
// portable loops round it, so both give the same bits.
static_assert(kRows == 4 && kLanes == 8, "the AVX2 micro-kernels hold a row in one ymm, four rows");

__attribute__((target("avx2"))) void qk_rows_avx2(const float* q, const float* kt, int n, int dp, float scale_log2,
                                                  float* s) {
  const __m256 scale = _mm256_set1_ps(scale_log2);
  for (int j0 = 0; j0 < n; j0 += kLanes) {
    __m256 acc[kRows] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int d = 0; d < dp; ++d) {
      const __m256 k = _mm256_loadu_ps(kt + static_cast<size_t>(d) * kBlockKV + j0);
      for (int r = 0; r < kRows; ++r)
        acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_set1_ps(q[static_cast<size_t>(r) * dp + d]), k));
    }
    for (int r = 0; r < kRows; ++r) _mm256_storeu_ps(s + r * kBlockKV + j0, _mm256_mul_ps(acc[r], scale));
  }
}

__attribute__((target("avx2"))) void pv_rows_avx2(const float* pt, const float* alpha, int begin, int end,
                                                  const float* v, int dp, float* o) {
  for (int d0 = 0; d0 < dp; d0 += kLanes) {
    __m256 acc[kRows] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int j = begin; j < end; ++j) {
      const __m256 v_j = _mm256_loadu_ps(v + static_cast<size_t>(j) * dp + d0);
      for (int r = 0; r < kRows; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_set1_ps(pt[j * kRows + r]), v_j));
    }
    for (int r = 0; r < kRows; ++r) {
      float* o_r = o + static_cast<size_t>(r) * dp + d0;
      _mm256_storeu_ps(o_r, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(o_r), _mm256_set1_ps(alpha[r])), acc[r]));
    }
  }
}
#endif

using QkRows = void (*)(const float*, const float*, int, int, float, float*);
using PvRows = void (*)(const float*, const float*, int, int, const float*, int, float*);

// The micro-kernels for this CPU, chosen once (unless a test asks for the
// portable ones: use_portable_tiled_kernels).
struct MicroKernels {
  QkRows qk = qk_rows_portable;
  PvRows pv = pv_rows_portable;
};
std::atomic<bool> g_portable_only{false};
const MicroKernels& micro_kernels() {
  static const MicroKernels portable;
  static const MicroKernels best = [] {
    MicroKernels m;
#if FS_TILED_AVX2
    if (cpu_has_avx2()) m = {qk_rows_avx2, pv_rows_avx2};
#endif
    return m;
  }();
  return g_portable_only.load(std::memory_order_relaxed) ? portable : best;
}

// One work item: queries [q0, q0 + rows) of sequence `seq`, q-head h.
template <typename T>
void attend_block(const Problem& pr, const Sequence& seq, int q0, int h, const Scratch& w) {
  const PrefillParams& p = *pr.p;
  const int dim = pr.dim;
  const int dp = static_cast<int>(padded_dim(dim));
  const int kv_head = h / pr.group;
  const int rows = std::min(kBlockQ, seq.q_len - q0);
  const int rows_padded = static_cast<int>(align_up<size_t>(static_cast<size_t>(rows), kRows));
  const int causal_shift = seq.kv_len - seq.q_len;  // bottom-right alignment
  const MicroKernels& mk = micro_kernels();

  for (int r = 0; r < rows; ++r) {
    const uint16_t* src = pr.q + seq.q_offset + (q0 + r) * p.q.seq_stride + h * p.q.head_stride;
    float* dst = w.q + static_cast<size_t>(r) * dp;
    for (int d = 0; d < dim; ++d) dst[d] = T::load(src[d]);
  }
  // Rows past the block's end run through the micro-kernels with P = 0.
  std::fill(w.q + static_cast<size_t>(rows) * dp, w.q + static_cast<size_t>(rows_padded) * dp, 0.0f);
  std::fill(w.o, w.o + static_cast<size_t>(rows_padded) * dp, 0.0f);
  std::fill(w.m, w.m + rows_padded, -std::numeric_limits<float>::infinity());
  std::fill(w.l, w.l + rows_padded, 0.0f);

  // Row r's keys are [key_lo(r), key_hi(r)) (unclamped: may be empty or
  // reach past [0, kv_len)); both grow with r, so the block's keys are
  // [key_lo(0), key_hi(rows - 1)) clamped, and tiles outside it are skipped.
  const int64_t pos0 = int64_t{q0} + causal_shift;  // position of the block's row 0
  auto key_lo = [&](int r) -> int64_t { return p.window_left >= 0 ? pos0 + r - p.window_left : 0; };
  auto key_hi = [&](int r) -> int64_t {
    int64_t hi = seq.kv_len;
    if (p.causal) hi = std::min(hi, pos0 + r + 1);
    if (p.window_right >= 0) hi = std::min(hi, pos0 + r + p.window_right + 1);
    return hi;
  };
  const int kv_begin = static_cast<int>(std::clamp<int64_t>(key_lo(0), 0, seq.kv_len)) / kBlockKV * kBlockKV;
  const int kv_end = static_cast<int>(std::clamp<int64_t>(key_hi(rows - 1), 0, seq.kv_len));

  for (int t0 = kv_begin; t0 < kv_end; t0 += kBlockKV) {
    const int n = std::min(kBlockKV, kv_end - t0);
    for (int j = 0; j < n; ++j) {
      const uint16_t* k_src = pr.k + seq.k_offset + (t0 + j) * p.k.seq_stride + kv_head * p.k.head_stride;
      const uint16_t* v_src = pr.v + seq.v_offset + (t0 + j) * p.v.seq_stride + kv_head * p.v.head_stride;
      float* v_dst = w.v + static_cast<size_t>(j) * dp;
      for (int d = 0; d < dim; ++d) w.kt[static_cast<size_t>(d) * kBlockKV + j] = T::load(k_src[d]);
      for (int d = 0; d < dim; ++d) v_dst[d] = T::load(v_src[d]);
    }

    for (int r0 = 0; r0 < rows; r0 += kRows) {
      mk.qk(w.q + static_cast<size_t>(r0) * dp, w.kt, n, dp, pr.scale_log2, w.s);
      float alpha[kRows];
      int pv_begin = n, pv_end = 0;  // the keys of this tile any of these rows sees
      for (int g = 0; g < kRows; ++g) {
        const int r = r0 + g;
        int begin = 0, end = 0;  // the row's keys in this tile: [begin, end)
        if (r < rows) {
          begin = static_cast<int>(std::clamp<int64_t>(key_lo(r) - t0, 0, n));
          end = static_cast<int>(std::clamp<int64_t>(key_hi(r) - t0, 0, n));
        }
        if (begin >= end) {  // nothing visible in this tile: m, l and O unchanged
          for (int j = 0; j < n; ++j) w.pt[j * kRows + g] = 0.0f;
          alpha[g] = 1.0f;
          continue;
        }
        alpha[g] = softmax_row<T>(w.s + g * kBlockKV, begin, end, n, pr.cap_log2, &w.m[r], &w.l[r], w.pt + g);
        pv_begin = std::min(pv_begin, begin);
        pv_end = std::max(pv_end, end);
      }
      mk.pv(w.pt, alpha, pv_begin, pv_end, w.v, dp, w.o + static_cast<size_t>(r0) * dp);
    }
  }

  for (int r = 0; r < rows; ++r) {
    uint16_t* dst = pr.o + seq.o_offset + (q0 + r) * p.o.seq_stride + h * p.o.head_stride;
    const float* acc = w.o + static_cast<size_t>(r) * dp;
    const float l = w.l[r];
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // l = 0: no key seen, acc is 0 too
    for (int d = 0; d < dim; ++d) dst[d] = T::store(acc[d] * inv_l);
    if (p.lse != nullptr) {
      p.lse[seq.lse_offset + h * pr.lse_head_stride + q0 + r] =
          l > 0.0f ? w.m[r] * kLn2 + std::log(l) : -std::numeric_limits<float>::infinity();
    }
  }
}

template <typename T>
void run_blocks(const Problem& pr, const std::vector<Sequence>& seqs, const std::vector<Block>& blocks,
                float* scratch, size_t per_thread) {
  const int64_t items = static_cast<int64_t>(blocks.size()) * pr.p->q_heads;
  parallel_items(
      items, [&](int tid) { return carve(scratch + static_cast<size_t>(tid) * per_thread, pr.dim); },
      [&](int64_t item, int, const Scratch& w) {
        const Block& blk = blocks[static_cast<size_t>(item / pr.p->q_heads)];
        const int h = static_cast<int>(item % pr.p->q_heads);
        attend_block<T>(pr, seqs[static_cast<size_t>(blk.seq)], blk.q0, h, w);
      });
}

}  // namespace

void use_portable_tiled_kernels(bool on) { g_portable_only.store(on, std::memory_order_relaxed); }

Status attention_tiled(const PrefillParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) {
    return unsupported("the CPU attention backend runs bf16 or fp16 tensors only");
  }
  if (p.q_heads <= 0 || p.kv_heads <= 0 || p.head_dim <= 0 || p.batch <= 0) return Status::ok_status();
  // validate() rejects this too; without it the head mapping would run past kv_heads.
  if (p.q_heads % p.kv_heads != 0) return invalid_argument("q_heads must be a multiple of kv_heads");

  const bool varlen = p.cu_seqlens_q != nullptr;
  Problem pr;
  pr.p = &p;
  pr.q = static_cast<const uint16_t*>(p.q.data);
  pr.k = static_cast<const uint16_t*>(p.k.data);
  pr.v = static_cast<const uint16_t*>(p.v.data);
  pr.o = static_cast<uint16_t*>(p.o.data);
  pr.dim = p.head_dim;
  pr.group = p.q_heads / p.kv_heads;
  pr.scale_log2 = effective_softmax_scale(p) * kLog2e;
  pr.cap_log2 = p.softcap > 0.0f ? p.softcap * kLog2e : 0.0f;
  pr.lse_head_stride = varlen ? p.cu_seqlens_q[p.batch] : p.q_len;

  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const size_t per_thread = scratch_floats(p.head_dim);

  std::vector<Sequence> seqs;
  std::vector<Block> blocks;
  std::vector<float> scratch;
  try {
    prefill_sequences(p, kBlockQ, &seqs, &blocks);
    scratch.resize(per_thread * static_cast<size_t>(threads));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "CPU attention: cannot allocate scratch"};
  }

  if (p.dtype == DType::kBF16) {
    run_blocks<Bf16>(pr, seqs, blocks, scratch.data(), per_thread);
  } else {
    run_blocks<Fp16>(pr, seqs, blocks, scratch.data(), per_thread);
  }
  return Status::ok_status();
}

}  // namespace flashscope::cpu
