// The one-token K-quant product against per-256 activations (see
// quant_matmul_kdot.hpp for the arithmetic). Builds of the same math, as in
// quant_matmul.cpp: portable integer loops (the reference), AVX2 (maddubs +
// madd) and AVX-512 VNNI (maddubs + vpdpwssd), picked at run time by
// active_cpu_isa(). The integer sums are exact in every build; only the
// float accumulation over super-blocks may round differently.
#include "backends/cpu/quant_matmul_kdot.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_X86_KERNELS 1
#include <immintrin.h>
#endif

#include "backends/cpu/openmp.hpp"
#include "backends/cpu/quant_matmul_rows.hpp"  // kParallelMinMacs
#include "flashscope/half.hpp"

namespace flashscope::cpu {
namespace {

static_assert(sizeof(BlockQ8K) == 320, "BlockQ8K: 256 + 32 + 4 bytes, padded to 32");

constexpr int kQK = 256;

// *out = one weight row (nsb super-blocks) · one token's x [nsb].
using Kernel = void (*)(const uint8_t* w, const BlockQ8K* x, int64_t nsb, float* out);

// --- portable ------------------------------------------------------------------

// The portable kernels: quant_matmul_rows.hpp's super-block sums, then the
// block's float scales.
template <bool kFifthBit>
void kdot_q45_k_portable(const uint8_t* w, const BlockQ8K* x, int64_t nsb, float* out) {
  constexpr int kBytes = kFifthBit ? kQ5_KBytes : kQ4_KBytes;
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = w + sb * kBytes;
    const BlockQ8K& xb = x[sb];
    int32_t isum = 0, imin = 0;
    q45_k_superblock_sums<kFifthBit>(
        blk, [&](int i) { return int32_t(xb.qs[i]); },
        [&](int s) { return int32_t(xb.bsums[2 * s]) + xb.bsums[2 * s + 1]; }, &isum, &imin);
    acc += static_cast<float>(isum) * (load_fp16(blk) * xb.d);
    acc_min += static_cast<float>(imin) * (load_fp16(blk + 2) * xb.d);
  }
  *out = acc - acc_min;
}

void kdot_q6_k_portable(const uint8_t* w, const BlockQ8K* x, int64_t nsb, float* out) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = w + sb * kQ6_KBytes;
    const BlockQ8K& xb = x[sb];
    const int32_t isum = q6_k_superblock_sum(blk, [&](int i) { return int32_t(xb.qs[i]); });
    acc += static_cast<float>(isum) * (load_fp16(blk + 208) * xb.d);
  }
  *out = acc;
}

void quantize_q8k_portable(const float* x, BlockQ8K* y) {
  float amax = 0.0f;
  bool nan = false;
  for (int j = 0; j < kQK; ++j) {
    amax = std::max(amax, std::fabs(x[j]));
    nan = nan || std::isnan(x[j]);
  }
  // A NaN activation: zeros under a NaN scale (as quantize_row_q8), so the
  // products come out NaN; no float-to-int conversion of a NaN or an infinity.
  const float d = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
  const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;
  int32_t sums[16] = {};
  for (int j = 0; j < kQK; ++j) {
    const int q = nan ? 0 : static_cast<int>(std::nearbyint(std::clamp(x[j] * inv_d, -127.0f, 127.0f)));
    y->qs[j] = static_cast<int8_t>(q);
    sums[j / 16] += q;
  }
  for (int g = 0; g < 16; ++g) y->bsums[g] = static_cast<int16_t>(sums[g]);
  y->d = d;
}

// --- x86 builds ------------------------------------------------------------------

#ifdef FLASHSCOPE_X86_KERNELS
#define FS_KD_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FS_KD_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

FS_KD_AVX2 inline float fp16_avx(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

FS_KD_AVX2 inline float hsum4(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

FS_KD_AVX2 inline float hsum8(__m256 v) {
  return hsum4(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// quantize_q8k_portable's bits: the same float product, rounded by the
// same mode (cvtps rounds to nearest even, as nearbyint does by default).
FS_KD_AVX2 void quantize_q8k_avx2(const float* x, BlockQ8K* y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256 amax = _mm256_setzero_ps();
  for (int j = 0; j < kQK; j += 8) amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), amax);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const __m256 inv_d = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int b = 0; b < kQK; b += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + b + 8 * k), inv_d),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    // packs work within 128-bit lanes; a dword permutation restores element order.
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_store_si256(reinterpret_cast<__m256i*>(y->qs + b), bytes);
    // Sums of 4 bytes per lane, then lanes 0-3 (elements 0-15) and 4-7 (16-31).
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, bytes), ones16);
    s = _mm256_hadd_epi32(s, s);
    s = _mm256_hadd_epi32(s, s);
    y->bsums[b / 16] = static_cast<int16_t>(_mm256_cvtsi256_si32(s));
    y->bsums[b / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(s, 4));
  }
  y->d = d;
}

namespace avx2_kd {
#define FS_TARGET FS_KD_AVX2
struct Dot {
  FS_TARGET static __m256i madd(__m256i acc, __m256i p, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
  }
};
#include "backends/cpu/quant_matmul_kdot.inc"
#undef FS_TARGET
}  // namespace avx2_kd

namespace vnni_kd {
#define FS_TARGET FS_KD_VNNI
struct Dot {
  FS_TARGET static __m256i madd(__m256i acc, __m256i p, __m256i s) { return _mm256_dpwssd_epi32(acc, p, s); }
};
#include "backends/cpu/quant_matmul_kdot.inc"
#undef FS_TARGET
}  // namespace vnni_kd
#endif  // FLASHSCOPE_X86_KERNELS

Kernel pick(GgmlType type, CpuIsa isa) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (isa == CpuIsa::kAvx512Vnni) {
    if (type == GgmlType::kQ4_K) return vnni_kd::kdot_q45_k<false>;
    if (type == GgmlType::kQ5_K) return vnni_kd::kdot_q45_k<true>;
    if (type == GgmlType::kQ6_K) return vnni_kd::kdot_q6_k;
  }
  if (isa >= CpuIsa::kAvx2) {
    if (type == GgmlType::kQ4_K) return avx2_kd::kdot_q45_k<false>;
    if (type == GgmlType::kQ5_K) return avx2_kd::kdot_q45_k<true>;
    if (type == GgmlType::kQ6_K) return avx2_kd::kdot_q6_k;
  }
#else
  (void)isa;
#endif
  if (type == GgmlType::kQ4_K) return kdot_q45_k_portable<false>;
  if (type == GgmlType::kQ5_K) return kdot_q45_k_portable<true>;
  if (type == GgmlType::kQ6_K) return kdot_q6_k_portable;
  return nullptr;
}

}  // namespace

void quantize_row_q8k(const float* x, BlockQ8K* y, int64_t cols) {
#ifdef FLASHSCOPE_X86_KERNELS
  if (active_cpu_isa() >= CpuIsa::kAvx2) {
    for (int64_t b = 0; b < cols / kQK; ++b) quantize_q8k_avx2(x + b * kQK, y + b);
    return;
  }
#endif
  for (int64_t b = 0; b < cols / kQK; ++b) quantize_q8k_portable(x + b * kQK, y + b);
}

Status matmul_q8k_rows(const QuantMatrix& w, const BlockQ8K* x, int64_t n, float* y, int64_t ldy) {
  if (!is_k_quant(w.type)) {
    const char* name = ggml_type_name(w.type);
    return unsupported(std::string("matmul_q8k_rows with ") + (name ? name : "an unknown ggml type") +
                       " weights is not supported");
  }
  if (n <= 0 || w.rows <= 0) return Status::ok_status();
  if (w.data == nullptr || x == nullptr || y == nullptr) {
    return invalid_argument("matmul_q8k_rows: null weight, input or output");
  }
  if (w.cols % kQK != 0) return invalid_argument("matmul_q8k_rows: cols must be a multiple of 256");
  const Kernel kernel = pick(w.type, active_cpu_isa());
  const int64_t nsb = w.cols / kQK;
  const int64_t rows = w.rows;
  const bool parallel = rows * w.cols * n >= kParallelMinMacs;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w.data + static_cast<uint64_t>(r) * w.row_bytes;
    for (int64_t t = 0; t < n; ++t) kernel(row, x + t * nsb, nsb, y + t * ldy + r);
  }
  return Status::ok_status();
}

}  // namespace flashscope::cpu
