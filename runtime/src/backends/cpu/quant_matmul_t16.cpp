// 16-token VNNI GEMM against 32-element weight blocks (see
// quant_matmul_t16.hpp). x86-64 with AVX-512 VL/BW + VNNI only, chosen at
// run time; elsewhere matmul_t16_applies is false and matmul's own kernels run.
#include "backends/cpu/quant_matmul_t16.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_X86_KERNELS 1
#include <immintrin.h>
#endif

#include "backends/cpu/quant_matmul_rows.hpp"

namespace flashscope::cpu {
namespace {

// One 32-column block of sixteen tokens: qs[j][t] holds token t's columns
// 4j..4j+3.
struct TileQ8T {
  float d[kT16Tokens];  // each token's block scale
  float s[kT16Tokens];  // d · Σq
  int8_t qs[kQ8Block / 4][kT16Tokens][4];
};

// Columns in segments of 32 blocks (a tile's segment: 20 KB) and rows in
// blocks of at most kRowBlockBytes of their segments (tile16_rows).
constexpr int64_t kSegmentBlocks = 32;
constexpr uint64_t kRowBlockBytes = 8 * 1024;

enum class Kind { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0 };

int block_bytes(Kind k) {
  switch (k) {
    case Kind::kQ4_0: return 18;  // d, qs[16]
    case Kind::kQ4_1: return 20;  // d, m, qs[16]
    case Kind::kQ5_0: return 22;  // d, qh[4], qs[16]
    case Kind::kQ5_1: return 24;  // d, m, qh[4], qs[16]
    default: return 34;           // Q8_0: d, int8 qs[32]
  }
}

using TileKernel = void (*)(const uint8_t* w, const TileQ8T* tiles, int64_t nb, float* out);

#ifdef FLASHSCOPE_X86_KERNELS
#define FS_T16 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

FS_T16 inline float fp16_t16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

// 16 columns: w holds their 16 unsigned weights in both 128-bit halves, x
// the tile's 4 rows of those columns (64 bytes each: tokens 0-7, 8-15).
// acc[2g + c]: group g, chain c (two chains halve the dependency latency).
FS_T16 inline void dot16_t16(__m256i* acc, __m256i w, const int8_t* x) {
  const auto* xv = reinterpret_cast<const __m256i*>(x);
  const __m256i w0 = _mm256_shuffle_epi32(w, 0x00), w1 = _mm256_shuffle_epi32(w, 0x55);
  const __m256i w2 = _mm256_shuffle_epi32(w, 0xAA), w3 = _mm256_shuffle_epi32(w, 0xFF);
  acc[0] = _mm256_dpbusd_epi32(acc[0], w0, _mm256_loadu_si256(xv));
  acc[2] = _mm256_dpbusd_epi32(acc[2], w0, _mm256_loadu_si256(xv + 1));
  acc[1] = _mm256_dpbusd_epi32(acc[1], w1, _mm256_loadu_si256(xv + 2));
  acc[3] = _mm256_dpbusd_epi32(acc[3], w1, _mm256_loadu_si256(xv + 3));
  acc[0] = _mm256_dpbusd_epi32(acc[0], w2, _mm256_loadu_si256(xv + 4));
  acc[2] = _mm256_dpbusd_epi32(acc[2], w2, _mm256_loadu_si256(xv + 5));
  acc[1] = _mm256_dpbusd_epi32(acc[1], w3, _mm256_loadu_si256(xv + 6));
  acc[3] = _mm256_dpbusd_epi32(acc[3], w3, _mm256_loadu_si256(xv + 7));
}

// out[t] = one weight row · token t of a tile run (tiles [nb]), t < 16.
// The block's weights as unsigned bytes in the [16 | 16] form: lo = columns
// 0-15, hi = columns 16-31, each in both halves; its float scale and offset.
template <Kind kKind>
FS_T16 void tile16(const uint8_t* w, const TileQ8T* tiles, int64_t nb, float* out) {
  constexpr int kBytes = kKind == Kind::kQ4_0 ? 18 : kKind == Kind::kQ4_1 ? 20 : kKind == Kind::kQ5_0 ? 22
                                                    : kKind == Kind::kQ5_1 ? 24 : 34;
  constexpr bool kHasMin = kKind == Kind::kQ4_1 || kKind == Kind::kQ5_1;
  constexpr bool kFifthBit = kKind == Kind::kQ5_0 || kKind == Kind::kQ5_1;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 off[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kBytes;
    const TileQ8T& tile = tiles[b];
    const float dw = fp16_t16(blk);
    __m256i lo, hi;
    float mw;  // the offset's factor of d_x·Σx_q
    if (kKind == Kind::kQ8_0) {
      const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
      lo = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))), bias);
      hi = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))), bias);
      mw = -128.0f * dw;
    } else {
      const uint8_t* qs = blk + (kHasMin ? 4 : 2) + (kFifthBit ? 4 : 0);
      const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
      lo = _mm256_and_si256(q, low4);
      hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if (kFifthBit) {  // bit j of qh is column j's fifth bit: a byte mask per 16 columns, in both halves
        uint32_t qh;
        std::memcpy(&qh, blk + (kHasMin ? 4 : 2), sizeof qh);
        const __m256i bit4 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_maskz_mov_epi8((qh & 0xFFFFu) * 0x10001u, bit4));
        hi = _mm256_or_si256(hi, _mm256_maskz_mov_epi8((qh >> 16) * 0x10001u, bit4));
      }
      mw = kHasMin ? fp16_t16(blk + 2) : (kFifthBit ? -16.0f : -8.0f) * dw;
    }
    __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    dot16_t16(a, lo, tile.qs[0][0]);
    dot16_t16(a, hi, tile.qs[4][0]);
    const __m256 dwv = _mm256_set1_ps(dw), mwv = _mm256_set1_ps(mw);
    for (int g = 0; g < 2; ++g) {
      const __m256 sums = _mm256_cvtepi32_ps(_mm256_add_epi32(a[2 * g], a[2 * g + 1]));
      acc[g] = _mm256_fmadd_ps(sums, _mm256_mul_ps(dwv, _mm256_loadu_ps(tile.d + 8 * g)), acc[g]);
      off[g] = _mm256_fmadd_ps(mwv, _mm256_loadu_ps(tile.s + 8 * g), off[g]);
    }
  }
  for (int g = 0; g < 2; ++g) _mm256_storeu_ps(out + 8 * g, _mm256_add_ps(acc[g], off[g]));
}
#endif  // FLASHSCOPE_X86_KERNELS

bool kind_of(GgmlType type, Kind* k) {
  switch (type) {
    case GgmlType::kQ4_0: *k = Kind::kQ4_0; return true;
    case GgmlType::kQ4_1: *k = Kind::kQ4_1; return true;
    case GgmlType::kQ5_0: *k = Kind::kQ5_0; return true;
    case GgmlType::kQ5_1: *k = Kind::kQ5_1; return true;
    case GgmlType::kQ8_0: *k = Kind::kQ8_0; return true;
    default: return false;
  }
}

TileKernel pick(GgmlType type) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (active_cpu_isa() != CpuIsa::kAvx512Vnni) return nullptr;
  switch (type) {
    case GgmlType::kQ4_0: return tile16<Kind::kQ4_0>;
    case GgmlType::kQ4_1: return tile16<Kind::kQ4_1>;
    case GgmlType::kQ5_0: return tile16<Kind::kQ5_0>;
    case GgmlType::kQ5_1: return tile16<Kind::kQ5_1>;
    case GgmlType::kQ8_0: return tile16<Kind::kQ8_0>;
    default: return nullptr;
  }
#else
  (void)type;
  return nullptr;
#endif
}

// xq [n, nb] → tiles [n / 16, nb].
void regroup(const BlockQ8* xq, int64_t n_tiles, int64_t nb, TileQ8T* tiles) {
  for (int64_t i = 0; i < n_tiles; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      TileQ8T& tile = tiles[i * nb + b];
      for (int t = 0; t < kT16Tokens; ++t) {
        const BlockQ8& src = xq[(i * kT16Tokens + t) * nb + b];
        tile.d[t] = src.d;
        tile.s[t] = src.d * static_cast<float>(src.sum);
        for (int j = 0; j < kQ8Block / 4; ++j) std::memcpy(tile.qs[j][t], src.qs + 4 * j, 4);
      }
    }
  }
}

}  // namespace

bool matmul_t16_applies(GgmlType type) { return pick(type) != nullptr; }

Status matmul_t16(const QuantMatrix& w, const BlockQ8* xq, int64_t n, float* y, int64_t ldy, int64_t* done) {
  *done = 0;
  Kind kind;
  const TileKernel kernel = pick(w.type);
  if (kernel == nullptr || !kind_of(w.type, &kind)) {
    const char* name = ggml_type_name(w.type);
    return unsupported(std::string("matmul_t16 with ") + (name ? name : "an unknown ggml type") +
                       " weights is not supported on this CPU");
  }
  const int64_t n_tiles = n / kT16Tokens;
  if (n_tiles <= 0 || w.rows <= 0) return Status::ok_status();
  if (w.data == nullptr || xq == nullptr || y == nullptr) return invalid_argument("matmul_t16: null weight, input or output");
  const int64_t nb = w.cols / kQ8Block;
  // The calling thread's regrouped activations, kept for its next call.
  thread_local std::vector<TileQ8T> tiles;
  try {
    if (tiles.size() < static_cast<size_t>(n_tiles * nb)) tiles.resize(static_cast<size_t>(n_tiles * nb));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "matmul_t16: cannot allocate the regrouped activations"};
  }
  TileQ8T* tp = tiles.data();
  regroup(xq, n_tiles, nb, tp);
  tile16_rows<kT16Tokens>(kernel, w, tp, n_tiles, nb, static_cast<uint64_t>(block_bytes(kind)), kSegmentBlocks,
                          kRowBlockBytes, y, ldy);
  *done = n_tiles * kT16Tokens;
  return Status::ok_status();
}

}  // namespace flashscope::cpu
