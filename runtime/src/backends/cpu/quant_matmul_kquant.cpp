// The K-quant prefill GEMM against per-256 activations (see
// quant_matmul_kquant.hpp for the arithmetic). Builds of the same math, as
// in quant_matmul.cpp: portable integer loops (the reference), AVX2
// (maddubs + madd, quant_matmul_kquant.inc) and AVX-512 VNNI (512-bit
// vpdpbusd on weights unpacked once per row block, then vpmulld by the
// sub-block scale), picked at run time by active_cpu_isa(). The integer
// sums are exact in every build; only the float accumulation over
// super-blocks may round differently.
#include "backends/cpu/quant_matmul_kquant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_X86_KERNELS 1
#include <immintrin.h>
#endif

#include "backends/cpu/openmp.hpp"
#include "backends/cpu/quant_matmul_kdot.hpp"
#include "backends/cpu/quant_matmul_rows.hpp"
#include "flashscope/half.hpp"
#include "util/math.hpp"

namespace flashscope::cpu {
namespace {


// The columns run in segments of this many super-blocks (1024 columns: a
// tile's segment is 17 KB), and the rows in blocks of at most
// kRowBlockBytes of their segments (tile16_rows): wide matrices, ffn_down's
// 3072 columns, would otherwise stream each tile from L2 for every row.
constexpr int64_t kSegmentSuperBlocks = 4;
constexpr uint64_t kRowBlockBytes = 12 * 1024;

// out[t] = one weight row · token t of a tile run (tiles [nsb]), t < 16.
using TileKernel = void (*)(const uint8_t* w, const TileQ8K* tiles, int64_t nsb, float* out);

// --- portable ------------------------------------------------------------------

inline int32_t bsum32(const TileQ8K& tile, int s, int t) { return tile.bsums[s][t][0] + tile.bsums[s][t][1]; }

// The portable kernels: quant_matmul_rows.hpp's super-block sums for each
// token of the tile, then the block's float scales.
template <bool kFifthBit>
void tile16_q45_k_portable(const uint8_t* w, const TileQ8K* tiles, int64_t nsb, float* out) {
  constexpr int kBytes = kFifthBit ? kQ5_KBytes : kQ4_KBytes;
  for (int t = 0; t < kKTileTokens; ++t) {
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kBytes;
      const TileQ8K& tile = tiles[sb];
      int32_t isum = 0, imin = 0;
      q45_k_superblock_sums<kFifthBit>(
          blk, [&](int i) { return int32_t(q8k_value(tile, t, i)); }, [&](int s) { return bsum32(tile, s, t); },
          &isum, &imin);
      acc += static_cast<float>(isum) * (load_fp16(blk) * tile.d[t]);
      acc_min += static_cast<float>(imin) * (load_fp16(blk + 2) * tile.d[t]);
    }
    out[t] = acc - acc_min;
  }
}

void tile16_q6_k_portable(const uint8_t* w, const TileQ8K* tiles, int64_t nsb, float* out) {
  for (int t = 0; t < kKTileTokens; ++t) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kQ6_KBytes;
      const TileQ8K& tile = tiles[sb];
      const int32_t isum = q6_k_superblock_sum(blk, [&](int i) { return int32_t(q8k_value(tile, t, i)); });
      acc += static_cast<float>(isum) * (load_fp16(blk + 208) * tile.d[t]);
    }
    out[t] = acc;
  }
}

// Token t's super-block, quantized once by quantize_row_q8k (the one-token
// kernels' quantizer: the same values either way), into tile slot t.
void place_in_tile(const BlockQ8K& q, TileQ8K* tile, int t) {
  for (int j = 0; j < kQ8KBlock; ++j) tile->qs[j / 4][t][j % 4] = q.qs[j];
  for (int g = 0; g < 16; ++g) tile->bsums[g / 2][t][g % 2] = q.bsums[g];
  tile->d[t] = q.d;
}

// --- x86 builds ------------------------------------------------------------------

#ifdef FLASHSCOPE_X86_KERNELS
#define FS_KQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FS_KQ_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

FS_KQ_AVX2 inline float fp16_avx(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

namespace avx2_kq {
#define FS_TARGET FS_KQ_AVX2
struct Dot {
  FS_TARGET static __m256i step(__m256i acc, __m256i w, __m256i x, __m256i s16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), s16));
  }
  FS_TARGET static __m256i finish(__m256i isum, __m256i acc, __m256i) { return _mm256_add_epi32(isum, acc); }
};
#include "backends/cpu/quant_matmul_kquant.inc"
#undef FS_TARGET
}  // namespace avx2_kq


// --- AVX-512 VNNI, 512-bit: weights unpacked once per row block ---------------
//
// The 256-bit kernels above unpack a row's bits and shuffle each weight
// dword to the token lanes again for every tile, so a 128-token chunk redoes
// that work 8 times a row: with vpdpbusd, about as many instructions as the
// dot products themselves. Here a row block's column segment is unpacked
// once into bytes (Unpacked, L1-resident beside the tile's segment), and
// each weight dword goes from memory to all sixteen token lanes of a zmm
// (vpbroadcastd m32: a load, no shuffle) to meet the same 4 columns of the
// sixteen tokens, 64 bytes of the tile, in one vpdpbusd. kRowGroup rows run together so one load of those
// 64 bytes serves kRowGroup of them. The min (Q4_K/Q5_K) and −32 (Q6_K)
// terms take one vpdpwssd per 32 columns against the bsums. The integer
// sums, and the float operations on them per super-block, are the AVX2
// kernels': the same bits.
//
// GCC 12 flags the _mm512_undefined_* pass-through operands inside its own
// AVX-512 intrinsics as (maybe-)uninitialized (a false positive; GCC bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
namespace vnni512_kq {

constexpr int kRowGroup = 4;
// Rows a block unpacks (Unpacked: 16 × 4 × 360 B = 23 KB beside the tile's
// 18.7 KB segment).
constexpr int64_t kBlockRows = 16;
static_assert(kBlockRows == kKTileTokens, "store_transposed stores square blocks");

// One super-block of one row, unpacked. Q4_K/Q5_K: sc[s] scales the 32
// columns of sub-block s (sc[8..16): the mins, unused); Q6_K: sc[g] the 16
// columns of group g. m[p] is the pair (lo, hi) that the tile's bsums[p] are weighted
// by, two int16 in an int32: (m_p, m_p) for Q4_K/Q5_K, (32·sc[2p],
// 32·sc[2p+1]) for Q6_K.
struct Unpacked {
  uint8_t q[kQ8KBlock];  // column i's weight: 0..31 (Q4_K/Q5_K), 0..63 (Q6_K)
  int32_t sc[16];
  int32_t m[8];
  float d, dmin;  // dmin: Q4_K/Q5_K only
};

FS_KQ_VNNI inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
FS_KQ_VNNI inline void store256(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// Chunk c of qs (32 bytes): sub-block 2c in the low nibbles, 2c+1 in the
// high; Q5_K's fifth bit of element l of sub-block s is bit s of qh[l]. The
// 16-bit shifts carry bits across bytes; the masks drop them.
template <bool kFifthBit>
FS_KQ_VNNI void unpack_q45_k(const uint8_t* blk, Unpacked* u) {
  alignas(16) uint8_t sc_m[16];
  unpack_k4_scales16(blk + 4, sc_m);
  const __m512i sc_m32 = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc_m)));
  _mm512_storeu_si512(u->sc, sc_m32);
  const __m256i m = _mm512_extracti64x4_epi64(sc_m32, 1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(u->m), _mm256_or_si256(m, _mm256_slli_epi32(m, 16)));
  u->d = fp16_avx(blk);
  u->dmin = fp16_avx(blk + 2);
  const uint8_t* qs = blk + (kFifthBit ? 48 : 16);
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m256i qh = kFifthBit ? load256(blk + 16) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load256(qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if (kFifthBit) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
      qh = _mm256_srli_epi16(qh, 2);
    }
    store256(u->q + 64 * c, lo);
    store256(u->q + 64 * c + 32, hi);
  }
}

// Q6_K: column 128h + 32k + l is (nibble k/2 of ql[64h + 32(k&1) + l]) |
// (bits 2k, 2k+1 of qh[32h + l]) << 4, in group (column / 16) = 8h + 2k + l/16.
FS_KQ_VNNI void unpack_q6_k(const uint8_t* blk, Unpacked* u) {
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
  _mm512_storeu_si512(u->sc, _mm512_cvtepi8_epi32(sc));
  // int16 pairs in int32, low first: (32·sc[2p], 32·sc[2p+1]) at m[p].
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(u->m), _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5));
  u->d = fp16_avx(blk + 208);
  u->dmin = 0.0f;
  const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(blk + 64 * h), ql1 = load256(blk + 64 * h + 32);
    const __m256i qh = load256(blk + 128 + 32 * h);
    uint8_t* q = u->q + 128 * h;
    store256(q, _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2)));
    store256(q + 32, _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2)));
    store256(q + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2)));
    store256(q + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                     _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2)));
  }
}

FS_KQ_VNNI inline __m512i broadcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// out[r][t] = row r of a group of kRows · token t (t < 16) over nsb
// super-blocks: the rows' unpacked super-blocks at u[r · u_stride + sb], the
// tiles at tiles[sb]. kGroup: columns a scale covers (32: Q4_K/Q5_K, whose
// mins go to their own float sum; 16: Q6_K, whose −32 term is subtracted in
// integers).
template <int kRows, int kGroup>
FS_KQ_VNNI void rows16(const Unpacked* u, int64_t u_stride, const TileQ8K* tiles, int64_t nsb,
                       float (*out)[kKTileTokens]) {
  constexpr bool kMinTerm = kGroup == 32;
  __m512 acc[kRows], acc_min[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = acc_min[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const TileQ8K& tile = tiles[sb];
    const Unpacked* w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = u + r * u_stride + sb;
    __m512i isum[kRows], imin[kRows];
    for (int r = 0; r < kRows; ++r) isum[r] = imin[r] = _mm512_setzero_si512();
    for (int g = 0; g < kQ8KBlock / kGroup; ++g) {
      __m512i a[kRows];
      for (int r = 0; r < kRows; ++r) a[r] = _mm512_setzero_si512();
      for (int j = 0; j < kGroup / 4; ++j) {
        const int col = kGroup * g + 4 * j;
        const __m512i x = _mm512_loadu_si512(tile.qs[col / 4][0]);
        for (int r = 0; r < kRows; ++r) a[r] = _mm512_dpbusd_epi32(a[r], broadcast32(w[r]->q + col), x);
      }
      for (int r = 0; r < kRows; ++r) {
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(a[r], _mm512_set1_epi32(w[r]->sc[g])));
      }
    }
    for (int p = 0; p < 8; ++p) {
      const __m512i bs = _mm512_loadu_si512(tile.bsums[p][0]);
      for (int r = 0; r < kRows; ++r) imin[r] = _mm512_dpwssd_epi32(imin[r], bs, _mm512_set1_epi32(w[r]->m[p]));
    }
    const __m512 dx = _mm512_loadu_ps(tile.d);
    for (int r = 0; r < kRows; ++r) {
      const __m512 d = _mm512_set1_ps(w[r]->d);
      if (kMinTerm) {
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, dx), acc[r]);
        acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[r]), _mm512_mul_ps(_mm512_set1_ps(w[r]->dmin), dx),
                                     acc_min[r]);
      } else {
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum[r], imin[r])), _mm512_mul_ps(d, dx), acc[r]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) _mm512_storeu_ps(out[r], kMinTerm ? _mm512_sub_ps(acc[r], acc_min[r]) : acc[r]);
}

// A row block's outputs of one tile, out[r][t] (r < n_rows ≤ 16), into
// y_tile [16, ldy] at its columns 0..n_rows (added onto them when add),
// transposed in registers so that a token's outputs go out in one masked
// store: 16 stores a tile where one per element took 256. y mostly misses
// the caches (a 3072-row matrix's is 1.5 MB a chunk), and fewer stores in
// flight let more of the misses overlap.
FS_KQ_VNNI void store_transposed(const float (*out)[kKTileTokens], int64_t n_rows, bool add, float* y_tile,
                                 int64_t ldy) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < n_rows ? _mm512_loadu_ps(out[i]) : _mm512_setzero_ps();
  // Pairs of elements, then pairs of pairs, within each 128-bit lane; then
  // the 128-bit lanes across four rows, twice: r[j] ends as column j.
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xDD);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
  }
  const auto mask = static_cast<__mmask16>((1u << n_rows) - 1);
  for (int j = 0; j < kKTileTokens; ++j) {
    float* yt = y_tile + j * ldy;
    _mm512_mask_storeu_ps(yt, mask, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, yt), r[j]) : r[j]);
  }
}

using Unpack = void (*)(const uint8_t* blk, Unpacked* u);

// y [16 · n_tiles, w.rows] as matmul_q8k_tiles: rows in blocks of
// kBlockRows, columns in segments of kSegmentSuperBlocks; a block's segment
// is unpacked once and meets every tile's segment.
template <int kGroup>
void matmul(Unpack unpack, uint64_t sb_bytes, const QuantMatrix& w, const TileQ8K* tiles, int64_t n_tiles,
            int64_t nsb, float* y, int64_t ldy) {
  const int64_t row_blocks = ceil_div(w.rows, kBlockRows);
  [[maybe_unused]] const bool parallel = w.rows * w.cols * n_tiles * kKTileTokens >= kParallelMinMacs;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t r0 = rb * kBlockRows, n_rows = std::min(w.rows - r0, kBlockRows);
    Unpacked u[kBlockRows * kSegmentSuperBlocks];  // [row][super-block of the segment]
    float out[kBlockRows][kKTileTokens];
    for (int64_t seg = 0; seg < nsb; seg += kSegmentSuperBlocks) {
      const int64_t seg_n = std::min<int64_t>(kSegmentSuperBlocks, nsb - seg);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* row = w.data + static_cast<uint64_t>(r0 + r) * w.row_bytes + static_cast<uint64_t>(seg) * sb_bytes;
        for (int64_t b = 0; b < seg_n; ++b) unpack(row + static_cast<uint64_t>(b) * sb_bytes, &u[r * seg_n + b]);
      }
      // The weights unpacked next (this block's next segment, or the next
      // block's first) come from DRAM: their lines are prefetched a share a
      // tile while the tiles run, instead of missing all at once in unpack.
      const bool last_seg = seg + kSegmentSuperBlocks >= nsb;
      const int64_t next_r0 = last_seg ? r0 + kBlockRows : r0;
      const int64_t next_seg = last_seg ? 0 : seg + kSegmentSuperBlocks;
      const int64_t next_rows = std::max<int64_t>(0, std::min(w.rows - next_r0, kBlockRows));
      const uint64_t next_bytes = static_cast<uint64_t>(std::min(kSegmentSuperBlocks, nsb - next_seg)) * sb_bytes;
      for (int64_t i = 0; i < n_tiles; ++i) {
        for (int64_t r = next_rows * i / n_tiles; r < next_rows * (i + 1) / n_tiles; ++r) {
          const uint8_t* row = w.data + static_cast<uint64_t>(next_r0 + r) * w.row_bytes +
                               static_cast<uint64_t>(next_seg) * sb_bytes;
          for (uint64_t b = 0; b < next_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row + b), _MM_HINT_T1);
        }
        const TileQ8K* t = tiles + i * nsb + seg;
        int64_t r = 0;
        for (; r + kRowGroup <= n_rows; r += kRowGroup) rows16<kRowGroup, kGroup>(u + r * seg_n, seg_n, t, seg_n, out + r);
        for (; r < n_rows; ++r) rows16<1, kGroup>(u + r * seg_n, seg_n, t, seg_n, out + r);
        store_transposed(out, n_rows, seg > 0, y + i * kKTileTokens * ldy + r0, ldy);
      }
    }
  }
}

// False (nothing written) for a type this build does not take.
bool try_matmul(const QuantMatrix& w, const TileQ8K* tiles, int64_t n_tiles, int64_t nsb, float* y, int64_t ldy) {
  switch (w.type) {
    case GgmlType::kQ4_K: matmul<32>(unpack_q45_k<false>, kQ4_KBytes, w, tiles, n_tiles, nsb, y, ldy); return true;
    case GgmlType::kQ5_K: matmul<32>(unpack_q45_k<true>, kQ5_KBytes, w, tiles, n_tiles, nsb, y, ldy); return true;
    case GgmlType::kQ6_K: matmul<16>(unpack_q6_k, kQ6_KBytes, w, tiles, n_tiles, nsb, y, ldy); return true;
    default: return false;
  }
}

}  // namespace vnni512_kq
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // FLASHSCOPE_X86_KERNELS

TileKernel pick(GgmlType type, CpuIsa isa) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (isa >= CpuIsa::kAvx2) {
    if (type == GgmlType::kQ4_K) return avx2_kq::tile16_q45_k<false>;
    if (type == GgmlType::kQ5_K) return avx2_kq::tile16_q45_k<true>;
    if (type == GgmlType::kQ6_K) return avx2_kq::tile16_q6_k;
  }
#else
  (void)isa;
#endif
  if (type == GgmlType::kQ4_K) return tile16_q45_k_portable<false>;
  if (type == GgmlType::kQ5_K) return tile16_q45_k_portable<true>;
  if (type == GgmlType::kQ6_K) return tile16_q6_k_portable;
  return nullptr;
}

}  // namespace

void pack_q8k_tiles(const float* x, int64_t ldx, int64_t n, int64_t cols, TileQ8K* tiles) {
  const int64_t nsb = cols / kQ8KBlock;
  const int64_t count = n / kKTileTokens * nsb;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n * cols >= 64 * 1024)
#endif
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = k / nsb, b = k % nsb;
    for (int t = 0; t < kKTileTokens; ++t) {
      BlockQ8K q;
      quantize_row_q8k(x + (i * kKTileTokens + t) * ldx + b * kQ8KBlock, &q, kQ8KBlock);
      place_in_tile(q, &tiles[k], t);
    }
  }
}

Status matmul_q8k_tiles(const QuantMatrix& w, const TileQ8K* tiles, int64_t n_tiles, float* y, int64_t ldy) {
  if (!is_k_quant(w.type)) {
    const char* name = ggml_type_name(w.type);
    return unsupported(std::string("matmul_q8k_tiles with ") + (name ? name : "an unknown ggml type") +
                       " weights is not supported");
  }
  if (n_tiles <= 0 || w.rows <= 0) return Status::ok_status();
  if (w.data == nullptr || tiles == nullptr || y == nullptr) {
    return invalid_argument("matmul_q8k_tiles: null weight, input or output");
  }
  if (w.cols % kQ8KBlock != 0) return invalid_argument("matmul_q8k_tiles: cols must be a multiple of 256");
  const int64_t nsb = w.cols / kQ8KBlock;
#ifdef FLASHSCOPE_X86_KERNELS
  if (active_cpu_isa() == CpuIsa::kAvx512Vnni && vnni512_kq::try_matmul(w, tiles, n_tiles, nsb, y, ldy)) {
    return Status::ok_status();
  }
#endif
  const TileKernel kernel = pick(w.type, active_cpu_isa());
  tile16_rows<kKTileTokens>(kernel, w, tiles, n_tiles, nsb, w.row_bytes / static_cast<uint64_t>(nsb),
                            kSegmentSuperBlocks, kRowBlockBytes, y, ldy);
  return Status::ok_status();
}

}  // namespace flashscope::cpu
