// The int8 GEMV over weights kept in their GGUF blocks
// (kernels/model/quant_gemv_q8.cuh: inputs quantized to int8 blocks of 32,
// dp4a), switched on in one process with cuda::set_quant_gemv_q8_max_rows:
//   every block type, k below one warp step, across a partial 2048-element
//   window (32-element types: k not a multiple of 256), n 1, 37 (rows off
//   16-byte alignment), 1030 and 9001 (several units a warp), rows 1..8,
//   kStore and kAccumulate, against the CPU dequantizer;
//   the fused inputs (kRmsNorm, kAddRmsNorm, kSplitKv) against the tiles;
//   the epilogues (kRopeAppend, kSwiglu, kGegluTanh, a row range) against
//   the same kernel's stored products with the epilogue applied on the host;
//   Q6_K's one-row kernel (its parts staged in shared memory) against the
//   two-row kernel (loaded from global memory), bit for bit.
//
// Bounds. The kernel multiplies the exact dequantized weights by inputs
// rounded to int8 per block of 32: x̃ = d·q, d = amax/127, q = round(x/d).
//  - Against the CPU with the same rounding emulated (x̃ computed on the
//    host as the kernel does, the same float operations): only fp32
//    summation differs, 3e-5 of Σ(|a·q| + |b|)·|x̃| over the weights'
//    decoded terms (a·q and b may cancel in w = a·q + b; the kernel sums
//    them apart).
//  - Against the exact inputs, what a user gets: |x − x̃| <= d/2 per
//    element, so |error| <= Σ_blocks d/2 · Σ|w| (with 1% for the float
//    rounding of d and 1/d), and the error's RMS over all outputs stays
//    under 2% of the outputs' RMS (about 0.5% expected for normal inputs).
//  - Against the tiles (the same bf16 inputs, weights rounded to bf16): the
//    input bound above plus the weights' rounding, 2^-9 of Σ|w·x| (4e-3
//    with the host's staged rows standing in for the device's).
//  - Epilogues on the host: the kernel's own products (bit-identical: a
//    row's sum does not depend on the grid or the epilogue), so one bf16
//    rounding apart (2^-7 of the value, plus 1e-3 of the tensor's RMS).
// A wrong row, group, scale, sum or token is an error of the order of the
// values themselves: far outside every bound.
// Without a CUDA device every case says it was skipped and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/model_ops_cuda.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "kernels/quant/quant_blocks.h"
#include "support/gpu.hpp"
#include "support/quant_blocks.hpp"
#include "support/random.hpp"

using namespace flashscope;
using flashscope::testing::download;
using flashscope::testing::poisoned;
using flashscope::testing::random_bf16;
using flashscope::testing::random_f32;
using flashscope::testing::random_quant_blocks;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::upload;

namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Which kernel takes quantized steps for a scope (the int8 GEMV or the tiles), and the previous choice back after.
class Paths {
 public:
  Paths()
      : gemv_(cuda::quant_gemv_max_rows()), q8_(cuda::quant_gemv_q8_max_rows()), warps_(cuda::quant_gemv_q8_warps()) {}
  ~Paths() {
    cuda::set_quant_gemv_max_rows(gemv_);
    cuda::set_quant_gemv_q8_max_rows(q8_);
    cuda::set_quant_gemv_q8_warps(warps_);
  }
  void use_q8(bool on) {
    cuda::set_quant_gemv_max_rows(0);
    cuda::set_quant_gemv_q8_max_rows(on ? 8 : 0);
  }

 private:
  int gemv_, q8_, warps_;
};

// A quantized matrix [n, k] on the device; on the host its exact dequantization w, and per element |a·q| + |b|.
struct QuantMatrix {
  int n, k;
  std::vector<float> w, mag;
  DeviceBuffer d;
  cuda::DeviceMatrix m;

  // offset: bytes past the allocation's (256-byte) start where the matrix starts.
  QuantMatrix(GgmlType type, int n_, int k_, std::mt19937_64& rng, int offset = 0) : n(n_), k(k_) {
    const int block = static_cast<int>(ggml_block_size(type));
    REQUIRE(k % block == 0);
    const std::vector<uint8_t> bytes = random_quant_blocks(static_cast<int>(type), n, k / block, rng);
    const int64_t row_bytes = int64_t(k / block) * ggml_type_size(type);
    w.resize(size_t(n) * k);
    mag.resize(w.size());
    for (int r = 0; r < n; ++r) {
      REQUIRE(dequantize_row(type, bytes.data() + r * row_bytes, &w[size_t(r) * k], k).ok());
      for (int g = 0; g < k / 32; ++g) {
        float q[32];
        const kernels::quant::GroupScales s =
            kernels::quant::decode_group_any(static_cast<int>(type), bytes.data() + r * row_bytes, g, q);
        for (int i = 0; i < 32; ++i)
          mag[size_t(r) * k + 32 * g + i] = std::fabs((i < 16 ? s.a0 : s.a1) * q[i]) + std::fabs(s.b);
      }
    }
    std::vector<uint8_t> placed(size_t(offset), 0);
    placed.insert(placed.end(), bytes.begin(), bytes.end());
    d = upload(placed);
    m.type = type;
    m.data = static_cast<const uint8_t*>(d.data()) + offset;
    m.rows = n;
    m.cols = k;
    m.row_bytes = row_bytes;
  }
};

// x [rows, k] as the kernel rounds it: per block of 32, d = amax/127 and q = round(x · (127/amax)), in float.
std::vector<double> q8_rounded(const std::vector<float>& x, int rows, int k) {
  std::vector<double> out(x.size());
  for (int t = 0; t < rows; ++t)
    for (int b = 0; b < k / 32; ++b) {
      const float* xb = &x[size_t(t) * k + 32 * b];
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const float d = amax / 127.0f;
      for (int i = 0; i < 32; ++i) out[size_t(t) * k + 32 * b + i] = double(d) * std::nearbyint(xb[i] * inv);
    }
  return out;
}

// Σ_blocks d/2 · Σ|w| of weight row r against input row t (x [rows, k]): the input rounding's bound.
double rounding_bound(const QuantMatrix& w, int r, const std::vector<float>& x, int t) {
  double bound = 0;
  for (int b = 0; b < w.k / 32; ++b) {
    double amax = 0, sw = 0;
    for (int i = 0; i < 32; ++i) {
      amax = std::max(amax, std::fabs(double(x[size_t(t) * w.k + 32 * b + i])));
      sw += std::fabs(double(w.w[size_t(r) * w.k + 32 * b + i]));
    }
    bound += amax / 254.0 * sw;
  }
  return 1.01 * bound;
}

std::vector<float> as_floats(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_float(b[i]);
  return f;
}

double rms_of(const std::vector<uint16_t>& v) {
  double s = 0;
  size_t n = 0;
  for (uint16_t b : v) {
    const float f = bf16_to_float(b);
    if (std::isnan(f)) continue;
    s += double(f) * f;
    ++n;
  }
  return n ? std::sqrt(s / double(n)) : 0.0;
}

// bf16 outputs element by element: both NaN (untouched), or within a bf16 rounding of each other.
int bf16_mismatches(const std::vector<uint16_t>& got, const std::vector<float>& want) {
  std::vector<uint16_t> want_b(want.size());
  for (size_t i = 0; i < want.size(); ++i) want_b[i] = float_to_bf16(want[i]);
  const double floor = 1e-3 * rms_of(want_b);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float a = bf16_to_float(got[i]), b = want[i];
    if (std::isnan(a) || std::isnan(b)) {
      bad += std::isnan(a) != std::isnan(b) ? 1 : 0;
      continue;
    }
    bad += std::fabs(double(a) - b) <= std::ldexp(std::fabs(double(b)), -7) + floor ? 0 : 1;
  }
  return bad;
}

}  // namespace

TEST_CASE("quant gemv q8 gpu: every block type, rows 1..8, odd k and n, equal the CPU dequantizer") {
  if (skip_without_gpu()) return;
  Paths paths;
  paths.use_q8(true);
  std::mt19937_64 rng(2108);
  // k = 8448 (rounds of two 2048-element windows and a part, for the 16-warp
  // CTA) draws from its own generator, so the other cases keep their data.
  std::mt19937_64 rng_wide(8448);
  for (GgmlType type : kTypes) {
    const int block = static_cast<int>(ggml_block_size(type));
    // below one warp step; across a partial second 2048-element window; many steps; many rounds
    const std::vector<int> ks =
        block == 32 ? std::vector<int>{96, 800, 2080, 4096, 8448} : std::vector<int>{256, 2304, 4096, 8448};
    for (int k : ks) {
      std::mt19937_64& gen = k > 4096 ? rng_wide : rng;
      // 9001: more units than the grid's warps (each warp takes several in turn); 37: rows 4 bytes past
      // 16-byte alignment (Q4_K / Q5_K take 4-byte loads there)
      for (int n : {1, 37, 1030, 9001}) {
        if ((n == 1030 && k < 2000) || (n == 9001 && k > 800)) continue;  // the host's sums are the test's cost
        if (k > 4096 && n > 37) continue;
        QuantMatrix w(type, n, k, gen, n == 37 ? 4 : 0);
        for (int rows = 1; rows <= 8; ++rows) {
          if (n >= 1030 && rows != 1 && rows != 3 && rows != 8) continue;
          const bool accumulate = rows % 2 == 1;
          INFO(std::string(ggml_type_name(type)), " n ", n, " k ", k, " rows ", rows,
               std::string(accumulate ? " accumulate" : " store"));
          const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, gen);
          const std::vector<float> xf = as_floats(x);
          const std::vector<double> xq = q8_rounded(xf, rows, k);
          DeviceBuffer d_x = upload(x);
          const int ldy = n + 3;
          std::vector<float> y0(size_t(rows) * ldy, std::nanf(""));
          for (int t = 0; t < rows; ++t)
            for (int r = 0; r < n; ++r)
              y0[size_t(t) * ldy + r] = accumulate ? 0.25f * float(r - 3 * t) : std::nanf("");
          // Both CTA widths (their staging and rounds of quantization differ) on the same data:
          // their products are the same bits (a unit's lanes, parts and reduction do not depend on it).
          std::vector<float> by_width[2];
          for (int i = 0; i < 2; ++i) {
            cuda::set_quant_gemv_q8_warps(i == 0 ? 16 : 4);
            DeviceBuffer d_y = upload(y0);
            cuda::SkinnyGemmOp op;
            op.output = accumulate ? cuda::SkinnyOutput::kAccumulate : cuda::SkinnyOutput::kStore;
            op.matrix = &w.m;
            op.rows = rows;
            op.n_out = n;
            op.k = k;
            op.x = static_cast<const uint16_t*>(d_x.data());
            op.ldx = k;
            op.y = static_cast<float*>(d_y.data());
            op.ldy = ldy;
            const Status s = cuda::skinny_gemm(op, nullptr);
            REQUIRE_MESSAGE(s.ok(), s.to_string());
            by_width[i] = download<float>(d_y, y0.size());
          }
          CHECK(std::memcmp(by_width[0].data(), by_width[1].data(), by_width[0].size() * sizeof(float)) == 0);
          const std::vector<float>& y = by_width[0];
          int bad_emulated = 0, bad_exact = 0, nan_kept = 0;
          double err2 = 0, val2 = 0;
          for (int t = 0; t < rows; ++t) {
            for (int r = 0; r < n; ++r) {
              double emulated = 0, emulated_mag = 0, exact = 0;
              for (int i = 0; i < k; ++i) {
                const size_t wi = size_t(r) * k + i, xi = size_t(t) * k + i;
                emulated += double(w.w[wi]) * xq[xi];
                emulated_mag += double(w.mag[wi]) * std::fabs(xq[xi]);
                exact += double(w.w[wi]) * xf[xi];
              }
              const double base = accumulate ? double(y0[size_t(t) * ldy + r]) : 0.0;
              const double got = double(y[size_t(t) * ldy + r]) - base;
              // Accumulating onto y rounds base + product to float once: up to half an ulp of y, which
              // for the large bases of the far rows (0.25·r) outweighs a short product's own error.
              const double stored = std::ldexp(std::fabs(double(y[size_t(t) * ldy + r])), -24);
              bad_emulated += std::fabs(got - emulated) <= 3e-5 * emulated_mag + stored + 1e-6 ? 0 : 1;
              bad_exact +=
                  std::fabs(got - exact) <= rounding_bound(w, r, xf, t) + 3e-5 * emulated_mag + stored + 1e-6 ? 0 : 1;
              err2 += (got - exact) * (got - exact);
              val2 += exact * exact;
            }
            for (int r = n; r < ldy; ++r) nan_kept += std::isnan(y[size_t(t) * ldy + r]) ? 1 : 0;
          }
          CHECK(bad_emulated == 0);
          CHECK(bad_exact == 0);
          if (n * rows >= 37) CHECK(std::sqrt(err2) <= 0.02 * std::sqrt(val2));
          CHECK(nan_kept == rows * 3);
        }
      }
    }
  }
}

TEST_CASE("quant gemv q8 gpu: Q6_K's one-row kernel (parts through shared memory) gives the two-row kernel's bits") {
  // The one-row kernel copies each item's Q6_K row segments into shared
  // memory (cp.async, 16-byte aligned around 2-byte aligned super-blocks)
  // and reads the lanes' parts there; the wider kernels load them from
  // global memory. A row's sum does not depend on the step's row count, so
  // row 0 of a two-row step (row 1 another input) must be the one-row
  // step's bits. Rows of 210 bytes (k 256: every other row starts 2 bytes
  // past 4-byte alignment), a matrix 4 bytes past 16-byte alignment, units
  // of 16 and 32 lanes, several warp steps, a last unit of one row, more
  // units than warps; CTAs of 16 and 4 warps.
  if (skip_without_gpu()) return;
  Paths paths;
  paths.use_q8(true);
  std::mt19937_64 rng(6606);
  struct Shape {
    int n, k, offset;
  };
  const Shape shapes[] = {{37, 256, 4}, {1030, 1024, 0}, {151, 2048, 4}, {64, 3072, 0}, {9, 8448, 4}, {4099, 1024, 0}};
  for (const Shape& sh : shapes) {
    QuantMatrix w(GgmlType::kQ6_K, sh.n, sh.k, rng, sh.offset);
    const std::vector<uint16_t> x = random_bf16(size_t(2) * sh.k, rng);
    DeviceBuffer d_x = upload(x);
    for (int warps : {16, 4}) {
      INFO("n ", sh.n, " k ", sh.k, " offset ", sh.offset, " warps ", warps);
      cuda::set_quant_gemv_q8_warps(warps);
      std::vector<float> got[2];
      for (int rows = 1; rows <= 2; ++rows) {
        DeviceBuffer d_y = poisoned(size_t(rows) * sh.n * 4);
        cuda::SkinnyGemmOp op;
        op.matrix = &w.m;
        op.rows = rows;
        op.n_out = sh.n;
        op.k = sh.k;
        op.x = static_cast<const uint16_t*>(d_x.data());
        op.ldx = sh.k;
        op.y = static_cast<float*>(d_y.data());
        op.ldy = sh.n;
        const Status s = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        got[rows - 1] = download<float>(d_y, size_t(sh.n));  // row 0
      }
      int nan = 0;
      for (float v : got[0]) nan += std::isnan(v) ? 1 : 0;
      CHECK(nan == 0);
      CHECK(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("quant gemv q8 gpu: RMSNorm, post-norm and split-KV inputs equal the tiles within the input rounding") {
  if (skip_without_gpu()) return;
  Paths paths;
  std::mt19937_64 rng(4208);
  for (int warps : {16, 4}) {  // each CTA width's staging
    cuda::set_quant_gemv_q8_warps(warps);
    for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
      for (int rows : {1, 3, 8}) {
        INFO(warps, " warps ", std::string(ggml_type_name(type)), " rows ", rows);
        const int k = 1024, n = 130;  // 8 heads of 128
        const std::vector<float> xf = random_f32(size_t(rows) * k, rng, 3.0f);
        const std::vector<float> ry = random_f32(size_t(rows) * k, rng, 2.0f);
        const std::vector<float> norm_weight = random_f32(size_t(k), rng, 0.5f);
        const std::vector<float> res_weight = random_f32(size_t(k), rng, 0.5f);
        DeviceBuffer d_xf = upload(xf), d_ry = upload(ry), d_norm = upload(norm_weight), d_res_w = upload(res_weight);
        QuantMatrix w(type, n, k, rng);
        // The staged input on the host (double, rounded to bf16), for the bounds' magnitudes.
        auto rms_rows = [&](const std::vector<float>& in, const std::vector<float>& weight) {
          std::vector<float> out(in.size());
          for (int t = 0; t < rows; ++t) {
            double ss = 0;
            for (int i = 0; i < k; ++i) ss += double(in[size_t(t) * k + i]) * in[size_t(t) * k + i];
            const double sc = 1.0 / std::sqrt(ss / k + 1e-5);
            for (int i = 0; i < k; ++i) out[size_t(t) * k + i] = float(in[size_t(t) * k + i] * sc * weight[size_t(i)]);
          }
          return out;
        };
        // y [rows, n] of both paths (tiles, int8 GEMV) for op's input.
        auto both = [&](cuda::SkinnyGemmOp op, std::vector<float> (&y)[2], std::vector<float>* res_out) {
          for (int path = 0; path < 2; ++path) {
            DeviceBuffer d_y = poisoned(size_t(rows) * n * 4);
            DeviceBuffer d_res = poisoned(size_t(rows) * k * 4);
            op.y = static_cast<float*>(d_y.data());
            if (op.input == cuda::SkinnyInput::kAddRmsNorm) op.res_out = static_cast<float*>(d_res.data());
            paths.use_q8(path == 1);
            const Status s = cuda::skinny_gemm(op, nullptr);
            REQUIRE_MESSAGE(s.ok(), s.to_string());
            y[path] = download<float>(d_y, size_t(rows) * n);
            if (res_out != nullptr) res_out[path] = download<float>(d_res, size_t(rows) * k);
          }
        };
        auto compare = [&](const std::vector<float> (&y)[2], const std::vector<float>& staged) {
          int apart = 0;
          double err2 = 0, val2 = 0;
          for (int t = 0; t < rows; ++t)
            for (int r = 0; r < n; ++r) {
              double sum_abs = 0;
              for (int i = 0; i < k; ++i)
                sum_abs += std::fabs(double(w.w[size_t(r) * k + i]) * staged[size_t(t) * k + i]);
              const double bound = 1.01 * rounding_bound(w, r, staged, t) + 4e-3 * sum_abs + 1e-6;
              const double d = double(y[1][size_t(t) * n + r]) - y[0][size_t(t) * n + r];
              apart += std::fabs(d) <= bound ? 0 : 1;
              err2 += d * d;
              val2 += double(y[0][size_t(t) * n + r]) * y[0][size_t(t) * n + r];
            }
          CHECK(apart == 0);
          CHECK(std::sqrt(err2) <= 0.02 * std::sqrt(val2));
        };
        cuda::SkinnyGemmOp op;
        op.output = cuda::SkinnyOutput::kStore;
        op.matrix = &w.m;
        op.rows = rows;
        op.n_out = n;
        op.k = k;
        op.xf = static_cast<const float*>(d_xf.data());
        op.ldxf = k;
        op.norm_weight = static_cast<const float*>(d_norm.data());
        op.eps = 1e-5f;
        op.ldy = n;
        {
          INFO("kRmsNorm");
          op.input = cuda::SkinnyInput::kRmsNorm;
          std::vector<float> y[2];
          both(op, y, nullptr);
          compare(y, rms_rows(xf, norm_weight));
        }
        {
          INFO("kAddRmsNorm: the residual stored, then normalized");
          op.input = cuda::SkinnyInput::kAddRmsNorm;
          op.res_y = static_cast<const float*>(d_ry.data());
          op.ld_res_y = k;
          op.res_weight = static_cast<const float*>(d_res_w.data());
          op.ld_res_out = k;
          std::vector<float> y[2], res[2];
          both(op, y, res);
          CHECK(res[1] == res[0]);  // the same staging code: the same residual, bit for bit
          compare(y, rms_rows(res[0], norm_weight));
        }
        {
          INFO("kSplitKv: 8 heads of 128, 5 splits, one saw no key");
          const int heads = 8, dim = 128, splits = 5;
          const int64_t partial_rows = int64_t(rows) * heads + 3;
          std::vector<float> o_part = random_f32(size_t(splits) * partial_rows * dim, rng);
          std::vector<float> lse = random_f32(size_t(splits) * partial_rows, rng, 4.0f);
          for (int64_t r = 0; r < partial_rows; ++r) lse[size_t(2 * partial_rows + r)] = -INFINITY;
          std::vector<float> merged(size_t(rows) * k);
          for (int t = 0; t < rows; ++t)
            for (int h = 0; h < heads; ++h) {
              const int64_t row = int64_t(t) * heads + h;
              double m = -INFINITY;
              for (int sp = 0; sp < splits; ++sp) m = std::max(m, double(lse[size_t(sp * partial_rows + row)]));
              for (int d = 0; d < dim; ++d) {
                double sum = 0, acc = 0;
                for (int sp = 0; sp < splits; ++sp) {
                  const double e = std::exp(double(lse[size_t(sp * partial_rows + row)]) - m);
                  sum += e;
                  acc += e * o_part[size_t((sp * partial_rows + row) * dim + d)];
                }
                merged[size_t(t) * k + size_t(h) * dim + d] = float(acc / sum);
              }
            }
          DeviceBuffer d_o = upload(o_part), d_lse = upload(lse);
          op.input = cuda::SkinnyInput::kSplitKv;
          op.split_kv.o_partial = static_cast<const float*>(d_o.data());
          op.split_kv.lse_partial = static_cast<const float*>(d_lse.data());
          op.split_kv.num_splits = splits;
          op.split_kv.q_heads = heads;
          op.split_kv.head_dim = dim;
          op.split_kv.q_len = 1;
          op.split_kv.partial_rows = partial_rows;
          std::vector<float> y[2];
          both(op, y, nullptr);
          compare(y, merged);
        }
      }
    }
  }
}

TEST_CASE("quant gemv q8 gpu: RoPE + K/V, SwiGLU, GeGLU, accumulate and row ranges are its own products' epilogues") {
  if (skip_without_gpu()) return;
  Paths paths;
  paths.use_q8(true);
  std::mt19937_64 rng(6208);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                        GgmlType::kQ6_K}) {
    for (int rows : {1, 2, 5, 8}) {
      // k 4096 at even rows: two warp steps a row, which two warps share where the units are few (q8_unit_warps)
      const int k = rows % 2 == 0 ? 4096 : 1024;
      INFO(ggml_type_name(type), " rows ", rows, " k ", k);
      const std::vector<float> xf = random_f32(size_t(rows) * k, rng, 3.0f);
      const std::vector<float> norm_weight = random_f32(size_t(k), rng, 0.5f);
      DeviceBuffer d_xf = upload(xf), d_norm = upload(norm_weight);
      auto base_op = [&](cuda::SkinnyOutput output, const cuda::DeviceMatrix& m, int n_out) {
        cuda::SkinnyGemmOp op;
        op.input = cuda::SkinnyInput::kRmsNorm;
        op.output = output;
        op.matrix = &m;
        op.rows = rows;
        op.n_out = n_out;
        op.k = k;
        op.xf = static_cast<const float*>(d_xf.data());
        op.ldxf = k;
        op.norm_weight = static_cast<const float*>(d_norm.data());
        op.eps = 1e-5f;
        return op;
      };
      // The kernel's stored products y [rows, n] of matrix m.
      auto stored = [&](const cuda::DeviceMatrix& m) {
        DeviceBuffer d_y = poisoned(size_t(rows) * m.rows * 4);
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyOutput::kStore, m, m.rows);
        op.y = static_cast<float*>(d_y.data());
        op.ldy = m.rows;
        const Status s = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        return download<float>(d_y, size_t(rows) * m.rows);
      };
      {
        INFO("kAccumulate and rows [4, 11) of 16 outputs (odd: the last unit has one row)");
        QuantMatrix w(type, 7, k, rng);
        const std::vector<float> y = stored(w.m);
        std::vector<float> y0(size_t(rows) * 16, std::nanf(""));
        for (int t = 0; t < rows; ++t)
          for (int c = 4; c < 11; ++c) y0[size_t(t) * 16 + c] = 0.5f * float(c - t);
        DeviceBuffer d_y = upload(y0);
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyOutput::kAccumulate, w.m, 16);
        op.row_begin = 4;
        op.y = static_cast<float*>(d_y.data());
        op.ldy = 16;
        const Status s = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        const std::vector<float> got = download<float>(d_y, y0.size());
        int bad = 0;
        for (int t = 0; t < rows; ++t)
          for (int c = 0; c < 16; ++c) {
            const float a = got[size_t(t) * 16 + c];
            if (c < 4 || c >= 11) {
              bad += std::isnan(a) ? 0 : 1;
              continue;
            }
            bad += a == y0[size_t(t) * 16 + c] + y[size_t(t) * 7 + (c - 4)] ? 0 : 1;
          }
        CHECK(bad == 0);
      }
      {
        INFO("kRopeAppend: 8 q heads and 2 K/V heads of 128, pages of 16");
        const int q_heads = 8, kv_heads = 2, dim = 128, page_size = 16, pages = 3;
        const int n_out = (q_heads + 2 * kv_heads) * dim;
        QuantMatrix w(type, n_out, k, rng);
        const std::vector<float> y = stored(w.m);
        std::vector<int64_t> slots(static_cast<size_t>(rows));
        for (int t = 0; t < rows; ++t) slots[size_t(t)] = (37 + 5 * t) % (pages * page_size);
        std::vector<float> cos_t(size_t(rows) * dim / 2), sin_t(cos_t.size());
        std::uniform_real_distribution<float> angle(-3.0f, 3.0f);
        for (size_t i = 0; i < cos_t.size(); ++i) {
          const float a = angle(rng);
          cos_t[i] = std::cos(a);
          sin_t[i] = std::sin(a);
        }
        DeviceBuffer d_slots = upload(slots), d_cos = upload(cos_t), d_sin = upload(sin_t);
        const size_t q_elems = size_t(rows) * q_heads * dim, page_elems = size_t(pages) * kv_heads * page_size * dim;
        DeviceBuffer q = poisoned(q_elems * 2), kp = poisoned(page_elems * 2), vp = poisoned(page_elems * 2);
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyOutput::kRopeAppend, w.m, n_out);
        op.rope.rope_cos = static_cast<const float*>(d_cos.data());
        op.rope.rope_sin = static_cast<const float*>(d_sin.data());
        op.rope.slots = static_cast<const int64_t*>(d_slots.data());
        op.rope.q_out = static_cast<uint16_t*>(q.data());
        op.rope.k_pages = kp.data();
        op.rope.v_pages = vp.data();
        op.rope.q_stride = int64_t(q_heads) * dim;
        op.rope.n = rows;
        op.rope.q_heads = q_heads;
        op.rope.kv_heads = kv_heads;
        op.rope.head_dim = dim;
        op.rope.rope_dim = dim;
        op.rope.page_size = page_size;
        op.rope.num_pages = pages;
        const Status s = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        // The host's rope_append of y (adjacent pairs).
        std::vector<float> want_q(q_elems, std::nanf("")), want_k(page_elems, std::nanf("")),
            want_v(page_elems, std::nanf(""));
        for (int t = 0; t < rows; ++t)
          for (int h = 0; h < q_heads + 2 * kv_heads; ++h)
            for (int i = 0; i < dim / 2; ++i) {
              float a = y[size_t(t) * n_out + h * dim + 2 * i], b = y[size_t(t) * n_out + h * dim + 2 * i + 1];
              if (h < q_heads + kv_heads) {
                const float c = cos_t[size_t(t) * dim / 2 + i], sn = sin_t[size_t(t) * dim / 2 + i];
                const float x0 = a, x1 = b;
                a = x0 * c - x1 * sn;
                b = x0 * sn + x1 * c;
              }
              if (h < q_heads) {
                want_q[(size_t(t) * q_heads + h) * dim + 2 * i] = a;
                want_q[(size_t(t) * q_heads + h) * dim + 2 * i + 1] = b;
                continue;
              }
              const bool is_v = h >= q_heads + kv_heads;
              const int kvh = is_v ? h - q_heads - kv_heads : h - q_heads;
              const int64_t slot = slots[size_t(t)];
              const size_t at =
                  ((size_t(slot / page_size) * kv_heads + kvh) * page_size + slot % page_size) * dim + 2 * i;
              std::vector<float>& dst = is_v ? want_v : want_k;
              dst[at] = a;
              dst[at + 1] = b;
            }
        CHECK(bf16_mismatches(download<uint16_t>(q, q_elems), want_q) == 0);
        CHECK(bf16_mismatches(download<uint16_t>(kp, page_elems), want_k) == 0);
        CHECK(bf16_mismatches(download<uint16_t>(vp, page_elems), want_v) == 0);
      }
      for (cuda::SkinnyOutput gated : {cuda::SkinnyOutput::kSwiglu, cuda::SkinnyOutput::kGegluTanh}) {
        const bool silu = gated == cuda::SkinnyOutput::kSwiglu;
        INFO((silu ? "kSwiglu" : "kGegluTanh"), ", 37 units");
        const int ffn = 37;
        QuantMatrix gate(type, ffn, k, rng), up(type, ffn, k, rng);
        const std::vector<float> g = stored(gate.m), u = stored(up.m);
        DeviceBuffer act = poisoned(size_t(rows) * (ffn + 1) * 2);
        cuda::SkinnyGemmOp op = base_op(gated, gate.m, ffn);
        op.matrix_up = &up.m;
        op.act = static_cast<uint16_t*>(act.data());
        op.ld_act = ffn + 1;
        const Status s = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        std::vector<float> want(size_t(rows) * (ffn + 1), std::nanf(""));
        for (int t = 0; t < rows; ++t)
          for (int i = 0; i < ffn; ++i) {
            const float gv = g[size_t(t) * ffn + i], uv = u[size_t(t) * ffn + i];
            const float inner = 0.7978845608028654f * (gv + 0.044715f * gv * gv * gv);
            const float f = silu ? gv / (1.0f + std::exp(-gv)) : 0.5f * gv * (1.0f + std::tanh(inner));
            want[size_t(t) * (ffn + 1) + i] = f * uv;
          }
        CHECK(bf16_mismatches(download<uint16_t>(act, want.size()), want) == 0);
      }
    }
  }
}

#if FLASHSCOPE_WITH_CUDA
TEST_CASE("quant gemv q8: the switches clamp what they are set to (rows 0..8, a CTA of 4 or 16 warps)") {
  Paths paths;
  struct Case {
    void (*set)(int);
    int (*get)();
    int value, expect;
  };
  const Case cases[] = {
      {cuda::set_quant_gemv_q8_max_rows, cuda::quant_gemv_q8_max_rows, 12, 8},
      {cuda::set_quant_gemv_q8_max_rows, cuda::quant_gemv_q8_max_rows, 3, 3},
      {cuda::set_quant_gemv_q8_max_rows, cuda::quant_gemv_q8_max_rows, -1, 0},
      {cuda::set_quant_gemv_q8_warps, cuda::quant_gemv_q8_warps, 4, 4},
      {cuda::set_quant_gemv_q8_warps, cuda::quant_gemv_q8_warps, 8, 16},
      {cuda::set_quant_gemv_q8_warps, cuda::quant_gemv_q8_warps, 16, 16},
  };
  for (const Case& c : cases) {
    CAPTURE(c.value);
    c.set(c.value);
    CHECK(c.get() == c.expect);
  }
}
#endif
