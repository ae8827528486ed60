// The decode step's fused few-token GEMM (cuda::skinny_gemm) against the
// unfused ops it replaces, run on the same inputs on the device:
//   kRmsNorm input  = rms_norm, then the GEMM on its bf16 output
//   kStore / kAccumulate = gemm_bf16 (accumulate: into the same start values)
//   kRopeAppend     = gemm_bf16 into fp32 qkv, then rope_append
//   kSwiglu         = gemm_bf16 into fp32 gate|up, then swiglu (kGegluTanh:
//                     swiglu with GateActivation::kGeluTanh)
//   kSplitKv input  = attention partials merged on the host in double, rounded
//                     to bf16, then the kBf16 kernel
//   kAddRmsNorm input = add_rms_norm (Gemma's post-norm, the next pre-norm
//                     behind it), then the kBf16 kernel on its bf16 output
//   kRopeHeads      = kStore, then rope_append (bit for bit: the same arithmetic)
// over 1..8 rows, SmolLM2's shapes (k 576 and 1536, the 49152-row head), a
// k past one pass of the kernel (2048 elements) and odd n_out. Outputs and
// K/V pages start poisoned (NaN); padding, unused rows and slots nobody
// owns must stay NaN in both.
//
// Bounds. Both sides sum fp32 products of the same bf16 values, in another
// order: 1e-4 of Σ|w·x| covers that (k <= 3072). The kRmsNorm input differs
// once more: the sum of squares is taken in another order, so an element of
// the normalized row may round to the neighbouring bf16 (one ulp, 2^-8): we
// allow four such flips, 2^-6 of the largest |product|. Outputs rounded to
// bf16 (q, K/V, act) may then round apart by one ulp: 2^-7 of the value,
// plus 1e-3 of the tensor's RMS for values near zero. Bugs (a wrong row, a
// token's input read for another, a RoPE pair off by one, gate and up
// swapped) are errors of the order of the values themselves.
// Without a CUDA device every case says it was skipped and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/model_ops_cuda.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/half.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

using namespace flashscope;
using flashscope::testing::download;
using flashscope::testing::poisoned;
using flashscope::testing::random_bf16;
using flashscope::testing::random_f32;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::upload;

namespace {

// One problem: weights, the input rows (bf16 and fp32 forms), the norm weight.
struct Problem {
  int rows, n_w, k;
  std::vector<uint16_t> w, x;  // [n_w, k], [rows, k]
  std::vector<float> xf, norm_weight;
  DeviceBuffer d_w, d_x, d_xf, d_norm;
  DeviceBuffer d_xn;  // the unfused path's normalized rows (bf16)

  Problem(int rows_, int n_w_, int k_, uint64_t seed) : rows(rows_), n_w(n_w_), k(k_) {
    std::mt19937_64 rng(seed);
    // Weights of a trained layer's scale (~1/sqrt(k)), inputs of a residual stream's.
    w = random_bf16(size_t(n_w) * k, rng, 1.0f / std::sqrt(float(k)));
    x = random_bf16(size_t(rows) * k, rng);
    xf = random_f32(size_t(rows) * k, rng, 3.0f);
    norm_weight = random_f32(size_t(k), rng, 0.5f);
    d_w = upload(w);
    d_x = upload(x);
    d_xf = upload(xf);
    d_norm = upload(norm_weight);
    d_xn = poisoned(size_t(rows) * k * 2);
  }

  // The unfused input of the GEMM: x itself, or rms_norm(xf) on the device.
  const uint16_t* unfused_input(cuda::SkinnyInput input) {
    if (input == cuda::SkinnyInput::kBf16) return static_cast<const uint16_t*>(d_x.data());
    cuda::RmsNormOp op;
    op.x = static_cast<const float*>(d_xf.data());
    op.x_stride = k;
    op.weight = static_cast<const float*>(d_norm.data());
    op.y = static_cast<uint16_t*>(d_xn.data());
    op.y_stride = k;
    op.rows = rows;
    op.dim = k;
    op.eps = 1e-5f;
    const Status s = cuda::rms_norm(op, nullptr);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    return static_cast<const uint16_t*>(d_xn.data());
  }

  cuda::SkinnyGemmOp fused_op(cuda::SkinnyInput input, cuda::SkinnyOutput output, int n_out) const {
    cuda::SkinnyGemmOp op;
    op.input = input;
    op.output = output;
    op.w = static_cast<const uint16_t*>(d_w.data());
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
  }

  // Σ|w·x| and max|w·x| of output row c for token t, over the unfused input.
  void magnitude(const std::vector<uint16_t>& in, int t, int c, double* sum, double* max) const {
    *sum = 0;
    *max = 0;
    for (int i = 0; i < k; ++i) {
      const double p = std::fabs(double(bf16_to_float(w[size_t(c) * k + i])) * bf16_to_float(in[size_t(t) * k + i]));
      *sum += p;
      *max = std::max(*max, p);
    }
  }
};

double fp32_bound(const Problem& pb, const std::vector<uint16_t>& in, int t, int c, cuda::SkinnyInput input) {
  double sum = 0, max = 0;
  pb.magnitude(in, t, c, &sum, &max);
  return 1e-4 * sum + (input == cuda::SkinnyInput::kRmsNorm ? std::ldexp(max, -6) : 0.0) + 1e-7;
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
  return n ? std::sqrt(s / n) : 0.0;
}

// Element-wise: both NaN (untouched) or within a bf16 rounding apart.
int bf16_mismatches(const std::vector<uint16_t>& fused, const std::vector<uint16_t>& ref, double* worst) {
  const double floor = 1e-3 * rms_of(ref);
  int bad = 0;
  *worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float a = bf16_to_float(fused[i]), b = bf16_to_float(ref[i]);
    if (std::isnan(a) || std::isnan(b)) {
      bad += std::isnan(a) != std::isnan(b);
      continue;
    }
    const double err = std::fabs(double(a) - b);
    *worst = std::max(*worst, err);
    bad += !(err <= std::ldexp(std::fabs(double(b)), -7) + floor);
  }
  return bad;
}

const char* input_name(cuda::SkinnyInput i) { return i == cuda::SkinnyInput::kBf16 ? "bf16" : "rms_norm"; }

}  // namespace

TEST_CASE("skinny gemm: kStore and kAccumulate equal the cuBLAS GEMM (1..8 rows, tails, two passes)") {
  if (skip_without_gpu()) return;
  auto handle = cuda::CublasHandle::create();
  REQUIRE_MESSAGE(handle.ok(), handle.status().to_string());
  REQUIRE(handle->bind(nullptr, nullptr, 0).ok());
  struct Shape {
    int rows, n_out, k;
  };
  const Shape shapes[] = {{1, 49152, 576},  // SmolLM2's LM head in decode
                          {1, 576, 1536},   // its down projection
                          {3, 577, 576},    // odd n_out: the last warp has one row
                          {5, 130, 2816},   // two passes of 2048 elements
                          {8, 576, 576},    // a batch of 8 through Wo
                          {2, 7, 8}};       // the smallest k
  uint64_t seed = 11;
  for (const Shape& s : shapes) {
    for (const auto input : {cuda::SkinnyInput::kBf16, cuda::SkinnyInput::kRmsNorm}) {
      for (const bool accumulate : {false, true}) {
        INFO("rows ", s.rows, " n_out ", s.n_out, " k ", s.k, " input ", input_name(input), " accumulate ", accumulate);
        Problem pb(s.rows, s.n_out, s.k, seed++);
        const int64_t ldy = s.n_out + 3;  // padding that must stay NaN
        std::vector<float> y0(size_t(s.rows) * ldy, std::numeric_limits<float>::quiet_NaN());
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        if (accumulate)
          for (int t = 0; t < s.rows; ++t)
            for (int c = 0; c < s.n_out; ++c) y0[size_t(t) * ldy + c] = normal(rng);
        DeviceBuffer d_fused = upload(y0), d_ref = upload(y0);

        cuda::SkinnyGemmOp op =
            pb.fused_op(input, accumulate ? cuda::SkinnyOutput::kAccumulate : cuda::SkinnyOutput::kStore, s.n_out);
        op.y = static_cast<float*>(d_fused.data());
        op.ldy = ldy;
        const Status st = cuda::skinny_gemm(op, nullptr);
        REQUIRE_MESSAGE(st.ok(), st.to_string());

        cuda::GemmOp g;
        g.w = static_cast<const uint16_t*>(pb.d_w.data());
        g.x = pb.unfused_input(input);
        g.y = static_cast<float*>(d_ref.data());
        g.rows = s.rows;
        g.n_out = s.n_out;
        g.k = s.k;
        g.ldx = s.k;
        g.ldy = ldy;
        g.accumulate = accumulate;
        const Status gs = cuda::gemm_bf16(handle->get(), g);
        REQUIRE_MESSAGE(gs.ok(), gs.to_string());

        const auto fused = download<float>(d_fused, y0.size());
        const auto ref = download<float>(d_ref, y0.size());
        const auto in = download<uint16_t>(input == cuda::SkinnyInput::kBf16 ? pb.d_x : pb.d_xn,
                                              size_t(s.rows) * s.k);
        int bad = 0, padding = 0;
        for (int t = 0; t < s.rows; ++t) {
          for (int c = 0; c < s.n_out; ++c) {
            const size_t i = size_t(t) * ldy + c;
            bad += !(std::fabs(double(fused[i]) - ref[i]) <= fp32_bound(pb, in, t, c, input));
          }
          for (int64_t c = s.n_out; c < ldy; ++c) padding += !std::isnan(fused[size_t(t) * ldy + c]);
        }
        CHECK_MESSAGE(bad == 0, bad, " outputs off");
        CHECK_MESSAGE(padding == 0, "wrote past n_out in ", padding, " places");
      }
    }
  }
}

TEST_CASE("skinny gemm: kRopeAppend equals the GEMM then rope_append (q and K/V pages, skipped slots)") {
  if (skip_without_gpu()) return;
  auto handle = cuda::CublasHandle::create();
  REQUIRE_MESSAGE(handle.ok(), handle.status().to_string());
  REQUIRE(handle->bind(nullptr, nullptr, 0).ok());
  struct Shape {
    int rows, q_heads, kv_heads, head_dim, rope_dim, hidden;
  };
  const Shape shapes[] = {{1, 9, 3, 64, 64, 576},     // SmolLM2 decode
                          {4, 9, 3, 64, 64, 576},     // a batch of 4
                          {8, 8, 2, 128, 128, 1024},  // head_dim 128
                          {3, 4, 4, 64, 32, 256}};    // partial rotary, no GQA
  constexpr int kPageSize = 16, kPages = 6;
  uint64_t seed = 101;
  for (const Shape& s : shapes) {
    INFO("rows ", s.rows, " heads ", s.q_heads, "/", s.kv_heads, " D ", s.head_dim, " rope_dim ", s.rope_dim);
    const int n_out = (s.q_heads + 2 * s.kv_heads) * s.head_dim;
    Problem pb(s.rows, n_out, s.hidden, seed++);
    std::mt19937_64 rng(seed);
    // Distinct slots scattered over the pool; the last token's is -1 (skipped) when there are several.
    std::vector<int64_t> slots(size_t(s.rows));
    std::vector<int64_t> all(kPages * kPageSize);
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    std::shuffle(all.begin(), all.end(), rng);
    for (int t = 0; t < s.rows; ++t) slots[size_t(t)] = all[size_t(t)];
    if (s.rows > 1) slots.back() = -1;
    const int pairs = s.rope_dim / 2;
    std::vector<float> cos_t(size_t(s.rows) * std::max(pairs, 1)), sin_t(cos_t.size());
    std::uniform_real_distribution<float> angle(-3.0f, 3.0f);
    for (size_t i = 0; i < cos_t.size(); ++i) {
      const float a = angle(rng);
      cos_t[i] = std::cos(a);
      sin_t[i] = std::sin(a);
    }
    DeviceBuffer d_slots = upload(slots), d_cos = upload(cos_t), d_sin = upload(sin_t);
    const size_t q_elems = size_t(s.rows) * s.q_heads * s.head_dim;
    const size_t page_elems = size_t(kPages) * s.kv_heads * kPageSize * s.head_dim;
    struct Outputs {
      DeviceBuffer q, k, v;
    };
    Outputs fused{poisoned(q_elems * 2), poisoned(page_elems * 2), poisoned(page_elems * 2)};
    Outputs ref{poisoned(q_elems * 2), poisoned(page_elems * 2), poisoned(page_elems * 2)};
    auto rope_op = [&](Outputs& o) {
      cuda::RopeAppendOp r;
      r.rope_cos = static_cast<const float*>(d_cos.data());
      r.rope_sin = static_cast<const float*>(d_sin.data());
      r.slots = static_cast<const int64_t*>(d_slots.data());
      r.q_out = static_cast<uint16_t*>(o.q.data());
      r.q_stride = int64_t(s.q_heads) * s.head_dim;
      r.k_pages = o.k.data();
      r.v_pages = o.v.data();
      r.n = s.rows;
      r.q_heads = s.q_heads;
      r.kv_heads = s.kv_heads;
      r.head_dim = s.head_dim;
      r.rope_dim = s.rope_dim;
      r.page_size = kPageSize;
      r.num_pages = kPages;
      return r;
    };
    for (const auto input : {cuda::SkinnyInput::kBf16, cuda::SkinnyInput::kRmsNorm}) {
      INFO("input ", input_name(input));
      REQUIRE(fused.q.fill_bytes(0xFF).ok());
      REQUIRE(fused.k.fill_bytes(0xFF).ok());
      REQUIRE(fused.v.fill_bytes(0xFF).ok());
      REQUIRE(ref.q.fill_bytes(0xFF).ok());
      REQUIRE(ref.k.fill_bytes(0xFF).ok());
      REQUIRE(ref.v.fill_bytes(0xFF).ok());
      cuda::SkinnyGemmOp op = pb.fused_op(input, cuda::SkinnyOutput::kRopeAppend, n_out);
      op.rope = rope_op(fused);
      const Status st = cuda::skinny_gemm(op, nullptr);
      REQUIRE_MESSAGE(st.ok(), st.to_string());

      DeviceBuffer d_qkv = poisoned(size_t(s.rows) * n_out * 4);
      cuda::GemmOp g;
      g.w = static_cast<const uint16_t*>(pb.d_w.data());
      g.x = pb.unfused_input(input);
      g.y = static_cast<float*>(d_qkv.data());
      g.rows = s.rows;
      g.n_out = n_out;
      g.k = s.hidden;
      g.ldx = s.hidden;
      g.ldy = n_out;
      REQUIRE(cuda::gemm_bf16(handle->get(), g).ok());
      cuda::RopeAppendOp r = rope_op(ref);
      r.qkv = static_cast<const float*>(d_qkv.data());
      r.qkv_stride = n_out;
      const Status rs = cuda::rope_append(r, nullptr);
      REQUIRE_MESSAGE(rs.ok(), rs.to_string());

      double worst = 0;
      CHECK_MESSAGE(bf16_mismatches(download<uint16_t>(fused.q, q_elems), download<uint16_t>(ref.q, q_elems),
                                    &worst) == 0,
                    "q differs (worst ", worst, ")");
      CHECK_MESSAGE(bf16_mismatches(download<uint16_t>(fused.k, page_elems),
                                    download<uint16_t>(ref.k, page_elems), &worst) == 0,
                    "K pages differ (worst ", worst, ")");
      CHECK_MESSAGE(bf16_mismatches(download<uint16_t>(fused.v, page_elems),
                                    download<uint16_t>(ref.v, page_elems), &worst) == 0,
                    "V pages differ (worst ", worst, ")");
      // Only the tokens' own slots were written.
      const auto kp = download<uint16_t>(fused.k, page_elems);
      size_t written = 0;
      for (uint16_t b : kp) written += !std::isnan(bf16_to_float(b));
      const size_t owned = size_t(std::count_if(slots.begin(), slots.end(), [](int64_t x) { return x >= 0; }));
      CHECK(written == owned * s.kv_heads * s.head_dim);
    }
  }
}

TEST_CASE("skinny gemm: kRopeHeads equals kStore then rope_append bit for bit (q/k norms, bias, NeoX, counters)") {
  // The same kernel stores the same qkv, and its last CTA per head runs
  // rope_append's own arithmetic (rope_head.cuh): every output equal, the
  // counters back at zero, and a second launch on them equal again.
  if (skip_without_gpu()) return;
  struct Shape {
    int rows, q_heads, kv_heads, head_dim, hidden;
    bool norms, bias, neox;
  };
  const Shape shapes[] = {{1, 4, 1, 256, 640, true, false, true},     // Gemma-3-270M decode
                          {4, 4, 1, 256, 640, true, false, true},     // a step of 4
                          {1, 16, 8, 128, 1024, true, false, true},   // Qwen3-0.6B decode
                          {3, 14, 2, 64, 896, false, true, true},     // Qwen2.5: biases
                          {8, 8, 2, 128, 1024, true, true, false}};   // adjacent pairs, 8 rows
  constexpr int kPageSize = 16, kPages = 4;
  uint64_t seed = 301;
  for (const Shape& s : shapes) {
    INFO("rows ", s.rows, " heads ", s.q_heads, "/", s.kv_heads, " D ", s.head_dim, " norms ", s.norms, " bias ",
         s.bias, " neox ", s.neox);
    const int heads = s.q_heads + 2 * s.kv_heads;
    const int n_out = heads * s.head_dim;
    REQUIRE(cuda::skinny_rope_heads_supported(n_out, s.head_dim));
    Problem pb(s.rows, n_out, s.hidden, seed++);
    std::mt19937_64 rng(seed);
    std::vector<int64_t> slots(size_t(s.rows));
    for (int t = 0; t < s.rows; ++t) slots[size_t(t)] = (5 * t + 3) % (kPages * kPageSize);
    if (s.rows > 2) slots[1] = -1;  // a skipped token
    const int pairs = s.head_dim / 2;
    std::vector<float> cos_t(size_t(s.rows) * pairs), sin_t(cos_t.size());
    std::uniform_real_distribution<float> angle(-3.0f, 3.0f);
    for (size_t i = 0; i < cos_t.size(); ++i) {
      const float a = angle(rng);
      cos_t[i] = std::cos(a);
      sin_t[i] = std::sin(a);
    }
    const std::vector<float> q_norm = random_f32(size_t(s.head_dim), rng, 0.5f);
    const std::vector<float> k_norm = random_f32(size_t(s.head_dim), rng, 0.5f);
    const std::vector<float> bias = random_f32(size_t(n_out), rng, 0.3f);
    DeviceBuffer d_slots = upload(slots), d_cos = upload(cos_t), d_sin = upload(sin_t);
    DeviceBuffer d_qn = upload(q_norm), d_kn = upload(k_norm), d_bias = upload(bias);
    const std::vector<int32_t> zeros(size_t(heads), 0);
    DeviceBuffer d_counters = upload(zeros);
    const size_t q_elems = size_t(s.rows) * s.q_heads * s.head_dim;
    const size_t page_elems = size_t(kPages) * s.kv_heads * kPageSize * s.head_dim;
    struct Outputs {
      DeviceBuffer qkv, q, k, v;
    };
    auto outputs = [&] {
      return Outputs{poisoned(size_t(s.rows) * n_out * 4), poisoned(q_elems * 2), poisoned(page_elems * 2),
                     poisoned(page_elems * 2)};
    };
    auto rope_op = [&](Outputs& o) {
      cuda::RopeAppendOp r;
      r.rope_cos = static_cast<const float*>(d_cos.data());
      r.rope_sin = static_cast<const float*>(d_sin.data());
      r.slots = static_cast<const int64_t*>(d_slots.data());
      r.q_out = static_cast<uint16_t*>(o.q.data());
      r.q_stride = int64_t(s.q_heads) * s.head_dim;
      r.k_pages = o.k.data();
      r.v_pages = o.v.data();
      r.n = s.rows;
      r.q_heads = s.q_heads;
      r.kv_heads = s.kv_heads;
      r.head_dim = s.head_dim;
      r.rope_dim = s.head_dim;
      r.page_size = kPageSize;
      r.num_pages = kPages;
      r.bias = s.bias ? static_cast<const float*>(d_bias.data()) : nullptr;
      r.q_norm = s.norms ? static_cast<const float*>(d_qn.data()) : nullptr;
      r.k_norm = s.norms ? static_cast<const float*>(d_kn.data()) : nullptr;
      r.norm_eps = 1e-6f;
      r.neox = s.neox;
      return r;
    };
    Outputs ref = outputs();
    cuda::SkinnyGemmOp store = pb.fused_op(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kStore, n_out);
    store.y = static_cast<float*>(ref.qkv.data());
    store.ldy = n_out;
    Status st = cuda::skinny_gemm(store, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    cuda::RopeAppendOp r = rope_op(ref);
    r.qkv = static_cast<const float*>(ref.qkv.data());
    r.qkv_stride = n_out;
    st = cuda::rope_append(r, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());

    for (int launch = 0; launch < 2; ++launch) {
      INFO("launch ", launch);
      Outputs fused = outputs();
      cuda::SkinnyGemmOp op = pb.fused_op(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeHeads, n_out);
      op.y = static_cast<float*>(fused.qkv.data());
      op.ldy = n_out;
      op.rope = rope_op(fused);
      op.rope_counters = static_cast<int*>(d_counters.data());
      st = cuda::skinny_gemm(op, nullptr);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      auto same = [](const DeviceBuffer& a, const DeviceBuffer& b, size_t bytes) {
        const auto ha = download<uint8_t>(a, bytes), hb = download<uint8_t>(b, bytes);
        return ha == hb;
      };
      CHECK_MESSAGE(same(fused.qkv, ref.qkv, size_t(s.rows) * n_out * 4), "qkv differs");
      CHECK_MESSAGE(same(fused.q, ref.q, q_elems * 2), "q differs");
      CHECK_MESSAGE(same(fused.k, ref.k, page_elems * 2), "K pages differ");
      CHECK_MESSAGE(same(fused.v, ref.v, page_elems * 2), "V pages differ");
      CHECK(download<int32_t>(d_counters, size_t(heads)) == zeros);
    }
  }
}

TEST_CASE("skinny gemm: kRopeHeads refuses quantized weights, missing counters and heads that split a CTA") {
  if (skip_without_gpu()) return;
  CHECK(!cuda::skinny_rope_heads_supported(3 * 100, 100));   // head_dim not a multiple of 8
  CHECK(!cuda::skinny_rope_heads_supported(72 * 128, 128));  // warps would take two units each
  CHECK(cuda::skinny_rope_heads_supported(32 * 128, 128));   // Qwen3-0.6B's 16 + 2·8 heads
  Problem pb(1, 6 * 64, 256, 9);
  DeviceBuffer qkv = poisoned(6 * 64 * 4), q = poisoned(4 * 64 * 2), pages = poisoned(2 * 16 * 64 * 2);
  DeviceBuffer slots = upload(std::vector<int64_t>{0}), angles = upload(std::vector<float>(32, 0.5f));
  cuda::SkinnyGemmOp op = pb.fused_op(cuda::SkinnyInput::kRmsNorm, cuda::SkinnyOutput::kRopeHeads, 6 * 64);
  op.y = static_cast<float*>(qkv.data());
  op.ldy = 6 * 64;
  op.rope.rope_cos = op.rope.rope_sin = static_cast<const float*>(angles.data());
  op.rope.slots = static_cast<const int64_t*>(slots.data());
  op.rope.q_out = static_cast<uint16_t*>(q.data());
  op.rope.q_stride = 4 * 64;
  op.rope.k_pages = op.rope.v_pages = pages.data();
  op.rope.q_heads = 4;
  op.rope.kv_heads = 1;
  op.rope.head_dim = 64;
  op.rope.rope_dim = 64;
  op.rope.page_size = 16;
  const Status st = cuda::skinny_gemm(op, nullptr);  // no counters
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("rope_counters") != std::string::npos);
}

TEST_CASE("skinny gemm: kSwiglu and kGegluTanh equal the gate/up GEMM then swiglu (silu / gelu_tanh)") {
  if (skip_without_gpu()) return;
  auto handle = cuda::CublasHandle::create();
  REQUIRE_MESSAGE(handle.ok(), handle.status().to_string());
  REQUIRE(handle->bind(nullptr, nullptr, 0).ok());
  struct Shape {
    int rows, ffn, hidden;
  };
  const Shape shapes[] = {{1, 1536, 576}, {6, 1536, 576}, {2, 101, 2056}};
  uint64_t seed = 303;
  for (const Shape& s : shapes) {
    for (const auto input : {cuda::SkinnyInput::kBf16, cuda::SkinnyInput::kRmsNorm})
    for (const bool gelu : {false, true}) {
      INFO("rows ", s.rows, " ffn ", s.ffn, " hidden ", s.hidden, " input ", input_name(input),
           (gelu ? " gelu_tanh" : " silu"));
      Problem pb(s.rows, 2 * s.ffn, s.hidden, seed++);
      const int64_t ld_act = s.ffn + 5;
      DeviceBuffer d_fused = poisoned(size_t(s.rows) * ld_act * 2), d_ref = poisoned(size_t(s.rows) * ld_act * 2);
      cuda::SkinnyGemmOp op =
          pb.fused_op(input, gelu ? cuda::SkinnyOutput::kGegluTanh : cuda::SkinnyOutput::kSwiglu, s.ffn);
      op.act = static_cast<uint16_t*>(d_fused.data());
      op.ld_act = ld_act;
      const Status st = cuda::skinny_gemm(op, nullptr);
      REQUIRE_MESSAGE(st.ok(), st.to_string());

      DeviceBuffer d_gu = poisoned(size_t(s.rows) * 2 * s.ffn * 4);
      cuda::GemmOp g;
      g.w = static_cast<const uint16_t*>(pb.d_w.data());
      g.x = pb.unfused_input(input);
      g.y = static_cast<float*>(d_gu.data());
      g.rows = s.rows;
      g.n_out = 2 * s.ffn;
      g.k = s.hidden;
      g.ldx = s.hidden;
      g.ldy = 2 * s.ffn;
      REQUIRE(cuda::gemm_bf16(handle->get(), g).ok());
      cuda::SwigluOp sw;
      sw.gu = static_cast<const float*>(d_gu.data());
      sw.gu_stride = 2 * s.ffn;
      sw.out = static_cast<uint16_t*>(d_ref.data());
      sw.out_stride = ld_act;
      sw.rows = s.rows;
      sw.ffn = s.ffn;
      sw.activation = gelu ? cuda::GateActivation::kGeluTanh : cuda::GateActivation::kSilu;
      REQUIRE(cuda::swiglu(sw, nullptr).ok());

      double worst = 0;
      const size_t n = size_t(s.rows) * ld_act;
      CHECK_MESSAGE(bf16_mismatches(download<uint16_t>(d_fused, n), download<uint16_t>(d_ref, n), &worst) == 0,
                    "act differs (worst ", worst, ")");
    }
  }
}

TEST_CASE("skinny gemm: kSplitKv merges attention partials as the combine would, then multiplies") {
  if (skip_without_gpu()) return;
  struct Shape {
    int rows, q_len, q_heads, head_dim, splits, n_out;
  };
  const Shape shapes[] = {{1, 1, 9, 64, 16, 576},    // SmolLM2's O projection after a 16-way split
                          {3, 1, 4, 128, 5, 130},    // three sequences' decode rows
                          {4, 4, 2, 64, 64, 96},     // one sequence's 4-token chunk, 64 splits
                          {2, 1, 8, 64, 1, 64}};     // a single split
  std::mt19937_64 rng(909);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    INFO("rows ", s.rows, " q_len ", s.q_len, " heads ", s.q_heads, " D ", s.head_dim, " splits ", s.splits);
    const int k = s.q_heads * s.head_dim;
    const int64_t partial_rows = int64_t(s.rows) * s.q_heads + 3;  // room past the rows, never read
    std::vector<float> o_part(size_t(s.splits) * partial_rows * s.head_dim), lse(size_t(s.splits) * partial_rows);
    for (float& v : o_part) v = normal(rng);
    for (size_t i = 0; i < lse.size(); ++i) lse[i] = i % 7 == 3 ? -INFINITY : 4.0f * normal(rng);  // some splits saw no key
    // The merged rows on the host in double, rounded to bf16: what kBf16 is given.
    std::vector<uint16_t> merged(size_t(s.rows) * k);
    for (int t = 0; t < s.rows; ++t)
      for (int h = 0; h < s.q_heads; ++h) {
        const int64_t row = (int64_t(t / s.q_len) * s.q_heads + h) * s.q_len + t % s.q_len;
        double m = -INFINITY;
        for (int sp = 0; sp < s.splits; ++sp) m = std::max(m, double(lse[size_t(sp * partial_rows + row)]));
        for (int d = 0; d < s.head_dim; ++d) {
          double sum = 0, acc = 0;
          for (int sp = 0; sp < s.splits; ++sp) {
            const double w = std::isinf(m) ? 0.0 : std::exp(double(lse[size_t(sp * partial_rows + row)]) - m);
            sum += w;
            acc += w * o_part[size_t((sp * partial_rows + row) * s.head_dim + d)];
          }
          merged[size_t(t) * k + size_t(h) * s.head_dim + d] = float_to_bf16(sum > 0 ? float(acc / sum) : 0.0f);
        }
      }
    Problem pb(s.rows, s.n_out, k, 5000 + uint64_t(s.splits));
    pb.x = merged;
    pb.d_x = upload(merged);
    DeviceBuffer d_o = upload(o_part), d_lse = upload(lse);
    DeviceBuffer d_fused = poisoned(size_t(s.rows) * s.n_out * 4), d_ref = poisoned(size_t(s.rows) * s.n_out * 4);

    cuda::SkinnyGemmOp op = pb.fused_op(cuda::SkinnyInput::kSplitKv, cuda::SkinnyOutput::kStore, s.n_out);
    op.split_kv.o_partial = static_cast<const float*>(d_o.data());
    op.split_kv.lse_partial = static_cast<const float*>(d_lse.data());
    op.split_kv.num_splits = s.splits;
    op.split_kv.q_heads = s.q_heads;
    op.split_kv.head_dim = s.head_dim;
    op.split_kv.q_len = s.q_len;
    op.split_kv.partial_rows = partial_rows;
    op.y = static_cast<float*>(d_fused.data());
    op.ldy = s.n_out;
    const Status st = cuda::skinny_gemm(op, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    cuda::SkinnyGemmOp ref = pb.fused_op(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kStore, s.n_out);
    ref.y = static_cast<float*>(d_ref.data());
    ref.ldy = s.n_out;
    REQUIRE(cuda::skinny_gemm(ref, nullptr).ok());

    const auto fused = download<float>(d_fused, size_t(s.rows) * s.n_out);
    const auto want = download<float>(d_ref, size_t(s.rows) * s.n_out);
    int bad = 0;
    for (int t = 0; t < s.rows; ++t)
      for (int c = 0; c < s.n_out; ++c) {
        // The device merges in fp32 (__expf): a merged element may round to
        // the neighbouring bf16, as with the normalized inputs above.
        const size_t i = size_t(t) * s.n_out + c;
        bad += !(std::fabs(double(fused[i]) - want[i]) <= fp32_bound(pb, merged, t, c, cuda::SkinnyInput::kRmsNorm));
      }
    CHECK_MESSAGE(bad == 0, bad, " outputs off");
  }
}

TEST_CASE("skinny gemm: kAddRmsNorm equals add_rms_norm then the GEMM, and stores the new residual once") {
  // Gemma's post-norm folded into the next product's staging: the unfused
  // path is add_rms_norm (x_in + rms_norm(y) · post_weight into x, the next
  // pre-norm into xn), then the kBf16 kernel on xn. Bounds as for kRmsNorm
  // (the sums of squares in another order), and the stored residual within
  // fp32 rounding of add_rms_norm's (its y scale summed in another order).
  if (skip_without_gpu()) return;
  struct Shape {
    int rows, n_out, k;
  };
  const Shape shapes[] = {{1, 2048, 640},   // Gemma-3-270M's gate/up in decode
                          {1, 1536, 640},   // its QKV
                          {3, 577, 1024},   // Qwen3-0.6B's hidden, odd n_out
                          {8, 130, 2560}};  // 8 rows over several staging rounds
  uint64_t seed = 71;
  for (const Shape& s : shapes) {
    INFO("rows ", s.rows, " n_out ", s.n_out, " k ", s.k);
    Problem pb(s.rows, s.n_out, s.k, seed++);
    std::mt19937_64 rng(seed);
    const std::vector<float> res_y = random_f32(size_t(s.rows) * s.k, rng, 20.0f);
    const std::vector<float> post_w = random_f32(size_t(s.k), rng, 0.5f);
    DeviceBuffer d_res_y = upload(res_y), d_post = upload(post_w);
    // The new residual: rows + 1 rows, the last must stay NaN.
    DeviceBuffer d_res_out = poisoned(size_t(s.rows + 1) * s.k * 4);
    DeviceBuffer d_x_ref = poisoned(size_t(s.rows) * s.k * 4);
    const std::vector<float> y0(size_t(s.rows) * s.n_out, std::numeric_limits<float>::quiet_NaN());
    DeviceBuffer d_fused = upload(y0), d_ref = upload(y0);

    cuda::SkinnyGemmOp op = pb.fused_op(cuda::SkinnyInput::kAddRmsNorm, cuda::SkinnyOutput::kStore, s.n_out);
    op.res_y = static_cast<const float*>(d_res_y.data());
    op.ld_res_y = s.k;
    op.res_weight = static_cast<const float*>(d_post.data());
    op.res_out = static_cast<float*>(d_res_out.data());
    op.ld_res_out = s.k;
    op.y = static_cast<float*>(d_fused.data());
    op.ldy = s.n_out;
    Status st = cuda::skinny_gemm(op, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());

    cuda::AddRmsNormOp an;
    an.y = static_cast<const float*>(d_res_y.data());
    an.y_stride = s.k;
    an.post_weight = static_cast<const float*>(d_post.data());
    an.x = static_cast<float*>(d_x_ref.data());
    an.x_stride = s.k;
    an.x_in = static_cast<const float*>(pb.d_xf.data());
    an.x_in_stride = s.k;
    an.next_weight = static_cast<const float*>(pb.d_norm.data());
    an.xn = static_cast<uint16_t*>(pb.d_xn.data());
    an.xn_stride = s.k;
    an.rows = s.rows;
    an.dim = s.k;
    an.eps = 1e-5f;
    st = cuda::add_rms_norm(an, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    cuda::SkinnyGemmOp plain = pb.fused_op(cuda::SkinnyInput::kBf16, cuda::SkinnyOutput::kStore, s.n_out);
    plain.x = static_cast<const uint16_t*>(pb.d_xn.data());
    plain.y = static_cast<float*>(d_ref.data());
    plain.ldy = s.n_out;
    st = cuda::skinny_gemm(plain, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());

    const auto fused = download<float>(d_fused, y0.size());
    const auto ref = download<float>(d_ref, y0.size());
    const auto xn = download<uint16_t>(pb.d_xn, size_t(s.rows) * s.k);
    int bad = 0;
    for (int t = 0; t < s.rows; ++t) {
      for (int c = 0; c < s.n_out; ++c) {
        const size_t i = size_t(t) * s.n_out + c;
        bad += !(std::fabs(double(fused[i]) - ref[i]) <= fp32_bound(pb, xn, t, c, cuda::SkinnyInput::kRmsNorm));
      }
    }
    CHECK_MESSAGE(bad == 0, bad, " outputs off");

    const auto res_out = download<float>(d_res_out, size_t(s.rows + 1) * s.k);
    const auto x_ref = download<float>(d_x_ref, size_t(s.rows) * s.k);
    int res_bad = 0, past = 0;
    for (size_t i = 0; i < x_ref.size(); ++i)
      res_bad += !(std::fabs(double(res_out[i]) - x_ref[i]) <= 1e-5 * (std::fabs(x_ref[i]) + 1.0));
    for (size_t i = x_ref.size(); i < res_out.size(); ++i) past += !std::isnan(res_out[i]);
    CHECK_MESSAGE(res_bad == 0, res_bad, " residual values off");
    CHECK_MESSAGE(past == 0, "wrote ", past, " values past the rows");
  }
}

TEST_CASE("skinny gemm: kAddRmsNorm refuses a residual output that overlaps what every CTA reads") {
  if (skip_without_gpu()) return;
  Problem pb(2, 64, 640, 5);
  DeviceBuffer d_res_y = poisoned(size_t(2) * 640 * 4), d_y = poisoned(size_t(2) * 64 * 4);
  cuda::SkinnyGemmOp op = pb.fused_op(cuda::SkinnyInput::kAddRmsNorm, cuda::SkinnyOutput::kStore, 64);
  op.res_y = static_cast<const float*>(d_res_y.data());
  op.ld_res_y = 640;
  op.res_weight = static_cast<const float*>(pb.d_norm.data());
  op.y = static_cast<float*>(d_y.data());
  op.ldy = 64;
  op.res_out = static_cast<float*>(pb.d_xf.data()) + 640;  // the second row of xf
  op.ld_res_out = 640;
  Status st = cuda::skinny_gemm(op, nullptr);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("overlap") != std::string::npos);
  op.res_out = static_cast<float*>(d_res_y.data());
  st = cuda::skinny_gemm(op, nullptr);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  op.res_out = nullptr;
  op.res_y = nullptr;
  st = cuda::skinny_gemm(op, nullptr);
  CHECK(st.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("skinny gemm: refusals name the problem and launch nothing") {
  // The checks run on the host before any launch: they hold on a machine
  // without a GPU too. A build without CUDA refuses everything.
  cuda::SkinnyGemmOp op;
  op.rows = 9;
  op.n_out = 8;
  op.k = 64;
#if FLASHSCOPE_WITH_CUDA
  CHECK(cuda::skinny_gemm_supported(1, 576));
  CHECK(cuda::skinny_gemm_supported(8, 3072));
  CHECK_FALSE(cuda::skinny_gemm_supported(8, 3080));  // 8 rows of 3080 bf16 > 48 KiB
  CHECK_FALSE(cuda::skinny_gemm_supported(9, 64));
  CHECK_FALSE(cuda::skinny_gemm_supported(1, 60));    // not a multiple of 8

  const Status many = cuda::skinny_gemm(op, nullptr);
  CHECK(many.code() == StatusCode::kUnsupported);
  CHECK(many.message().find("at most 8 rows") != std::string::npos);
  op.rows = 1;
  op.k = 60;
  CHECK(cuda::skinny_gemm(op, nullptr).code() == StatusCode::kInvalidArgument);
  op.k = 64;
  const Status no_w = cuda::skinny_gemm(op, nullptr);
  CHECK(no_w.code() == StatusCode::kInvalidArgument);
  CHECK(no_w.message().find("w must be") != std::string::npos);
  op.w = reinterpret_cast<const uint16_t*>(uintptr_t{256});  // never dereferenced: x is missing
  op.output = cuda::SkinnyOutput::kStore;
  const Status no_x = cuda::skinny_gemm(op, nullptr);
  CHECK(no_x.code() == StatusCode::kInvalidArgument);
  CHECK(no_x.message().find("x must be") != std::string::npos);
  // The RoPE epilogue rotates adjacent pairs only: NeoX pairs, biases and
  // q/k norms go through rope_append (never dereferenced: refused first).
  const auto fake = [](uintptr_t at) { return reinterpret_cast<uint16_t*>(at); };
  op.x = fake(512);
  op.ldx = 64;
  op.output = cuda::SkinnyOutput::kRopeAppend;
  op.rope.q_heads = 1;
  op.rope.kv_heads = 1;
  op.rope.head_dim = 8;
  op.rope.rope_dim = 8;
  op.rope.page_size = 16;
  op.rope.rope_cos = op.rope.rope_sin = reinterpret_cast<const float*>(uintptr_t{1024});
  op.rope.slots = reinterpret_cast<const int64_t*>(uintptr_t{1024});
  op.rope.q_out = fake(1024);
  op.rope.q_stride = 8;
  op.rope.k_pages = op.rope.v_pages = fake(1024);
  op.n_out = 24;
  op.rope.neox = true;
  const Status neox = cuda::skinny_gemm(op, nullptr);
  CHECK(neox.code() == StatusCode::kInvalidArgument);
  CHECK(neox.message().find("rope_append") != std::string::npos);
  op.rope.neox = false;
  op.rope.k_norm = reinterpret_cast<const float*>(uintptr_t{1024});
  CHECK(cuda::skinny_gemm(op, nullptr).code() == StatusCode::kInvalidArgument);
#else
  CHECK(cuda::skinny_gemm(op, nullptr).code() == StatusCode::kUnsupported);
  CHECK_FALSE(cuda::skinny_gemm_supported(1, 576));
#endif
}
