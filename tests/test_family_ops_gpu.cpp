// The CUDA model ops the Qwen2, Qwen3, Llama 3 and Gemma 3 forward passes add
// to the Llama one, each against a CPU reference written out here:
//
//  * rope_append with NeoX pairs (rotate halves), Q/K/V bias, per-head
//    RMSNorm of q and k before the rotation, head_dim 256 and partial RoPE;
//    K/V written only at their slots;
//  * the GELU-tanh gated activation (Gemma's GeGLU) beside SwiGLU;
//  * add_rms_norm: Gemma's post-norm + residual, with and without the next
//    block's pre-norm fused behind it;
//  * the embedding scaled by √hidden.
// Outputs start poisoned (NaN); padding and unowned slots must stay NaN.
//
// Bounds. The reference computes in double what the kernel computes in
// fp32, then both are compared after the kernel's bf16 rounding: a bf16
// rounding is 2^-9 relative, and two fp32 paths that land on either side of
// a rounding boundary differ by one bf16 step (2^-8 relative), so bf16
// outputs are held to 2^-7 of the value plus 1e-5 of the inputs' scale (a
// rotated value near zero is a difference of two O(1) products). fp32
// outputs (the residual stream) are held to 1e-5 relative. Bugs (a pair off
// by one, the bias or norm skipped, halves taken for pairs) are errors of
// the size of the values.
// Without a CUDA device every case says it was skipped and passes.
// On the GPU machine: flashscope-tests -tc="cuda family ops*"
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
#include "flashscope/half.hpp"
#include "support/gpu.hpp"

using namespace flashscope;
using flashscope::testing::download;
using flashscope::testing::poisoned;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::upload;

namespace {

constexpr uint16_t kNaN16 = 0xFFFF;

// |got - want| within a bf16 step of want, plus `floor` for values near zero.
bool near_bf16(uint16_t got_bits, double want, double floor) {
  const float got = bf16_to_float(got_bits);
  if (std::isnan(got) || std::isnan(want)) return false;
  return std::fabs(double(got) - want) <= std::ldexp(std::fabs(want), -7) + floor;
}

// The reference of one head: bias added, optionally RMS-normalized, rotated
// by the angles of `pos` (base^(-2i/rope_dim) / factor[i]) in adjacent or
// NeoX pairs; all in double.
std::vector<double> reference_head(const float* x, const float* bias, const float* norm, float eps, bool rotate,
                                   bool neox, int D, int rope_dim, int pos, double base,
                                   const std::vector<double>& factors) {
  std::vector<double> v(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) v[size_t(d)] = double(x[d]) + (bias ? double(bias[d]) : 0.0);
  if (norm != nullptr) {
    double ss = 0;
    for (double e : v) ss += e * e;
    const double scale = 1.0 / std::sqrt(ss / D + eps);
    for (int d = 0; d < D; ++d) v[size_t(d)] *= scale * norm[d];
  }
  if (!rotate) return v;
  const int half = rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = pos * std::pow(base, -2.0 * i / rope_dim) / factors[size_t(i)];
    const int e0 = neox ? i : 2 * i, e1 = neox ? i + half : 2 * i + 1;
    const double a = v[size_t(e0)], b = v[size_t(e1)];
    v[size_t(e0)] = a * std::cos(theta) - b * std::sin(theta);
    v[size_t(e1)] = a * std::sin(theta) + b * std::cos(theta);
  }
  return v;
}

}  // namespace

TEST_CASE("cuda family ops: rope_append with NeoX pairs, Q/K/V bias, q/k RMSNorm and rope factors matches the CPU") {
  if (skip_without_gpu()) return;
  struct Case {
    const char* what;
    int q_heads, kv_heads, head_dim, rope_dim;
    bool neox, bias, qk_norm, factors;
  };
  const Case cases[] = {
      {"llama (adjacent pairs), for comparison", 4, 2, 64, 64, false, false, false, false},
      {"llama 3: adjacent pairs with rope_freqs factors", 8, 2, 64, 64, false, false, false, true},
      {"qwen2: NeoX + bias, GQA 7:1", 14, 2, 64, 64, true, true, false, false},
      {"qwen3: NeoX + q/k norm, head_dim 128", 16, 8, 128, 128, true, false, true, false},
      {"gemma3: NeoX + q/k norm, head_dim 256, one kv head", 4, 1, 256, 256, true, false, true, false},
      {"NeoX with partial rotary, bias and norms together", 6, 2, 128, 64, true, true, true, false},
  };
  std::mt19937_64 rng(18);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  for (const Case& c : cases) {
    INFO(c.what);
    const int n = 7, num_pages = 4, page_size = 16;
    const int H = c.q_heads, KV = c.kv_heads, D = c.head_dim, half = c.rope_dim / 2;
    const int64_t row = int64_t(H + 2 * KV) * D, qkv_stride = row + 6, q_stride = int64_t(H) * D + 8;
    const float eps = 1e-6f;
    const double base = c.neox ? 1e6 : 5e5;
    std::vector<float> qkv(static_cast<size_t>(n * qkv_stride)), bias(static_cast<size_t>(row));
    std::vector<float> q_norm(static_cast<size_t>(D)), k_norm(static_cast<size_t>(D));
    for (float& v : qkv) v = 2.0f * normal(rng);
    for (float& v : bias) v = normal(rng);
    for (float& v : q_norm) v = uni(rng);
    for (float& v : k_norm) v = uni(rng);
    std::vector<double> factors(static_cast<size_t>(std::max(half, 1)), 1.0);
    if (c.factors) {  // Llama 3's shape: 1 for high frequencies, up to 8 for the low ones
      for (int i = 0; i < half; ++i) factors[size_t(i)] = i < half / 2 ? 1.0 : 1.0 + 7.0 * (i - half / 2) / (half / 2);
    }
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 9000);
    // The tables the host computes: cos/sin in double, rounded to float.
    std::vector<float> cos_t(static_cast<size_t>(n * std::max(half, 1))), sin_t(cos_t.size());
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < half; ++i) {
        const double theta = positions[size_t(t)] * std::pow(base, -2.0 * i / c.rope_dim) / factors[size_t(i)];
        cos_t[size_t(t * half + i)] = static_cast<float>(std::cos(theta));
        sin_t[size_t(t * half + i)] = static_cast<float>(std::sin(theta));
      }
    }
    const int64_t pool_slots = int64_t(num_pages) * page_size;
    const std::vector<int64_t> slots = {3, pool_slots - 1, 21, -1, 32, pool_slots + 3, 0};
    const size_t pool = static_cast<size_t>(pool_slots) * KV * D;
    DeviceBuffer d_qkv = upload(qkv), d_cos = upload(cos_t), d_sin = upload(sin_t), d_slots = upload(slots);
    DeviceBuffer d_bias = upload(bias), d_qn = upload(q_norm), d_kn = upload(k_norm);
    DeviceBuffer d_q = poisoned(static_cast<size_t>(n * q_stride) * 2), d_k = poisoned(pool * 2), d_v = poisoned(pool * 2);
    cuda::RopeAppendOp op;
    op.qkv = static_cast<const float*>(d_qkv.data());
    op.qkv_stride = qkv_stride;
    op.rope_cos = static_cast<const float*>(d_cos.data());
    op.rope_sin = static_cast<const float*>(d_sin.data());
    op.slots = static_cast<const int64_t*>(d_slots.data());
    op.q_out = static_cast<uint16_t*>(d_q.data());
    op.q_stride = q_stride;
    op.k_pages = d_k.data();
    op.v_pages = d_v.data();
    op.n = n;
    op.q_heads = H;
    op.kv_heads = KV;
    op.head_dim = D;
    op.rope_dim = c.rope_dim;
    op.page_size = page_size;
    op.num_pages = num_pages;
    op.neox = c.neox;
    op.bias = c.bias ? static_cast<const float*>(d_bias.data()) : nullptr;
    op.q_norm = c.qk_norm ? static_cast<const float*>(d_qn.data()) : nullptr;
    op.k_norm = c.qk_norm ? static_cast<const float*>(d_kn.data()) : nullptr;
    op.norm_eps = eps;
    const Status st = cuda::rope_append(op, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    const auto q = download<uint16_t>(d_q, static_cast<size_t>(n * q_stride));
    const auto k = download<uint16_t>(d_k, pool);
    const auto v = download<uint16_t>(d_v, pool);

    // The floor: 1e-5 of the largest value a head can reach (normalized
    // heads are O(weight); raw ones O(|x| + |bias|)).
    const double floor = 1e-5 * (c.qk_norm ? 4.0 : 16.0);
    std::vector<bool> written(pool, false);
    int q_bad = 0, k_bad = 0, v_bad = 0, q_padding = 0;
    for (int t = 0; t < n; ++t) {
      const float* r = qkv.data() + t * qkv_stride;
      const int pos = positions[size_t(t)];
      for (int h = 0; h < H; ++h) {
        const auto want = reference_head(r + h * D, c.bias ? bias.data() + h * D : nullptr,
                                         c.qk_norm ? q_norm.data() : nullptr, eps, true, c.neox, D, c.rope_dim, pos,
                                         base, factors);
        for (int d = 0; d < D; ++d) q_bad += !near_bf16(q[size_t(t * q_stride + h * D + d)], want[size_t(d)], floor);
      }
      for (int64_t i = int64_t(H) * D; i < q_stride; ++i) q_padding += q[size_t(t * q_stride + i)] != kNaN16;
      const int64_t slot = slots[size_t(t)];
      if (slot < 0 || slot >= pool_slots) continue;
      const int64_t page = slot / page_size, off = slot % page_size;
      for (int h = 0; h < KV; ++h) {
        const int64_t k_at = int64_t(H + h) * D, v_at = int64_t(H + KV + h) * D;
        const auto want_k = reference_head(r + k_at, c.bias ? bias.data() + k_at : nullptr,
                                           c.qk_norm ? k_norm.data() : nullptr, eps, true, c.neox, D, c.rope_dim, pos,
                                           base, factors);
        const auto want_v = reference_head(r + v_at, c.bias ? bias.data() + v_at : nullptr, nullptr, eps, false,
                                           c.neox, D, c.rope_dim, pos, base, factors);
        for (int d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>(((page * KV + h) * page_size + off) * D + d);
          written[at] = true;
          k_bad += !near_bf16(k[at], want_k[size_t(d)], floor);
          v_bad += !near_bf16(v[at], want_v[size_t(d)], 1e-6);
        }
      }
    }
    int stray = 0;
    for (size_t i = 0; i < pool; ++i) stray += !written[i] && (k[i] != kNaN16 || v[i] != kNaN16);
    CHECK_MESSAGE(q_bad == 0, q_bad, " q values differ from the reference");
    CHECK_MESSAGE(k_bad == 0, k_bad, " K values differ from the reference");
    CHECK_MESSAGE(v_bad == 0, v_bad, " V values differ from bf16(v + bias)");
    CHECK_MESSAGE(q_padding == 0, "q written past H·D in ", q_padding, " places");
    CHECK_MESSAGE(stray == 0, stray, " page elements written outside the tokens' slots");
  }
}

TEST_CASE("cuda family ops: rope_append refuses head_dim above 256 and a negative norm eps") {
  if (skip_without_gpu()) return;
  DeviceBuffer d = poisoned(1 << 16);
  cuda::RopeAppendOp op;
  op.qkv = static_cast<const float*>(d.data());
  op.qkv_stride = 3 * 512;
  op.rope_cos = op.rope_sin = static_cast<const float*>(d.data());
  op.slots = static_cast<const int64_t*>(d.data());
  op.q_out = static_cast<uint16_t*>(d.data());
  op.q_stride = 512;
  op.k_pages = op.v_pages = d.data();
  op.n = 1;
  op.q_heads = op.kv_heads = 1;
  op.head_dim = op.rope_dim = 512;
  op.page_size = 16;
  const Status wide = cuda::rope_append(op, nullptr);
  CHECK(wide.code() == StatusCode::kInvalidArgument);
  CHECK(wide.message().find("256") != std::string::npos);
  op.head_dim = op.rope_dim = 256;
  op.qkv_stride = 3 * 256;
  op.q_stride = 256;
  op.q_norm = static_cast<const float*>(d.data());
  op.norm_eps = -1.0f;
  CHECK(cuda::rope_append(op, nullptr).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("cuda family ops: the GELU-tanh gate (GeGLU) matches the formula, SwiGLU unchanged") {
  if (skip_without_gpu()) return;
  const int rows = 5, ffn = 300;
  const int64_t gu_stride = 2 * ffn + 8, out_stride = ffn + 8;
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> gu(static_cast<size_t>(rows * gu_stride));
  for (float& v : gu) v = normal(rng);
  for (const bool gelu : {false, true}) {
    INFO("activation ", (gelu ? "gelu_tanh" : "silu"));
    DeviceBuffer d_gu = upload(gu), d_out = poisoned(static_cast<size_t>(rows * out_stride) * 2);
    cuda::SwigluOp op;
    op.gu = static_cast<const float*>(d_gu.data());
    op.gu_stride = gu_stride;
    op.out = static_cast<uint16_t*>(d_out.data());
    op.out_stride = out_stride;
    op.rows = rows;
    op.ffn = ffn;
    op.activation = gelu ? cuda::GateActivation::kGeluTanh : cuda::GateActivation::kSilu;
    const Status st = cuda::swiglu(op, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    const auto out = download<uint16_t>(d_out, static_cast<size_t>(rows * out_stride));
    int bad = 0, padding = 0;
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < ffn; ++i) {
        const double g = gu[size_t(r * gu_stride + i)], u = gu[size_t(r * gu_stride + ffn + i)];
        const double f = gelu ? 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)))
                              : g / (1.0 + std::exp(-g));
        // The floor: fp32's 1 + tanh cancels for gates below about -5 (the
        // same formula in float, as transformers and llama.cpp compute it).
        bad += !near_bf16(out[size_t(r * out_stride + i)], f * u, 1e-6 * std::fabs(u));
      }
      for (int64_t i = ffn; i < out_stride; ++i) padding += out[size_t(r * out_stride + i)] != kNaN16;
    }
    CHECK_MESSAGE(bad == 0, bad, " outputs differ from the formula");
    CHECK_MESSAGE(padding == 0, "written past ffn in ", padding, " places");
  }
}

TEST_CASE("cuda family ops: add_rms_norm is Gemma's post-norm + residual, with the next pre-norm fused") {
  if (skip_without_gpu()) return;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  struct Shape {
    int rows, dim;
    int64_t y_stride, x_stride, xn_stride;
  };
  for (const Shape& s : {Shape{1, 640, 640, 640, 640}, Shape{6, 1000, 1004, 1000, 1008}, Shape{3, 64, 80, 72, 64}}) {
    for (const bool next : {false, true}) {
      INFO("rows ", s.rows, " dim ", s.dim, (next ? " with" : " without"), " the next norm");
      std::vector<float> y(size_t(s.rows * s.y_stride)), x(size_t(s.rows * s.x_stride)), post(size_t(s.dim)),
          nw(size_t(s.dim));
      for (float& v : y) v = normal(rng);
      for (float& v : x) v = normal(rng);
      for (float& v : post) v = uni(rng);
      for (float& v : nw) v = uni(rng);
      DeviceBuffer d_y = upload(y), d_x = upload(x), d_post = upload(post), d_nw = upload(nw);
      DeviceBuffer d_xn = poisoned(size_t(s.rows * s.xn_stride) * 2);
      cuda::AddRmsNormOp op;
      op.y = static_cast<const float*>(d_y.data());
      op.y_stride = s.y_stride;
      op.post_weight = static_cast<const float*>(d_post.data());
      op.x = static_cast<float*>(d_x.data());
      op.x_stride = s.x_stride;
      op.next_weight = next ? static_cast<const float*>(d_nw.data()) : nullptr;
      op.xn = static_cast<uint16_t*>(d_xn.data());
      op.xn_stride = s.xn_stride;
      op.rows = s.rows;
      op.dim = s.dim;
      op.eps = 1e-6f;
      const Status st = cuda::add_rms_norm(op, nullptr);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      const auto got_x = download<float>(d_x, x.size());
      const auto got_xn = download<uint16_t>(d_xn, size_t(s.rows * s.xn_stride));
      int x_bad = 0, xn_bad = 0, untouched = 0;
      for (int r = 0; r < s.rows; ++r) {
        double ss = 0;
        for (int i = 0; i < s.dim; ++i) ss += double(y[size_t(r * s.y_stride + i)]) * y[size_t(r * s.y_stride + i)];
        const double ys = 1.0 / std::sqrt(ss / s.dim + 1e-6);
        std::vector<double> want(size_t(s.dim));
        double ss_x = 0;
        for (int i = 0; i < s.dim; ++i) {
          want[size_t(i)] = x[size_t(r * s.x_stride + i)] + y[size_t(r * s.y_stride + i)] * ys * post[size_t(i)];
          ss_x += want[size_t(i)] * want[size_t(i)];
          const double got = got_x[size_t(r * s.x_stride + i)];
          x_bad += !(std::fabs(got - want[size_t(i)]) <= 1e-5 * (std::fabs(want[size_t(i)]) + 1.0));
        }
        for (int64_t i = s.dim; i < s.x_stride; ++i)
          untouched += got_x[size_t(r * s.x_stride + i)] != x[size_t(r * s.x_stride + i)];
        const double xs = 1.0 / std::sqrt(ss_x / s.dim + 1e-6);
        for (int i = 0; i < s.dim; ++i) {
          const uint16_t got = got_xn[size_t(r * s.xn_stride + i)];
          xn_bad += next ? !near_bf16(got, want[size_t(i)] * xs * nw[size_t(i)], 1e-5) : got != kNaN16;
        }
        for (int64_t i = s.dim; i < s.xn_stride; ++i) untouched += got_xn[size_t(r * s.xn_stride + i)] != kNaN16;
      }
      CHECK_MESSAGE(x_bad == 0, x_bad, " residual values differ from x + rms_norm(y)·w");
      CHECK_MESSAGE(xn_bad == 0, xn_bad, (next ? " normalized values differ" : " xn written without next_weight"));
      CHECK_MESSAGE(untouched == 0, untouched, " padding elements written");
    }
  }
  cuda::AddRmsNormOp op;
  op.rows = 1;
  op.dim = 8;
  CHECK(cuda::add_rms_norm(op, nullptr).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("cuda family ops: the embedding scaled by √hidden (Gemma) is the bf16 row times the scale") {
  if (skip_without_gpu()) return;
  const int vocab = 50, hidden = 640;
  std::mt19937_64 rng(6);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<uint16_t> table(static_cast<size_t>(vocab * hidden));
  for (uint16_t& t : table) t = float_to_bf16(normal(rng));
  const std::vector<int32_t> ids = {0, 49, 7, 7, 13};
  const int n = static_cast<int>(ids.size());
  const float scale = std::sqrt(float(hidden));
  DeviceBuffer d_table = upload(table), d_ids = upload(ids), d_x = poisoned(static_cast<size_t>(n * hidden) * 4);
  cuda::EmbeddingOp op;
  op.ids = static_cast<const int32_t*>(d_ids.data());
  op.table = static_cast<const uint16_t*>(d_table.data());
  op.x = static_cast<float*>(d_x.data());
  op.n = n;
  op.hidden = hidden;
  op.vocab = vocab;
  op.scale = scale;
  const Status st = cuda::embedding(op, nullptr);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  const auto x = download<float>(d_x, static_cast<size_t>(n * hidden));
  int bad = 0;
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < hidden; ++i)
      bad += x[size_t(t * hidden + i)] != bf16_to_float(table[size_t(ids[size_t(t)] * hidden + i)]) * scale;
  CHECK_MESSAGE(bad == 0, bad, " elements differ from bf16 row · √hidden");
  op.scale = std::nanf("");
  CHECK(cuda::embedding(op, nullptr).code() == StatusCode::kInvalidArgument);
}
