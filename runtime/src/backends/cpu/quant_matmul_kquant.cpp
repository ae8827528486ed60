// The K-quant prefill GEMM against per-256 activations (see
// quant_matmul_kquant.hpp for the arithmetic). Builds of the same math, as
// in quant_matmul.cpp: portable integer loops (the reference), AVX2
// (maddubs + madd) and AVX-512 VNNI (vpdpbusd, then vpmulld by the
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

namespace flashscope::cpu {
namespace {

constexpr int kSubBlocks = 8;
constexpr int kQ4_KBytes = 144;  // d, dmin, scales[12], qs[128]
constexpr int kQ5_KBytes = 176;  // d, dmin, scales[12], qh[32], qs[128]
constexpr int kQ6_KBytes = 210;  // ql[128], qh[64], int8 scales[16], d

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

// Q4_K / Q5_K: element l of sub-block s is nibble s&1 of qs[32·(s/2) + l],
// plus bit s of qh[l] as the fifth bit (Q5_K).
template <bool kFifthBit>
void tile16_q45_k_portable(const uint8_t* w, const TileQ8K* tiles, int64_t nsb, float* out) {
  constexpr int kBytes = kFifthBit ? kQ5_KBytes : kQ4_KBytes;
  for (int t = 0; t < kKTileTokens; ++t) {
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kBytes;
      const TileQ8K& tile = tiles[sb];
      uint8_t sc_m[16];
      unpack_k4_scales16(blk + 4, sc_m);
      const uint8_t* qh = blk + 16;
      const uint8_t* qs = blk + (kFifthBit ? 48 : 16);
      int32_t isum = 0, imin = 0;
      for (int s = 0; s < kSubBlocks; ++s) {
        const uint8_t* q = qs + 32 * (s / 2);
        int32_t sub = 0;
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> (4 * (s & 1))) & 0xF;
          if (kFifthBit) v |= ((qh[l] >> s) & 1) << 4;
          sub += v * q8k_value(tile, t, 32 * s + l);
        }
        isum += sc_m[s] * sub;
        imin += sc_m[8 + s] * bsum32(tile, s, t);
      }
      acc += static_cast<float>(isum) * (load_fp16(blk) * tile.d[t]);
      acc_min += static_cast<float>(imin) * (load_fp16(blk + 2) * tile.d[t]);
    }
    out[t] = acc - acc_min;
  }
}

// Q6_K: element l + 32k of half h is (nibble k/2 of ql[64h + 32(k&1) + l]) |
// (bits 2k, 2k+1 of qh[32h + l]) << 4, minus 32, scaled by sc[8h + 2k + l/16].
void tile16_q6_k_portable(const uint8_t* w, const TileQ8K* tiles, int64_t nsb, float* out) {
  for (int t = 0; t < kKTileTokens; ++t) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kQ6_KBytes;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const TileQ8K& tile = tiles[sb];
      int32_t isum = 0;
      for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) {
          const uint8_t* ql = blk + 64 * h + 32 * (k & 1);
          const uint8_t* qh = blk + 128 + 32 * h;
          int32_t group[2] = {0, 0};
          for (int l = 0; l < 32; ++l) {
            const int v = (((ql[l] >> (4 * (k / 2))) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            group[l / 16] += v * q8k_value(tile, t, 32 * (4 * h + k) + l);
          }
          isum += sc[8 * h + 2 * k] * group[0] + sc[8 * h + 2 * k + 1] * group[1];
        }
      }
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

namespace vnni_kq {
#define FS_TARGET FS_KQ_VNNI
struct Dot {
  FS_TARGET static __m256i step(__m256i acc, __m256i w, __m256i x, __m256i) { return _mm256_dpbusd_epi32(acc, w, x); }
  FS_TARGET static __m256i finish(__m256i isum, __m256i acc, __m256i s32) {
    return _mm256_add_epi32(isum, _mm256_mullo_epi32(acc, s32));
  }
};
#include "backends/cpu/quant_matmul_kquant.inc"
#undef FS_TARGET
}  // namespace vnni_kq
#endif  // FLASHSCOPE_X86_KERNELS

TileKernel pick(GgmlType type, CpuIsa isa) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (isa == CpuIsa::kAvx512Vnni) {
    if (type == GgmlType::kQ4_K) return vnni_kq::tile16_q45_k<false>;
    if (type == GgmlType::kQ5_K) return vnni_kq::tile16_q45_k<true>;
    if (type == GgmlType::kQ6_K) return vnni_kq::tile16_q6_k;
  }
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

bool q8k_tiles_apply(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

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
  if (!q8k_tiles_apply(w.type)) {
    const char* name = ggml_type_name(w.type);
    return unsupported(std::string("matmul_q8k_tiles with ") + (name ? name : "an unknown ggml type") +
                       " weights is not supported");
  }
  if (n_tiles <= 0 || w.rows <= 0) return Status::ok_status();
  if (w.data == nullptr || tiles == nullptr || y == nullptr) {
    return invalid_argument("matmul_q8k_tiles: null weight, input or output");
  }
  if (w.cols % kQ8KBlock != 0) return invalid_argument("matmul_q8k_tiles: cols must be a multiple of 256");
  const TileKernel kernel = pick(w.type, active_cpu_isa());
  const int64_t nsb = w.cols / kQ8KBlock;
  tile16_rows<kKTileTokens>(kernel, w, tiles, n_tiles, nsb, w.row_bytes / static_cast<uint64_t>(nsb),
                            kSegmentSuperBlocks, kRowBlockBytes, y, ldy);
  return Status::ok_status();
}

}  // namespace flashscope::cpu
