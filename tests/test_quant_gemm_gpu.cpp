// Weights kept in their GGUF blocks on the GPU, against the CPU
// dequantizer (dequantize_row, llama.cpp's arithmetic), for every block type
// the GPU reads in place (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K):
//   skinny_gemm with a quantized matrix (1..8 rows; kStore, kAccumulate, a
//     row range of a wider output, kSwiglu, kGegluTanh) = Σ bf16(dequant(w))·x
//     in double (the weights matmul hands cuBLAS, so both paths agree)
//   dequantize_bf16 = bf16(dequant(w)) exactly; embedding_rows = dequant(w) (· scale) exactly
//   matmul (slices dequantized into a scratch, then cuBLAS; 1..64 rows) =
//     Σ bf16(dequant(w))·x in double
// over odd shapes: n_out odd, k of 3 groups (fewer than a warp's lanes) and of
// 136 groups (lanes take several), rows that are no power of two. Outputs
// start poisoned (NaN): columns outside the computed range must stay NaN.
//
// Bounds. The kernels sum fp32 products of bf16 weights and bf16 inputs
// (each exact), in another order than the double reference: 2e-4 of Σ|w·x|
// covers fp32 rounding over k <= 4352 (about k·2^-24 relative per sum, far
// less in practice); a wrong group, scale, nibble or row is an error of the
// order of the values themselves. matmul's reference uses the same
// bf16-rounded weights as the scratch, so the same bound holds for cuBLAS's
// fp32 accumulation.
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
#include "kernels/quant/quant_blocks.h"
#include "support/gpu.hpp"
#include "support/quant_blocks.hpp"
#include "support/random.hpp"

using namespace flashscope;
using flashscope::testing::download;
using flashscope::testing::poisoned;
using flashscope::testing::random_bf16;
using flashscope::testing::random_quant_blocks;
using flashscope::testing::skip_without_gpu;

namespace {
// The tensor-core tiles take every step for a scope (neither GEMV, whatever
// the environment or the default chose); the previous choice back after.
class TilesOnly {
 public:
  TilesOnly() : gemv_(cuda::quant_gemv_max_rows()), q8_(cuda::quant_gemv_q8_max_rows()) {
    cuda::set_quant_gemv_max_rows(0);
    cuda::set_quant_gemv_q8_max_rows(0);
  }
  ~TilesOnly() {
    cuda::set_quant_gemv_max_rows(gemv_);
    cuda::set_quant_gemv_q8_max_rows(q8_);
  }

 private:
  int gemv_, q8_;
};
}  // namespace
using flashscope::testing::upload;
namespace qb = flashscope::kernels::quant;

namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// A quantized matrix [n, k] on the device and its CPU dequantization.
struct QuantMatrix {
  GgmlType type;
  int n, k;
  std::vector<uint8_t> bytes;
  std::vector<float> wf;  // [n, k]
  DeviceBuffer d;
  cuda::DeviceMatrix m;

  QuantMatrix(GgmlType type_, int n_, int k_, std::mt19937_64& rng) : type(type_), n(n_), k(k_) {
    const int block = static_cast<int>(ggml_block_size(type));
    REQUIRE(k % block == 0);
    bytes = random_quant_blocks(static_cast<int>(type), n, k / block, rng);
    const int64_t row_bytes = int64_t(k / block) * ggml_type_size(type);
    wf.resize(size_t(n) * k);
    for (int r = 0; r < n; ++r) REQUIRE(dequantize_row(type, bytes.data() + r * row_bytes, &wf[size_t(r) * k], k).ok());
    d = upload(bytes);
    m.type = type;
    m.data = d.data();
    m.rows = n;
    m.cols = k;
    m.row_bytes = row_bytes;
  }
};

// Σ_i w[r][i]·x[t][i] in double and the bound's scale Σ|w·x|.
struct Ref {
  double value, scale;
};
Ref dot(const std::vector<float>& w, int r, const std::vector<uint16_t>& x, int t, int k, bool round_w = false) {
  Ref out{0.0, 0.0};
  for (int i = 0; i < k; ++i) {
    float wi = w[size_t(r) * k + i];
    if (round_w) wi = bf16_to_float(float_to_bf16(wi));
    const double p = double(wi) * bf16_to_float(x[size_t(t) * k + i]);
    out.value += p;
    out.scale += std::fabs(p);
  }
  return out;
}

bool close(float got, const Ref& want) { return std::fabs(double(got) - want.value) <= 2e-4 * want.scale + 1e-30; }

}  // namespace

TEST_CASE("quant gemm gpu: few-token GEMM over each block type against the CPU dequantizer") {
  if (skip_without_gpu()) return;
  TilesOnly tiles;
  std::mt19937_64 rng(2121);
  struct Shape {
    int n, k;
  };
  for (GgmlType type : kTypes) {
    const int block = static_cast<int>(ggml_block_size(type));
    // k: 3 groups (32-element types only), 17 super-blocks (136 groups); n odd, one past a CTA's units.
    std::vector<Shape> shapes = {{7, 768}, {9, 4352}};
    if (block == 32) shapes.push_back({5, 96});
    for (const Shape& sh : shapes) {
      QuantMatrix w(type, sh.n, sh.k, rng);
      for (int rows : {1, 2, 3, 4, 5, 8}) {
        for (bool accumulate : {false, true}) {
          const std::string type_name = ggml_type_name(type);
          const std::string what = type_name + " n " + std::to_string(sh.n) + " k " + std::to_string(sh.k) + " rows " +
                                   std::to_string(rows) + (accumulate ? " accumulate" : " store");
          INFO(what);
          const std::vector<uint16_t> x = random_bf16(size_t(rows) * sh.k, rng);
          DeviceBuffer d_x = upload(x);
          const int ldy = sh.n + 3;
          std::vector<float> y0(size_t(rows) * ldy, std::nanf(""));
          for (int t = 0; t < rows; ++t)
            for (int r = 0; r < sh.n; ++r) y0[size_t(t) * ldy + r] = accumulate ? float(r - t) : std::nanf("");
          DeviceBuffer d_y = upload(y0);
          cuda::SkinnyGemmOp op;
          op.input = cuda::SkinnyInput::kBf16;
          op.output = accumulate ? cuda::SkinnyOutput::kAccumulate : cuda::SkinnyOutput::kStore;
          op.matrix = &w.m;
          op.rows = rows;
          op.n_out = sh.n;
          op.k = sh.k;
          op.x = static_cast<const uint16_t*>(d_x.data());
          op.ldx = sh.k;
          op.y = static_cast<float*>(d_y.data());
          op.ldy = ldy;
          const Status s = cuda::skinny_gemm(op, nullptr);
          REQUIRE_MESSAGE(s.ok(), s.to_string());
          const std::vector<float> y = download<float>(d_y, y0.size());
          int bad = 0, nan_kept = 0;
          for (int t = 0; t < rows; ++t) {
            for (int r = 0; r < sh.n; ++r) {
              Ref want = dot(w.wf, r, x, t, sh.k, /*round_w=*/true);
              if (accumulate) want.value += double(r - t);
              if (!close(y[size_t(t) * ldy + r], want)) ++bad;
            }
            for (int r = sh.n; r < ldy; ++r) nan_kept += std::isnan(y[size_t(t) * ldy + r]) ? 1 : 0;
          }
          CHECK(bad == 0);
          CHECK(nan_kept == rows * (ldy - sh.n));
        }
      }
    }
  }
}

// The tensor-core kernel's tiles (16 rows) and grid (the CTAs the device
// holds at once, each taking tiles in turn), its steps (4 groups or a super-block, the last one
// partial when the groups are not a multiple of 4) and its loads (16 bytes
// for a K-quant super-block on a 16-byte boundary, 4 otherwise).
TEST_CASE("quant gemm gpu: more tiles than CTAs, a partial last tile and step, K-quant rows off 16-byte alignment") {
  if (skip_without_gpu()) return;
  TilesOnly tiles;
  std::mt19937_64 rng(4096);
  // n: 1100 tiles (more than 132 SMs x 8 CTAs), the last with 5 of its 16 rows.
  const int n = 1099 * 16 + 5;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    const int block = static_cast<int>(ggml_block_size(type));
    const int k = block == 256 ? 512 : 11 * 32;  // 32-element types: 11 groups, 2 steps and 3 of 4 parts
    const int64_t row_bytes = int64_t(k / block) * ggml_type_size(type);
    for (int offset : {0, 4}) {  // bytes past a 256-byte boundary where the matrix starts
      const std::string what = std::string(ggml_type_name(type)) + " offset " + std::to_string(offset);
      INFO(what);
      const std::vector<uint8_t> blocks = random_quant_blocks(static_cast<int>(type), n, k / block, rng);
      std::vector<uint8_t> bytes(size_t(offset), 0);
      bytes.insert(bytes.end(), blocks.begin(), blocks.end());
      std::vector<float> wf(size_t(n) * k);
      for (int r = 0; r < n; ++r)
        REQUIRE(dequantize_row(type, blocks.data() + r * row_bytes, &wf[size_t(r) * k], k).ok());
      DeviceBuffer d_w = upload(bytes);
      cuda::DeviceMatrix m;
      m.type = type;
      m.data = static_cast<const uint8_t*>(d_w.data()) + offset;
      m.rows = n;
      m.cols = k;
      m.row_bytes = row_bytes;
      for (int rows : {1, 6}) {  // 1..8 rows over smaller shapes: the first case
        INFO("rows " << rows);
        const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, rng);
        DeviceBuffer d_x = upload(x);
        DeviceBuffer d_y = poisoned(size_t(rows) * n * 4);
        cuda::SkinnyGemmOp op;
        op.matrix = &m;
        op.rows = rows;
        op.n_out = n;
        op.k = k;
        op.x = static_cast<const uint16_t*>(d_x.data());
        op.ldx = k;
        op.y = static_cast<float*>(d_y.data());
        op.ldy = n;
        const Status s = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        const std::vector<float> y = download<float>(d_y, size_t(rows) * n);
        int bad = 0;
        for (int t = 0; t < rows; ++t)
          for (int r = 0; r < n; ++r) bad += close(y[size_t(t) * n + r], dot(wf, r, x, t, k, /*round_w=*/true)) ? 0 : 1;
        CHECK(bad == 0);
      }
    }
  }
}

// Llama-3.2-1B's ffn_down (k = 8192) at 8 rows: 128 KiB of input rows in
// shared memory, where the device lets a CTA have that much (H100, H200,
// A100), else refused as unsupported (the engine then takes cuBLAS).
TEST_CASE("quant gemm gpu: 8 rows of k 8192 run where the device has the shared memory") {
  if (skip_without_gpu()) return;
  TilesOnly tiles;
  std::mt19937_64 rng(8192);
  const int n = 40, k = 8192, rows = 8;
  QuantMatrix w(GgmlType::kQ4_K, n, k, rng);
  const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, rng);
  DeviceBuffer d_x = upload(x);
  DeviceBuffer d_y = poisoned(size_t(rows) * n * 4);
  cuda::SkinnyGemmOp op;
  op.matrix = &w.m;
  op.rows = rows;
  op.n_out = n;
  op.k = k;
  op.x = static_cast<const uint16_t*>(d_x.data());
  op.ldx = k;
  op.y = static_cast<float*>(d_y.data());
  op.ldy = n;
  const Status s = cuda::skinny_gemm(op, nullptr);
  auto info = query_device(0);
  REQUIRE(info.ok());
  // 128 KiB of rows beside the kernel's few KiB of its own
  const bool fits = info->smem_per_block_optin_kib >= 128 + 4;
  CHECK(cuda::skinny_quant_supported(rows, k) == fits);
  if (!fits) {
    CHECK(s.code() == StatusCode::kUnsupported);
    return;
  }
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  const std::vector<float> y = download<float>(d_y, size_t(rows) * n);
  int bad = 0;
  for (int t = 0; t < rows; ++t)
    for (int r = 0; r < n; ++r) bad += close(y[size_t(t) * n + r], dot(w.wf, r, x, t, k, /*round_w=*/true)) ? 0 : 1;
  CHECK(bad == 0);
}

TEST_CASE("quant gemm gpu: a matrix of some rows of a wider output, and SwiGLU / GeGLU over quantized gate and up") {
  if (skip_without_gpu()) return;
  TilesOnly tiles;
  std::mt19937_64 rng(77);
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_0, GgmlType::kQ8_0}) {
    const std::string type_name = ggml_type_name(type);
    INFO(type_name);
    const int k = 512, rows = 3;
    const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, rng);
    DeviceBuffer d_x = upload(x);
    {
      // Rows [4, 11) of a 16-wide output (as K's rows sit inside QKV's).
      QuantMatrix w(type, 7, k, rng);
      DeviceBuffer d_y = poisoned(size_t(rows) * 16 * 4);
      cuda::SkinnyGemmOp op;
      op.matrix = &w.m;
      op.row_begin = 4;
      op.rows = rows;
      op.n_out = 16;
      op.k = k;
      op.x = static_cast<const uint16_t*>(d_x.data());
      op.ldx = k;
      op.y = static_cast<float*>(d_y.data());
      op.ldy = 16;
      const Status s = cuda::skinny_gemm(op, nullptr);
      REQUIRE_MESSAGE(s.ok(), s.to_string());
      const std::vector<float> y = download<float>(d_y, size_t(rows) * 16);
      int bad = 0, nan_kept = 0;
      for (int t = 0; t < rows; ++t) {
        for (int c = 0; c < 16; ++c) {
          const float v = y[size_t(t) * 16 + c];
          if (c < 4 || c >= 11) {
            nan_kept += std::isnan(v) ? 1 : 0;
          } else if (!close(v, dot(w.wf, c - 4, x, t, k, /*round_w=*/true))) {
            ++bad;
          }
        }
      }
      CHECK(bad == 0);
      CHECK(nan_kept == rows * 9);
      op.row_begin = 3;  // odd: a RoPE pair would straddle two launches
      CHECK(cuda::skinny_gemm(op, nullptr).code() == StatusCode::kInvalidArgument);
      op.row_begin = 10;  // past n_out
      CHECK(cuda::skinny_gemm(op, nullptr).code() == StatusCode::kInvalidArgument);
    }
    for (cuda::SkinnyOutput gated : {cuda::SkinnyOutput::kSwiglu, cuda::SkinnyOutput::kGegluTanh}) {
      const bool gelu = gated == cuda::SkinnyOutput::kGegluTanh;
      INFO((gelu ? "kGegluTanh" : "kSwiglu"));
      const int ffn = 37;
      QuantMatrix gate(type, ffn, k, rng), up(type, ffn, k, rng);
      DeviceBuffer d_act = poisoned(size_t(rows) * (ffn + 1) * 2);
      cuda::SkinnyGemmOp op;
      op.output = gated;
      op.matrix = &gate.m;
      op.matrix_up = &up.m;
      op.rows = rows;
      op.n_out = ffn;
      op.k = k;
      op.x = static_cast<const uint16_t*>(d_x.data());
      op.ldx = k;
      op.act = static_cast<uint16_t*>(d_act.data());
      op.ld_act = ffn + 1;
      const Status s = cuda::skinny_gemm(op, nullptr);
      REQUIRE_MESSAGE(s.ok(), s.to_string());
      const std::vector<uint16_t> act = download<uint16_t>(d_act, size_t(rows) * (ffn + 1));
      int bad = 0;
      for (int t = 0; t < rows; ++t) {
        for (int u = 0; u < ffn; ++u) {
          const Ref g = dot(gate.wf, u, x, t, k, /*round_w=*/true), v = dot(up.wf, u, x, t, k, /*round_w=*/true);
          // transformers' gelu_pytorch_tanh for Gemma, silu otherwise
          const double f = gelu ? 0.5 * g.value *
                                      (1.0 + std::tanh(0.7978845608028654 * (g.value + 0.044715 * g.value * g.value *
                                                                                           g.value)))
                                : g.value / (1.0 + std::exp(-g.value));
          const double want = f * v.value;
          // the sums' bound carried through f·up (|f'| < 1.13 for both), plus act's bf16 rounding (2^-8 relative)
          const double tol = 2e-4 * (g.scale * std::fabs(v.value) + v.scale * std::fabs(g.value) + g.scale * v.scale) +
                             std::ldexp(std::fabs(want), -8) + 1e-30;
          if (!(std::fabs(double(bf16_to_float(act[size_t(t) * (ffn + 1) + u])) - want) <= tol)) ++bad;
        }
        CHECK(std::isnan(bf16_to_float(act[size_t(t) * (ffn + 1) + ffn])));
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("quant gemm gpu: dequantize_bf16 and embedding_rows give the CPU dequantizer's values") {
  if (skip_without_gpu()) return;
  std::mt19937_64 rng(5);
  for (GgmlType type : kTypes) {
    const std::string type_name = ggml_type_name(type);
    INFO(type_name);
    const int n = 11, k = 512;
    QuantMatrix w(type, n, k, rng);
    // Rows [3, 10) into a scratch with a wider row stride.
    const int ld = k + 8;
    DeviceBuffer d_out = poisoned(size_t(7) * ld * 2);
    Status s = cuda::dequantize_bf16(w.m, 3, 7, static_cast<uint16_t*>(d_out.data()), ld, nullptr);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    const std::vector<uint16_t> out = download<uint16_t>(d_out, size_t(7) * ld);
    int bad = 0;
    for (int r = 0; r < 7; ++r)
      for (int i = 0; i < k; ++i) bad += out[size_t(r) * ld + i] != float_to_bf16(w.wf[size_t(r + 3) * k + i]) ? 1 : 0;
    CHECK(bad == 0);
    CHECK(std::isnan(bf16_to_float(out[size_t(k)])));  // the stride's padding untouched

    const std::vector<int32_t> ids = {10, 0, 4, -1, n, 4};
    DeviceBuffer d_ids = upload(ids);
    DeviceBuffer d_x = poisoned(ids.size() * k * 4);
    s = cuda::embedding_rows(w.m, static_cast<const int32_t*>(d_ids.data()), int(ids.size()),
                             static_cast<float*>(d_x.data()), nullptr);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    const std::vector<float> x = download<float>(d_x, ids.size() * k);
    bad = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const bool valid = ids[t] >= 0 && ids[t] < n;
      for (int i = 0; i < k; ++i) {
        const float want = valid ? w.wf[size_t(ids[t]) * k + i] : 0.0f;
        bad += x[t * k + i] != want ? 1 : 0;
      }
    }
    CHECK(bad == 0);

    // Gemma's embedding scale: each value times scale, as the bf16 embedding does.
    const float scale = 25.298221f;  // √640
    s = cuda::embedding_rows(w.m, static_cast<const int32_t*>(d_ids.data()), int(ids.size()),
                             static_cast<float*>(d_x.data()), nullptr, scale);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    const std::vector<float> xs = download<float>(d_x, ids.size() * k);
    bad = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const bool valid = ids[t] >= 0 && ids[t] < n;
      for (int i = 0; i < k; ++i) bad += xs[t * k + i] != (valid ? w.wf[size_t(ids[t]) * k + i] * scale : 0.0f) ? 1 : 0;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("quant gemm gpu: matmul dequantizes slices into its scratch for cuBLAS, 1..64 rows") {
  if (skip_without_gpu()) return;
  auto handle = cuda::CublasHandle::create();
  REQUIRE_MESSAGE(handle.ok(), handle.status().to_string());
  REQUIRE(handle->bind(nullptr, nullptr, 0).ok());
  std::mt19937_64 rng(64);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    const int n = 45, k = 768;
    QuantMatrix w(type, n, k, rng);
    // A scratch of 16 rows: three slices of 16, 16 and 13 rows.
    DeviceBuffer scratch = poisoned(size_t(16) * k * 2);
    for (int rows : {1, 9, 64}) {
      for (bool accumulate : {false, true}) {
        const std::string type_name = ggml_type_name(type);
        const std::string what = type_name + " rows " + std::to_string(rows) + (accumulate ? " accumulate" : "");
        INFO(what);
        const std::vector<uint16_t> x = random_bf16(size_t(rows) * k, rng);
        DeviceBuffer d_x = upload(x);
        const int ldy = n + 1;
        std::vector<float> y0(size_t(rows) * ldy, std::nanf(""));
        for (int t = 0; t < rows; ++t)
          for (int r = 0; r < n; ++r) y0[size_t(t) * ldy + r] = accumulate ? 0.5f * float(r) : std::nanf("");
        DeviceBuffer d_y = upload(y0);
        cuda::MatmulOp op;
        op.w = &w.m;
        op.x = static_cast<const uint16_t*>(d_x.data());
        op.ldx = k;
        op.y = static_cast<float*>(d_y.data());
        op.ldy = ldy;
        op.rows = rows;
        op.accumulate = accumulate;
        op.scratch = static_cast<uint16_t*>(scratch.data());
        op.scratch_bytes = scratch.size();
        const Status s = cuda::matmul(handle->get(), op, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        const std::vector<float> y = download<float>(d_y, y0.size());
        int bad = 0, nan_kept = 0;
        for (int t = 0; t < rows; ++t) {
          for (int r = 0; r < n; ++r) {
            Ref want = dot(w.wf, r, x, t, k, /*round_w=*/true);
            if (accumulate) want.value += 0.5 * r;
            if (!close(y[size_t(t) * ldy + r], want)) ++bad;
          }
          nan_kept += std::isnan(y[size_t(t) * ldy + n]) ? 1 : 0;
        }
        CHECK(bad == 0);
        CHECK(nan_kept == rows);
      }
    }
    cuda::MatmulOp no_scratch;
    no_scratch.w = &w.m;
    no_scratch.rows = 1;
    CHECK(cuda::matmul(handle->get(), no_scratch, nullptr).code() == StatusCode::kInvalidArgument);
  }
}
