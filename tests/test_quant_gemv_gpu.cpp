// The 1-2 row product over weights kept in their GGUF blocks
// (kernels/model/quant_gemv.cuh, the default for decode steps of one or two
// rows) against the tensor-core tiles it replaces there
// (skinny_gemm_quant_kernel, still the path of 3-8 rows and the reference of
// test_quant_gemm_gpu.cpp), switched in one process with
// cuda::set_quant_gemv_max_rows:
//   every block type, k 576 (32-element types), 1024, 2048, 3072 and 8192,
//   n_out odd and below one tile (37) or many tiles (1030), 1 and 2 rows,
//   kStore and kAccumulate: both paths against Σ bf16(dequant(w))·x in double
//   (the CPU dequantizer) and against each other;
//   every input (kBf16, kRmsNorm, kSplitKv) and epilogue (kAccumulate,
//   kRopeAppend, kSwiglu, kGegluTanh, a row range of a wider output): the
//   GEMV against the tiles on the same inputs.
// Outputs start poisoned (NaN): what neither path should write stays NaN.
//
// Bounds. Both paths multiply the same bf16-rounded weights by the same bf16
// inputs and sum in fp32, in other orders: 2e-4 of Σ|w·x| covers that (see
// test_quant_gemm_gpu.cpp). With kRmsNorm and kSplitKv each kernel stages
// its rows itself, with the same code for the same row count (stage_input),
// so the same inputs: the same bound holds. Outputs rounded to bf16 (q,
// K/V, act) may round apart by one ulp: 2^-7 of the value, plus 1e-3 of the
// tensor's RMS for values near zero. A wrong row, group, scale, token or
// RoPE pair is an error of the order of the values themselves.
// Without a CUDA device every case says it was skipped and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/model_ops_cuda.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
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

// Sets which kernel takes 1-2 row steps for a scope, and puts the previous choice back.
// The int8 GEMV, which comes first, stays off meanwhile.
class GemvRows {
 public:
  GemvRows() : saved_(cuda::quant_gemv_max_rows()), q8_(cuda::quant_gemv_q8_max_rows()) {
    cuda::set_quant_gemv_q8_max_rows(0);
  }
  ~GemvRows() {
    cuda::set_quant_gemv_max_rows(saved_);
    cuda::set_quant_gemv_q8_max_rows(q8_);
  }
  void use_gemv(bool on) { cuda::set_quant_gemv_max_rows(on ? 2 : 0); }

 private:
  int saved_, q8_;
};

// A quantized matrix [n, k] on the device and its CPU dequantization rounded to bf16 (what both paths multiply by).
struct QuantMatrix {
  int n, k;
  std::vector<float> wf;
  DeviceBuffer d;
  cuda::DeviceMatrix m;

  QuantMatrix(GgmlType type, int n_, int k_, std::mt19937_64& rng) : n(n_), k(k_) {
    const int block = static_cast<int>(ggml_block_size(type));
    REQUIRE(k % block == 0);
    const std::vector<uint8_t> bytes = random_quant_blocks(static_cast<int>(type), n, k / block, rng);
    const int64_t row_bytes = int64_t(k / block) * ggml_type_size(type);
    wf.resize(size_t(n) * k);
    for (int r = 0; r < n; ++r)
      REQUIRE(dequantize_row(type, bytes.data() + r * row_bytes, &wf[size_t(r) * k], k).ok());
    for (float& v : wf) v = bf16_to_float(float_to_bf16(v));
    d = upload(bytes);
    m.type = type;
    m.data = d.data();
    m.rows = n;
    m.cols = k;
    m.row_bytes = row_bytes;
  }

  // Σ w[r]·x[t] in double and Σ|w·x| (x [rows, k] as floats).
  struct Dot {
    double value, sum_abs;
  };
  Dot dot(int r, const std::vector<float>& x, int t) const {
    Dot d{0, 0};
    for (int i = 0; i < k; ++i) {
      const double p = double(wf[size_t(r) * k + i]) * x[size_t(t) * k + i];
      d.value += p;
      d.sum_abs += std::fabs(p);
    }
    return d;
  }
};

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
int bf16_mismatches(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  const double floor = 1e-3 * rms_of(want);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float a = bf16_to_float(got[i]), b = bf16_to_float(want[i]);
    if (std::isnan(a) || std::isnan(b)) {
      bad += std::isnan(a) != std::isnan(b) ? 1 : 0;
      continue;
    }
    bad += std::fabs(double(a) - b) <= std::ldexp(std::fabs(double(b)), -7) + floor ? 0 : 1;
  }
  return bad;
}

}  // namespace

TEST_CASE("quant gemv gpu: 1 and 2 rows of every block type, k 576..8192, equal the tiles and the CPU dequantizer") {
  if (skip_without_gpu()) return;
  GemvRows gemv;
  std::mt19937_64 rng(2121);
  for (GgmlType type : kTypes) {
    const int block = static_cast<int>(ggml_block_size(type));
    for (int k : {576, 1024, 2048, 3072, 8192}) {
      if (k % block != 0) continue;
      for (int n : {37, 1030}) {
        QuantMatrix w(type, n, k, rng);
        for (int rows : {1, 2}) {
          for (bool accumulate : {false, true}) {
            const std::string what = std::string(ggml_type_name(type)) + " n " + std::to_string(n) + " k " +
                                     std::to_string(k) + " rows " + std::to_string(rows) +
                                     (accumulate ? " accumulate" : " store");
            INFO(what);
            const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, rng);
            const std::vector<float> xf = as_floats(x);
            DeviceBuffer d_x = upload(x);
            const int ldy = n + 3;
            std::vector<float> y0(size_t(rows) * ldy, std::nanf(""));
            for (int t = 0; t < rows; ++t)
              for (int r = 0; r < n; ++r) y0[size_t(t) * ldy + r] = accumulate ? 0.25f * float(r - 3 * t) : std::nanf("");
            std::vector<float> y[2];  // [0] tiles, [1] GEMV
            for (int path = 0; path < 2; ++path) {
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
              gemv.use_gemv(path == 1);
              const Status s = cuda::skinny_gemm(op, nullptr);
              REQUIRE_MESSAGE(s.ok(), s.to_string());
              y[path] = download<float>(d_y, y0.size());
            }
            int bad_ref[2] = {0, 0}, apart = 0, nan_kept = 0;
            for (int t = 0; t < rows; ++t) {
              for (int r = 0; r < n; ++r) {
                const QuantMatrix::Dot d = w.dot(r, xf, t);
                const double want = d.value + (accumulate ? double(y0[size_t(t) * ldy + r]) : 0.0);
                const double bound = 2e-4 * d.sum_abs + 1e-30;
                for (int path = 0; path < 2; ++path)
                  bad_ref[path] += std::fabs(double(y[path][size_t(t) * ldy + r]) - want) <= bound ? 0 : 1;
                apart += std::fabs(double(y[1][size_t(t) * ldy + r]) - y[0][size_t(t) * ldy + r]) <= bound ? 0 : 1;
              }
              for (int r = n; r < ldy; ++r) nan_kept += std::isnan(y[1][size_t(t) * ldy + r]) ? 1 : 0;
            }
            CHECK(bad_ref[0] == 0);
            CHECK(bad_ref[1] == 0);
            CHECK(apart == 0);
            CHECK(nan_kept == rows * (ldy - n));
          }
        }
      }
    }
  }
}

TEST_CASE("quant gemv gpu: RMSNorm and split-KV inputs, RoPE + K/V, SwiGLU, GeGLU and row ranges equal the tiles") {
  if (skip_without_gpu()) return;
  GemvRows gemv;
  std::mt19937_64 rng(4242);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                        GgmlType::kQ6_K}) {
    const std::string type_name = ggml_type_name(type);
    for (int rows : {1, 2}) {
      INFO(type_name, " rows ", rows);
      const int k = 1024;  // 8 heads of 128
      const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, rng);
      const std::vector<float> xf = random_f32(size_t(rows) * k, rng, 3.0f);
      const std::vector<float> norm_weight = random_f32(size_t(k), rng, 0.5f);
      DeviceBuffer d_x = upload(x), d_xf = upload(xf), d_norm = upload(norm_weight);
      auto base_op = [&](cuda::SkinnyInput input, cuda::SkinnyOutput output, int n_out) {
        cuda::SkinnyGemmOp op;
        op.input = input;
        op.output = output;
        op.rows = rows;
        op.n_out = n_out;
        op.k = k;
        op.x = static_cast<const uint16_t*>(d_x.data());
        op.ldx = k;
        op.xf = static_cast<const float*>(d_xf.data());
        op.ldxf = k;
        op.norm_weight = static_cast<const float*>(d_norm.data());
        op.eps = 1e-5f;
        return op;
      };
      // Runs op on the tiles then the GEMV, each into its own outputs (set_outputs(op, path)).
      auto both = [&](cuda::SkinnyGemmOp op, auto set_outputs) {
        for (int path = 0; path < 2; ++path) {
          set_outputs(op, path);
          gemv.use_gemv(path == 1);
          const Status s = cuda::skinny_gemm(op, nullptr);
          REQUIRE_MESSAGE(s.ok(), s.to_string());
        }
      };

      // The normalized rows on the host (double, rounded to bf16): the bound's magnitudes.
      std::vector<float> xn(size_t(rows) * k);
      for (int t = 0; t < rows; ++t) {
        double ss = 0;
        for (int i = 0; i < k; ++i) ss += double(xf[size_t(t) * k + i]) * xf[size_t(t) * k + i];
        const double sc = 1.0 / std::sqrt(ss / k + 1e-5);
        for (int i = 0; i < k; ++i)
          xn[size_t(t) * k + i] = bf16_to_float(float_to_bf16(float(xf[size_t(t) * k + i] * sc * norm_weight[size_t(i)])));
      }
      // fp32 outputs y [rows, ldy] of both paths against each other; columns [lo, hi) computed from matrix rows
      // [0, hi − lo) over inputs xs, the rest NaN in both.
      auto compare_y = [&](const std::vector<float>* y, int ldy, const QuantMatrix& w, int lo, int hi,
                           const std::vector<float>& xs) {
        int apart = 0, nan_kept = 0;
        for (int t = 0; t < rows; ++t)
          for (int c = 0; c < ldy; ++c) {
            const float a = y[1][size_t(t) * ldy + c], b = y[0][size_t(t) * ldy + c];
            if (c < lo || c >= hi) {
              nan_kept += std::isnan(a) && std::isnan(b) ? 1 : 0;
              continue;
            }
            const QuantMatrix::Dot d = w.dot(c - lo, xs, t);
            const double bound = 2e-4 * d.sum_abs + 1e-30;
            apart += std::fabs(double(a) - b) <= bound ? 0 : 1;
          }
        CHECK(apart == 0);
        CHECK(nan_kept == rows * (ldy - (hi - lo)));
      };

      {
        INFO("kRmsNorm input, kAccumulate, 130 outputs");
        QuantMatrix w(type, 130, k, rng);
        std::vector<float> y0(size_t(rows) * 130);
        for (size_t i = 0; i < y0.size(); ++i) y0[i] = 0.5f * float(i % 17) - 4.0f;
        DeviceBuffer d_y[2] = {upload(y0), upload(y0)};
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kAccumulate, 130);
        op.matrix = &w.m;
        op.ldy = 130;
        both(op, [&](cuda::SkinnyGemmOp& o, int path) { o.y = static_cast<float*>(d_y[path].data()); });
        const std::vector<float> y[2] = {download<float>(d_y[0], y0.size()), download<float>(d_y[1], y0.size())};
        compare_y(y, 130, w, 0, 130, xn);
      }
      {
        INFO("rows [4, 11) of 16 outputs (odd: the last unit has one row)");
        QuantMatrix w(type, 7, k, rng);
        DeviceBuffer d_y[2] = {poisoned(size_t(rows) * 16 * 4), poisoned(size_t(rows) * 16 * 4)};
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kStore, 16);
        op.matrix = &w.m;
        op.row_begin = 4;
        op.ldy = 16;
        both(op, [&](cuda::SkinnyGemmOp& o, int path) { o.y = static_cast<float*>(d_y[path].data()); });
        const std::vector<float> y[2] = {download<float>(d_y[0], size_t(rows) * 16),
                                         download<float>(d_y[1], size_t(rows) * 16)};
        compare_y(y, 16, w, 4, 11, as_floats(x));
      }
      {
        INFO("kSplitKv input (8 heads of 128, 5 splits, one saw no key), kStore");
        const int heads = 8, dim = 128, splits = 5, n = 96;
        const int64_t partial_rows = int64_t(rows) * heads + 3;
        std::vector<float> o_part = random_f32(size_t(splits) * partial_rows * dim, rng);
        std::vector<float> lse = random_f32(size_t(splits) * partial_rows, rng, 4.0f);
        for (int64_t r = 0; r < partial_rows; ++r) lse[size_t(2 * partial_rows + r)] = -INFINITY;
        // The merged rows on the host: the bound's magnitudes.
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
              merged[size_t(t) * k + size_t(h) * dim + d] = bf16_to_float(float_to_bf16(float(acc / sum)));
            }
          }
        QuantMatrix w(type, n, k, rng);
        DeviceBuffer d_o = upload(o_part), d_lse = upload(lse);
        DeviceBuffer d_y[2] = {poisoned(size_t(rows) * n * 4), poisoned(size_t(rows) * n * 4)};
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyInput::kSplitKv, cuda::SkinnyOutput::kStore, n);
        op.matrix = &w.m;
        op.ldy = n;
        op.split_kv.o_partial = static_cast<const float*>(d_o.data());
        op.split_kv.lse_partial = static_cast<const float*>(d_lse.data());
        op.split_kv.num_splits = splits;
        op.split_kv.q_heads = heads;
        op.split_kv.head_dim = dim;
        op.split_kv.q_len = 1;
        op.split_kv.partial_rows = partial_rows;
        both(op, [&](cuda::SkinnyGemmOp& o, int path) { o.y = static_cast<float*>(d_y[path].data()); });
        const std::vector<float> y[2] = {download<float>(d_y[0], size_t(rows) * n),
                                         download<float>(d_y[1], size_t(rows) * n)};
        compare_y(y, n, w, 0, n, merged);
      }
      {
        INFO("kRopeAppend: 8 q heads and 2 K/V heads of 128, pages of 16");
        const int q_heads = 8, kv_heads = 2, dim = 128, page_size = 16, pages = 3;
        const int n_out = (q_heads + 2 * kv_heads) * dim;
        QuantMatrix w(type, n_out, k, rng);
        const std::vector<int64_t> slots = rows == 1 ? std::vector<int64_t>{37} : std::vector<int64_t>{37, 5};
        std::vector<float> cos_t(size_t(rows) * dim / 2), sin_t(cos_t.size());
        std::uniform_real_distribution<float> angle(-3.0f, 3.0f);
        for (size_t i = 0; i < cos_t.size(); ++i) {
          const float a = angle(rng);
          cos_t[i] = std::cos(a);
          sin_t[i] = std::sin(a);
        }
        DeviceBuffer d_slots = upload(slots), d_cos = upload(cos_t), d_sin = upload(sin_t);
        const size_t q_elems = size_t(rows) * q_heads * dim, page_elems = size_t(pages) * kv_heads * page_size * dim;
        DeviceBuffer q[2] = {poisoned(q_elems * 2), poisoned(q_elems * 2)};
        DeviceBuffer kp[2] = {poisoned(page_elems * 2), poisoned(page_elems * 2)};
        DeviceBuffer vp[2] = {poisoned(page_elems * 2), poisoned(page_elems * 2)};
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeAppend, n_out);
        op.matrix = &w.m;
        op.rope.rope_cos = static_cast<const float*>(d_cos.data());
        op.rope.rope_sin = static_cast<const float*>(d_sin.data());
        op.rope.slots = static_cast<const int64_t*>(d_slots.data());
        op.rope.q_stride = int64_t(q_heads) * dim;
        op.rope.n = rows;
        op.rope.q_heads = q_heads;
        op.rope.kv_heads = kv_heads;
        op.rope.head_dim = dim;
        op.rope.rope_dim = dim;
        op.rope.page_size = page_size;
        op.rope.num_pages = pages;
        both(op, [&](cuda::SkinnyGemmOp& o, int path) {
          o.rope.q_out = static_cast<uint16_t*>(q[path].data());
          o.rope.k_pages = kp[path].data();
          o.rope.v_pages = vp[path].data();
        });
        CHECK(bf16_mismatches(download<uint16_t>(q[1], q_elems), download<uint16_t>(q[0], q_elems)) == 0);
        CHECK(bf16_mismatches(download<uint16_t>(kp[1], page_elems), download<uint16_t>(kp[0], page_elems)) == 0);
        CHECK(bf16_mismatches(download<uint16_t>(vp[1], page_elems), download<uint16_t>(vp[0], page_elems)) == 0);
        // The slots written hold values (not the poison) in both.
        const std::vector<uint16_t> k_pages = download<uint16_t>(kp[1], page_elems);
        CHECK(!std::isnan(bf16_to_float(k_pages[size_t(37 / page_size * kv_heads * page_size + 37 % page_size) * dim])));
      }
      for (cuda::SkinnyOutput gated : {cuda::SkinnyOutput::kSwiglu, cuda::SkinnyOutput::kGegluTanh}) {
        INFO((gated == cuda::SkinnyOutput::kSwiglu ? "kSwiglu" : "kGegluTanh"), ", 37 units");
        const int ffn = 37;
        QuantMatrix gate(type, ffn, k, rng), up(type, ffn, k, rng);
        DeviceBuffer act[2] = {poisoned(size_t(rows) * (ffn + 1) * 2), poisoned(size_t(rows) * (ffn + 1) * 2)};
        cuda::SkinnyGemmOp op = base_op(cuda::SkinnyInput::kBf16, gated, ffn);
        op.matrix = &gate.m;
        op.matrix_up = &up.m;
        op.ld_act = ffn + 1;
        both(op, [&](cuda::SkinnyGemmOp& o, int path) { o.act = static_cast<uint16_t*>(act[path].data()); });
        const std::vector<uint16_t> a1 = download<uint16_t>(act[1], size_t(rows) * (ffn + 1));
        CHECK(bf16_mismatches(a1, download<uint16_t>(act[0], size_t(rows) * (ffn + 1))) == 0);
        for (int t = 0; t < rows; ++t) CHECK(std::isnan(bf16_to_float(a1[size_t(t) * (ffn + 1) + ffn])));
      }
    }
  }
}

#if FLASHSCOPE_WITH_CUDA
TEST_CASE("quant gemv: the switch takes 0, 1 or 2 rows") {
  GemvRows gemv;
  cuda::set_quant_gemv_max_rows(5);  // the GEMV's A fragment carries two tokens
  CHECK(cuda::quant_gemv_max_rows() == 2);
  cuda::set_quant_gemv_max_rows(1);
  CHECK(cuda::quant_gemv_max_rows() == 1);
  cuda::set_quant_gemv_max_rows(-1);
  CHECK(cuda::quant_gemv_max_rows() == 0);
}
#endif
