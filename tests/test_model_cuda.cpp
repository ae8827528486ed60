// The CUDA backend of the model (Device::kCuda), from its ops up:
//
//  * ops: embedding, rms_norm, rope_append (RoPE + K/V into pages), swiglu,
//    the cuBLAS GEMM, each against the CPU op or a double sum, outputs
//    poisoned (NaN) first and padding / unused slots checked to stay NaN;
//  * the device sampler against sample() on the host, draw for draw;
//  * synthetic llama models (tests/support/synthetic_llama.hpp; head_dim 64
//    and 128, GQA 1/2/3/8, partial RoPE, tied and untied heads, several
//    weight types) against the float64 reference;
//  * prefill then decode = full recompute; CUDA-graph decode = plain
//    launches; the fused few-token decode step = the cuBLAS one; sequences interleaved and on two threads = each alone;
//    truncate / clear / explicit positions / refused calls;
//  * greedy generation on CUDA and on the CPU against the reference's
//    continuation on a synthetic model whose top-2 gaps are wide;
//  * a SmolLM2-shaped synthetic model (30 layers, 49152 vocabulary) against
//    the reference, and the real SmolLM2-135M (when its GGUF is present)
//    against HF transformers' logits and the CPU backend, with a greedy
//    continuation printed;
//  * batched decode (Model::forward_batch over the model's shared KV page
//    pool: one GEMM per weight with M = batch, one paged attention launch per
//    layer): rows against each sequence's own step, batch graphs replayed, a
//    batch of two chunks, the pool growing under live sequences, refused
//    batches; the batched device sampler against sample(); Session and
//    BatchGenerator sampling on the device; generate_batch's greedy replies
//    against Session::generate's (a well-separated fixture, and SmolLM2).
//
// Bounds (fractions of the reference logits' RMS). The CUDA backend rounds
// weights, GEMM inputs, q/k/v, attention probabilities and outputs to bf16
// and accumulates in fp32. tests/support/llama_reference.hpp can round the
// same values in its float64 pass; that model of the backend, against the
// exact reference, gives on the synthetic variants below (37 positions ×
// vocab, 4 prompts each): max 2.1-3.9%, RMS 0.46-0.80%; 70 and 600 tokens:
// max 2.7% / 3.5%, RMS 0.62% / 0.56%; on the SmolLM2-shaped model (8
// positions × 49152): max 5.6-6.7%, RMS 1.07-1.18%. The bounds are about
// twice that: kCudaBounds {max 7%, RMS 1.5%}, kDeepBounds {14%, 2.5%}. (The
// CPU backend, with Q8 activations, shows max 5-8% / RMS 1.2-1.6% on the
// small ones and 13% / 2.6% on the deep one.) Bugs are far outside: the
// same model with RoPE base × 1.5 gives max 21-40% / RMS 3.5-6%, a
// permuted kv-head order max > 200%.
// Paths of the CUDA backend that differ only in tiling (prefill vs decode,
// a truncated re-run) round P and o differently; the model says such a
// change alone moves logits by max ~2% / RMS ~0.45%, within kCudaBounds.
//
// Without a CUDA device every GPU case says it was skipped and passes (CI
// has none); the CPU halves of the greedy test still run.
// On the GPU machine: flashscope-tests -tc="cuda model*"
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/model_ops.hpp"
#include "backends/cuda/model_ops_cuda.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "flashscope/model.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "support/gpu.hpp"
#include "support/llama_reference.hpp"
#include "support/model_path.hpp"
#include "support/q8_steps.hpp"
#include "support/random.hpp"
#include "support/json_fixture.hpp"
#include "support/synthetic_llama.hpp"

using namespace flashscope;
using flashscope::testing::compare_logits;
using flashscope::testing::LogitError;
using flashscope::testing::RefModel;
using flashscope::testing::SyntheticLlama;

using flashscope::testing::download;
using flashscope::testing::poisoned;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::upload;

namespace {

struct Bounds {
  double max_rel, rms_rel;
};
constexpr Bounds kCudaBounds = {0.07, 0.015};
constexpr Bounds kDeepBounds = {0.14, 0.025};

// The mechanics tests compare two paths of the engine (prefill against
// decode, kLast against kAll, batch rows against single steps) to bf16
// rounding, which holds where both paths compute the same products: they
// keep one-row steps over quantized weights on the tensor-core tiles. The
// default int8 GEMV on one-row steps rounds its inputs to int8 instead
// (a few % of the logits' RMS on these random models); its accuracy is
// tests/test_model_cuda_quant.cpp's, with bounds derived from that rounding.
class TileSteps : public flashscope::testing::ScopedQ8Rows {
 public:
  TileSteps() : ScopedQ8Rows(0) {}
};

constexpr uint16_t kNaN16 = 0xFFFF;  // NaN in bf16 (what poisoned buffers hold)

using flashscope::testing::random_ids;

Model load(const std::vector<uint8_t>& bytes, Device device, WeightFormat weights = WeightFormat::kQuantized) {
  auto file = GgufFile::from_buffer(bytes);
  REQUIRE_MESSAGE(file.ok(), file.status().to_string());
  ModelOptions o;
  o.device = device;
  o.weights = weights;
  auto model = Model::from_gguf(std::move(file).value(), o);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

std::vector<float> run_all(const Model& m, const std::vector<int32_t>& ids) {
  auto seq = m.new_sequence();
  REQUIRE_MESSAGE(seq.ok(), seq.status().to_string());
  std::vector<float> logits;
  const Status s = m.forward(*seq, ids, {}, LogitsMode::kAll, &logits);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return logits;
}

double rms(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  return std::sqrt(ss / static_cast<double>(v.size()));
}

// max |a - b| over a's size (NaN → infinity); b points at as many values.
double max_abs_diff(const std::vector<float>& a, const float* b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    m = std::max(m, std::isfinite(d) ? d : std::numeric_limits<double>::infinity());
  }
  return m;
}

// |got - want| within one bf16 step of want (a bf16 rounding of two fp32
// values that differ in their last bits may land one step apart).
bool within_bf16_step(float got, float want) {
  if (std::isnan(got) || std::isnan(want)) return false;
  return std::fabs(got - want) <= std::fabs(want) * 0x1.0p-7f + 1e-30f;
}

void check_bounds(const LogitError& e, Bounds b) {
  CHECK(e.rel() <= b.max_rel);
  CHECK(e.rms_rel() <= b.rms_rel);
}

// The shared synthetic variants (tests/support/synthetic_llama.hpp).
using Variant = flashscope::testing::SyntheticVariant;
std::vector<Variant> variants() { return flashscope::testing::synthetic_variants(); }

// The SmolLM2-135M shape with random Q4_1 / Q8_0 blocks (~98 MB).
SyntheticLlama smollm2_shaped() {
  SyntheticLlama s;
  s.n_layers = 30;
  s.hidden = 576;
  s.n_heads = 9;
  s.n_kv_heads = 3;
  s.head_dim = 64;
  s.rope_dim = 64;
  s.ffn = 1536;
  s.vocab = 49152;
  s.context = 8192;
  s.rope_base = 100000.0f;
  s.seed = 9;
  return s;
}

}  // namespace

// --- without a device ---------------------------------------------------------------

TEST_CASE("cuda model: Device::kCuda is refused cleanly without a device or a CUDA build") {
  if (cuda_available()) {
    MESSAGE("a CUDA device is present: the refusal cannot happen here");
    return;
  }
  auto file = GgufFile::from_buffer(SyntheticLlama{}.build());
  REQUIRE(file.ok());
  ModelOptions o;
  o.device = Device::kCuda;
  const auto model = Model::from_gguf(std::move(file).value(), o);
  CHECK(model.status().code() == StatusCode::kUnsupported);
  CHECK(model.status().message().find("CUDA") != std::string::npos);
}

// --- ops ----------------------------------------------------------------------------

TEST_CASE("cuda model ops: embedding gathers bf16 rows, zero rows for bad ids") {
  if (skip_without_gpu()) return;
  const int vocab = 37, hidden = 96;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> table(static_cast<size_t>(vocab * hidden));
  for (uint16_t& t : table) t = float_to_bf16(normal(rng));
  const std::vector<int32_t> ids = {0, 36, 5, 5, -1, 37};
  const int n = static_cast<int>(ids.size());
  DeviceBuffer d_table = upload(table), d_ids = upload(ids), d_x = poisoned(static_cast<size_t>(n * hidden) * 4);
  cuda::EmbeddingOp op;
  op.ids = static_cast<const int32_t*>(d_ids.data());
  op.table = static_cast<const uint16_t*>(d_table.data());
  op.x = static_cast<float*>(d_x.data());
  op.n = n;
  op.hidden = hidden;
  op.vocab = vocab;
  const Status st = cuda::embedding(op, nullptr);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  const auto x = download<float>(d_x, static_cast<size_t>(n * hidden));
  int bad = 0;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < hidden; ++i) {
      const int32_t id = ids[static_cast<size_t>(t)];
      const float want = id >= 0 && id < vocab ? bf16_to_float(table[static_cast<size_t>(id * hidden + i)]) : 0.0f;
      bad += x[static_cast<size_t>(t * hidden + i)] != want;
    }
  }
  CHECK_MESSAGE(bad == 0, bad, " elements differ");
  op.x = nullptr;
  CHECK(cuda::embedding(op, nullptr).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("cuda model ops: rms_norm and swiglu match the CPU ops, padding untouched") {
  if (skip_without_gpu()) return;
  std::mt19937_64 rng(2);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);

  struct NormShape {
    int rows, dim;
    int64_t x_stride, y_stride;
  };
  for (const NormShape& s : {NormShape{1, 64, 64, 64}, NormShape{7, 576, 600, 584}, NormShape{3, 1000, 1000, 1008}}) {
    CAPTURE(s.rows);
    CAPTURE(s.dim);
    std::vector<float> x(static_cast<size_t>(s.rows * s.x_stride)), w(static_cast<size_t>(s.dim));
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = uni(rng);
    DeviceBuffer d_x = upload(x), d_w = upload(w), d_y = poisoned(static_cast<size_t>(s.rows * s.y_stride) * 2);
    cuda::RmsNormOp op;
    op.x = static_cast<const float*>(d_x.data());
    op.x_stride = s.x_stride;
    op.weight = static_cast<const float*>(d_w.data());
    op.y = static_cast<uint16_t*>(d_y.data());
    op.y_stride = s.y_stride;
    op.rows = s.rows;
    op.dim = s.dim;
    op.eps = 1e-5f;
    const Status st = cuda::rms_norm(op, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    const auto y = download<uint16_t>(d_y, static_cast<size_t>(s.rows * s.y_stride));
    int bad = 0, padding_written = 0;
    std::vector<float> want(static_cast<size_t>(s.dim));
    for (int r = 0; r < s.rows; ++r) {
      cpu::rms_norm(x.data() + r * s.x_stride, w.data(), want.data(), 1, s.dim, 1e-5f);
      for (int i = 0; i < s.dim; ++i)
        bad += !within_bf16_step(bf16_to_float(y[static_cast<size_t>(r * s.y_stride + i)]), want[static_cast<size_t>(i)]);
      for (int64_t i = s.dim; i < s.y_stride; ++i) padding_written += y[static_cast<size_t>(r * s.y_stride + i)] != kNaN16;
    }
    CHECK_MESSAGE(bad == 0, bad, " outputs off by more than a bf16 step");
    CHECK_MESSAGE(padding_written == 0, "rms_norm wrote past dim in ", padding_written, " places");
  }

  const int rows = 5, ffn = 200;
  const int64_t gu_stride = 2 * ffn + 8, out_stride = ffn + 8;
  std::vector<float> gu(static_cast<size_t>(rows * gu_stride));
  for (float& v : gu) v = normal(rng);
  DeviceBuffer d_gu = upload(gu), d_out = poisoned(static_cast<size_t>(rows * out_stride) * 2);
  cuda::SwigluOp op;
  op.gu = static_cast<const float*>(d_gu.data());
  op.gu_stride = gu_stride;
  op.out = static_cast<uint16_t*>(d_out.data());
  op.out_stride = out_stride;
  op.rows = rows;
  op.ffn = ffn;
  const Status st = cuda::swiglu(op, nullptr);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  const auto out = download<uint16_t>(d_out, static_cast<size_t>(rows * out_stride));
  int bad = 0, padding_written = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> g(gu.begin() + r * gu_stride, gu.begin() + r * gu_stride + ffn);
    cpu::swiglu(g.data(), gu.data() + r * gu_stride + ffn, ffn);
    for (int i = 0; i < ffn; ++i)
      bad += !within_bf16_step(bf16_to_float(out[static_cast<size_t>(r * out_stride + i)]), g[static_cast<size_t>(i)]);
    for (int64_t i = ffn; i < out_stride; ++i) padding_written += out[static_cast<size_t>(r * out_stride + i)] != kNaN16;
  }
  CHECK_MESSAGE(bad == 0, bad, " swiglu outputs off by more than a bf16 step");
  CHECK_MESSAGE(padding_written == 0, "swiglu wrote past ffn in ", padding_written, " places");
}

TEST_CASE("cuda model ops: rope_append rotates q and k like the CPU and writes K/V only at their slots") {
  if (skip_without_gpu()) return;
  struct Shape {
    int q_heads, kv_heads, head_dim, rope_dim, page_size;
  };
  const Shape shapes[] = {{4, 2, 64, 64, 16}, {9, 3, 64, 64, 64}, {8, 1, 128, 128, 32}, {6, 2, 128, 64, 16}};
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    INFO("H ", s.q_heads, " KV ", s.kv_heads, " D ", s.head_dim, " rope_dim ", s.rope_dim, " page ", s.page_size);
    const int n = 7, num_pages = 4;
    const int H = s.q_heads, KV = s.kv_heads, D = s.head_dim, half = s.rope_dim / 2;
    const int64_t row = int64_t(H + 2 * KV) * D, qkv_stride = row + 4, q_stride = int64_t(H) * D + 8;
    std::vector<float> qkv(static_cast<size_t>(n * qkv_stride));
    for (float& v : qkv) v = normal(rng);
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 5000);
    // Distinct slots across pages, one skipped (-1), one past the pool.
    const int64_t pool_slots = int64_t(num_pages) * s.page_size;
    std::vector<int64_t> slots = {3, pool_slots - 1, int64_t(s.page_size) + 5, -1, 2 * int64_t(s.page_size), pool_slots + 3, 0};
    std::vector<float> cos_t(static_cast<size_t>(n * std::max(half, 1))), sin_t(cos_t.size());
    cpu::rope_table(positions.data(), n, s.rope_dim, 10000.0f, cos_t.data(), sin_t.data());

    const size_t pool = static_cast<size_t>(pool_slots) * KV * D;
    DeviceBuffer d_qkv = upload(qkv), d_cos = upload(cos_t), d_sin = upload(sin_t), d_slots = upload(slots);
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
    op.rope_dim = s.rope_dim;
    op.page_size = s.page_size;
    op.num_pages = num_pages;
    const Status st = cuda::rope_append(op, nullptr);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    const auto q = download<uint16_t>(d_q, static_cast<size_t>(n * q_stride));
    const auto k = download<uint16_t>(d_k, pool);
    const auto v = download<uint16_t>(d_v, pool);

    // Expected: the CPU rope on each token's q and k.
    std::vector<float> want_q, want_k;
    std::vector<bool> written(pool, false);
    int q_bad = 0, k_bad = 0, v_bad = 0, q_padding = 0;
    for (int t = 0; t < n; ++t) {
      const float* r = qkv.data() + t * qkv_stride;
      want_q.assign(r, r + int64_t(H) * D);
      want_k.assign(r + int64_t(H) * D, r + int64_t(H + KV) * D);
      cpu::rope_pairs(want_q.data(), 1, H, D, s.rope_dim, cos_t.data() + t * half, sin_t.data() + t * half);
      cpu::rope_pairs(want_k.data(), 1, KV, D, s.rope_dim, cos_t.data() + t * half, sin_t.data() + t * half);
      for (int64_t i = 0; i < int64_t(H) * D; ++i)
        q_bad += !within_bf16_step(bf16_to_float(q[static_cast<size_t>(t * q_stride + i)]), want_q[static_cast<size_t>(i)]);
      for (int64_t i = int64_t(H) * D; i < q_stride; ++i) q_padding += q[static_cast<size_t>(t * q_stride + i)] != kNaN16;
      const int64_t slot = slots[static_cast<size_t>(t)];
      if (slot < 0 || slot >= pool_slots) continue;
      const int64_t page = slot / s.page_size, off = slot % s.page_size;
      for (int h = 0; h < KV; ++h) {
        for (int d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>(((page * KV + h) * s.page_size + off) * D + d);
          written[at] = true;
          k_bad += !within_bf16_step(bf16_to_float(k[at]), want_k[static_cast<size_t>(h * D + d)]);
          v_bad += v[at] != float_to_bf16(r[int64_t(H + KV) * D + h * D + d]);
        }
      }
    }
    int stray = 0;
    for (size_t i = 0; i < pool; ++i) stray += !written[i] && (k[i] != kNaN16 || v[i] != kNaN16);
    CHECK_MESSAGE(q_bad == 0, q_bad, " q values differ from the CPU rope by more than a bf16 step");
    CHECK_MESSAGE(k_bad == 0, k_bad, " K values differ from the CPU rope by more than a bf16 step");
    CHECK_MESSAGE(v_bad == 0, v_bad, " V values are not bf16(v)");
    CHECK_MESSAGE(q_padding == 0, "q written past H·D in ", q_padding, " places");
    CHECK_MESSAGE(stray == 0, stray, " page elements written outside the tokens' slots (skipped and out-of-pool slots included)");
  }
}

TEST_CASE("cuda model ops: the bf16 GEMM against a double sum, strided, with and without accumulate") {
  if (skip_without_gpu()) return;
  auto handle = cuda::CublasHandle::create();
  REQUIRE_MESSAGE(handle.ok(), handle.status().to_string());
  REQUIRE(handle->bind(nullptr, nullptr, 0).ok());
  struct Shape {
    int rows, n_out, k;
    int64_t ldx, ldy;
    bool accumulate;
  };
  const Shape shapes[] = {{1, 960, 576, 576, 960, false},  // SmolLM2's QKV in decode
                          {37, 100, 64, 72, 104, false},   // strided rows
                          {5, 3072, 576, 576, 3080, true}, // gate/up, accumulating
                          {130, 576, 1536, 1536, 576, true}};
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    INFO("rows ", s.rows, " n_out ", s.n_out, " k ", s.k, " ldx ", s.ldx, " ldy ", s.ldy, " accumulate ", s.accumulate);
    std::vector<uint16_t> w(static_cast<size_t>(s.n_out) * s.k), x(static_cast<size_t>(s.rows * s.ldx));
    for (uint16_t& v : w) v = float_to_bf16(normal(rng));
    for (uint16_t& v : x) v = float_to_bf16(normal(rng));
    std::vector<float> y0(static_cast<size_t>(s.rows * s.ldy), std::numeric_limits<float>::quiet_NaN());
    for (int r = 0; r < s.rows; ++r)
      for (int c = 0; c < s.n_out; ++c) y0[static_cast<size_t>(r * s.ldy + c)] = s.accumulate ? normal(rng) : std::numeric_limits<float>::quiet_NaN();
    DeviceBuffer d_w = upload(w), d_x = upload(x), d_y = upload(y0);
    cuda::GemmOp op;
    op.w = static_cast<const uint16_t*>(d_w.data());
    op.x = static_cast<const uint16_t*>(d_x.data());
    op.y = static_cast<float*>(d_y.data());
    op.rows = s.rows;
    op.n_out = s.n_out;
    op.k = s.k;
    op.ldx = s.ldx;
    op.ldy = s.ldy;
    op.accumulate = s.accumulate;
    const Status st = cuda::gemm_bf16(handle->get(), op);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    const auto y = download<float>(d_y, y0.size());
    int bad = 0, padding_written = 0;
    double worst = 0;
    for (int r = 0; r < s.rows; ++r) {
      for (int c = 0; c < s.n_out; ++c) {
        double acc = s.accumulate ? y0[static_cast<size_t>(r * s.ldy + c)] : 0.0, mag = 0;
        for (int i = 0; i < s.k; ++i) {
          const double p = static_cast<double>(bf16_to_float(w[static_cast<size_t>(c) * s.k + i])) *
                           bf16_to_float(x[static_cast<size_t>(r * s.ldx + i)]);
          acc += p;
          mag += std::fabs(p);
        }
        const double err = std::fabs(y[static_cast<size_t>(r * s.ldy + c)] - acc);
        // fp32 accumulation of k products: well under 1e-4 of their magnitude.
        bad += !(err <= 1e-4 * mag + 1e-6);
        worst = std::max(worst, err / mag);
      }
      for (int64_t c = s.n_out; c < s.ldy; ++c) padding_written += !std::isnan(y[static_cast<size_t>(r * s.ldy + c)]);
    }
    CHECK_MESSAGE(bad == 0, bad, " outputs off (worst relative error ", worst, ")");
    CHECK_MESSAGE(padding_written == 0, "the GEMM wrote past n_out in ", padding_written, " places");
  }
}

// --- the sampler --------------------------------------------------------------------------

TEST_CASE("cuda model sampling: the device sampler picks what sample() picks, draw for draw") {
  if (skip_without_gpu()) return;
  struct Case {
    const char* name;
    int vocab;
    SamplingParams params;
    int finite_every;  // 0: all finite; k: only every k-th logit finite (the rest -inf or NaN); -1: none
    bool ties;          // logits on a 0.5 grid: many equal values
    std::vector<int32_t> recent;
    size_t generated = std::numeric_limits<size_t>::max();  // the penalties' tail of recent
    std::vector<int32_t> top_ties = {100, 200};  // greedy with ties: these ids share the top logit
    bool boost_recent = false;  // recent ids' logits + 12: the penalized ids are the contenders
  };
  auto params = [](float t, int k, float p, float min_p, float rep = 1.0f, float presence = 0.0f,
                   float frequency = 0.0f) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = min_p;
    s.repetition_penalty = rep;
    s.presence_penalty = presence;
    s.frequency_penalty = frequency;
    return s;
  };
  std::vector<int32_t> recent = random_ids(80, 1000, 9);
  recent.push_back(-3);
  recent.push_back(5000);
  // Gemma 3's vocabulary: a row split over many CTAs (sampling.cu), each
  // case below against the host; penalties on ids spread over the slices,
  // ties at the top and at the top-k threshold in different slices.
  constexpr int kBig = 262144;
  std::vector<int32_t> recent_big = random_ids(200, kBig, 13);
  recent_big.push_back(-1);
  recent_big.push_back(kBig);
  recent_big.push_back(kBig - 1);
  recent_big.push_back(0);
  const Case cases[] = {
      {"greedy, 262144", kBig, params(0.0f, 40, 0.95f, 0.05f), 0, false, {}},
      {"greedy with ties in far-apart slices, 262144", kBig, params(0.0f, 0, 1.0f, 0.0f), 0, true, {},
       std::numeric_limits<size_t>::max(), {250000, 131073, 4097, 200000}},
      {"greedy, every logit NaN or -inf, 262144", kBig, params(0.0f, 0, 1.0f, 0.0f), -1, false, {}},
      {"greedy, one finite logit in 20000, 262144", kBig, params(0.0f, 0, 1.0f, 0.0f), 20000, false, {}},
      {"the CLI's defaults, 262144", kBig, params(0.7f, 40, 0.95f, 0.05f), 0, false, {}},
      {"top-k at the cap (1024), T 1.3, top-p 0.9, 262144", kBig, params(1.3f, 1024, 0.9f, 0.0f), 0, false, {}},
      {"top-k 1, 262144", kBig, params(1.0f, 1, 1.0f, 0.0f), 0, false, {}},
      {"ties on a 0.5 grid, top-k 50, top-p 0.8, 262144", kBig, params(1.0f, 50, 0.8f, 0.0f), 0, true, {}},
      {"ties on a 0.5 grid, top-k 1000, min-p 0.01, 262144", kBig, params(0.8f, 1000, 1.0f, 0.01f), 0, true, {}},
      {"non-finite logits (NaN, -inf), top-k 100, 262144", kBig, params(1.0f, 100, 1.0f, 0.0f), 3, false, {}},
      {"fewer finite logits than top-k (14 of 262144), top-k 40", kBig, params(1.0f, 40, 0.9f, 0.0f), 20000, false, {}},
      {"repetition, presence and frequency penalties over 262144", kBig,
       params(0.9f, 40, 0.95f, 0.0f, 1.3f, 0.8f, 0.5f), 0, false, recent_big, 120, {}, true},
      {"greedy with repetition, presence and frequency penalties over 262144", kBig,
       params(0.0f, 0, 1.0f, 0.0f, 1.5f, 1.5f, 0.7f), 0, false, recent_big, 120, {}, true},
      {"top-k 0 over 262144: the host fallback", kBig, params(0.8f, 0, 0.9f, 0.0f), 0, false, {}},
      {"greedy, 49152", 49152, params(0.0f, 40, 0.95f, 0.05f), 0, false, {}},
      {"the CLI's defaults (T 0.7, top-k 40, top-p 0.95, min-p 0.05)", 49152, params(0.7f, 40, 0.95f, 0.05f), 0, false, {}},
      {"top-k at the cap (1024), T 1.3, top-p 0.9", 49152, params(1.3f, 1024, 0.9f, 0.0f), 0, false, {}},
      {"no top-k over a small vocabulary (keeps all 1000)", 1000, params(0.7f, 0, 1.0f, 0.0f), 0, false, {}},
      {"ties on a 0.5 grid, top-k 50, top-p 0.8", 5000, params(1.0f, 50, 0.8f, 0.0f), 0, true, {}},
      {"greedy with ties", 5000, params(0.0f, 0, 1.0f, 0.0f), 0, true, {}},
      {"repetition penalty 1.3 over the last 64 (duplicates, out-of-range ids)", 1000, params(0.9f, 20, 1.0f, 0.0f, 1.3f), 0,
       false, recent},
      {"greedy with repetition penalty", 1000, params(0.0f, 0, 1.0f, 0.0f, 1.3f), 0, false, recent},
      {"non-finite logits (NaN, -inf), top-k 100", 300, params(1.0f, 100, 1.0f, 0.0f), 3, false, {}},
      {"fewer finite logits than top-k", 200, params(1.0f, 40, 0.9f, 0.0f), 40, false, {}},
      {"top-k 0 over 49152: the host fallback", 49152, params(0.8f, 0, 0.9f, 0.0f), 0, false, {}},
  };
  cuda::SampleScratch scratch;
  for (const Case& c : cases) {
    INFO("case: ", c.name);
    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(c.vocab));
    for (size_t i = 0; i < logits.size(); ++i) {
      float l = normal(rng);
      if (c.ties) l = std::round(l * 2.0f) / 2.0f;
      if (c.finite_every < 0 || (c.finite_every > 0 && i % static_cast<size_t>(c.finite_every) != 0))
        l = i % 2 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
      logits[i] = l;
    }
    if (c.params.temperature <= 0.0f && c.ties) {  // a tie at the top: the lowest id wins
      const float top = *std::max_element(logits.begin(), logits.end());
      for (int32_t id : c.top_ties) logits[static_cast<size_t>(id)] = top + 1.0f;
    }
    if (c.boost_recent) {
      for (int32_t id : c.recent)
        if (id >= 0 && id < c.vocab) logits[static_cast<size_t>(id)] += 12.0f;
    }
    int mismatches = 0, rng_mismatches = 0;
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      DeviceBuffer d = upload(logits);  // fresh: the sampler works in place
      Rng device_rng(seed), host_rng(seed);
      auto got = cuda::sample_row(static_cast<float*>(d.data()), c.vocab, c.params, device_rng, c.recent, scratch, nullptr,
                                  c.generated);
      REQUIRE_MESSAGE(got.ok(), got.status().to_string());
      const int32_t want = sample(logits, c.params, host_rng, c.recent, c.generated);
      if (got.value() != want) {
        ++mismatches;
        MESSAGE("seed ", seed, ": device ", got.value(), ", host ", want);
      }
      rng_mismatches += device_rng.next_u64() != host_rng.next_u64();
    }
    CHECK(mismatches == 0);
    CHECK_MESSAGE(rng_mismatches == 0, "the device path consumed a different number of draws");
  }

  // The 262144-entry cases above ran split over CTAs: they were given a workspace.
  CHECK(cuda::sample_workspace_bytes(kBig, 1, 0) > 0);
  CHECK(cuda::sample_workspace_bytes(kBig, 1, cuda::max_sample_candidates()) > 0);

  // sample() itself: without a workspace one CTA reads the row, with one
  // the row is split; both pick the host's token, and the split launch
  // leaves its workspace ready for the next (three in a row on one).
  {
    std::mt19937_64 gen(3);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> big(static_cast<size_t>(kBig));
    for (float& l : big) l = std::round(normal(gen) * 4.0f) / 4.0f;  // ties
    const SamplingParams modes[] = {params(0.0f, 0, 1.0f, 0.0f), params(0.7f, 40, 0.95f, 0.05f),
                                    params(1.2f, 1024, 0.9f, 0.0f)};
    size_t ws_bytes = 0;  // enough for each mode's split
    for (const SamplingParams& mode : modes)
      ws_bytes = std::max(ws_bytes, cuda::sample_workspace_bytes(kBig, 1, mode.temperature > 0.0f ? mode.top_k : 0));
    auto ws = DeviceBuffer::allocate(ws_bytes);
    REQUIRE(ws.ok());
    REQUIRE(ws->fill_bytes(0).ok());
    DeviceBuffer token = poisoned(16);
    for (const SamplingParams& mode : modes) {
      for (bool split : {false, true}) {
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          CAPTURE(mode.temperature);
          CAPTURE(split);
          CAPTURE(seed);
          DeviceBuffer d = upload(big);
          Rng device_rng(seed), host_rng(seed);
          cuda::SampleOp op;
          op.logits = static_cast<float*>(d.data());
          op.vocab = kBig;
          op.params = mode;
          op.uniform = mode.temperature > 0.0f ? device_rng.uniform() : 0.0;
          op.token_out = static_cast<int32_t*>(token.data());
          if (split) op.workspace = ws->data(), op.workspace_bytes = ws->size();
          REQUIRE(cuda::sample(op, nullptr).ok());
          CHECK(download<int32_t>(token, 1)[0] == sample(big, mode, host_rng, {}));
        }
      }
    }
  }

  // The op itself refuses more candidates than it can sort.
  DeviceBuffer d = upload(std::vector<float>(49152, 0.0f));
  DeviceBuffer token = poisoned(16);
  cuda::SampleOp op;
  op.logits = static_cast<float*>(d.data());
  op.vocab = 49152;
  op.params.temperature = 1.0f;
  op.params.top_k = 2000;
  op.uniform = 0.5;
  op.token_out = static_cast<int32_t*>(token.data());
  CHECK(cuda::sample(op, nullptr).code() == StatusCode::kUnsupported);
}

// --- synthetic models ----------------------------------------------------------------------

TEST_CASE("cuda model: synthetic models match the float64 reference within bf16 bounds") {
  if (skip_without_gpu()) return;
  for (const Variant& v : variants()) {
    const std::string variant = v.name;
    CAPTURE(variant);
    const auto bytes = v.s.build();
    const std::vector<int32_t> ids = random_ids(37, v.s.vocab, 11);
    const auto ref = testing::reference_forward(testing::load_reference(bytes), ids);
    const Model cuda_model = load(bytes, Device::kCuda);
    CHECK(cuda_model.device() == Device::kCuda);
    const std::vector<float> got = run_all(cuda_model, ids);
    const LogitError e = compare_logits(got, ref);
    const LogitError vs_cpu = compare_logits(got, run_all(load(bytes, Device::kCpu), ids), static_cast<size_t>(v.s.vocab));
    MESSAGE(variant << ": CUDA vs float64 max " << 100 * e.rel() << "%, RMS " << 100 * e.rms_rel()
                    << "% of logit RMS " << e.ref_rms << ", argmax mismatches " << e.argmax_mismatches << "/"
                    << ids.size() << "; CUDA vs CPU max " << 100 * vs_cpu.rel() << "%, RMS " << 100 * vs_cpu.rms_rel()
                    << "%");
    check_bounds(e, kCudaBounds);
  }
}

TEST_CASE("cuda model: a prompt longer than one chunk (512) matches the reference, kAll and kLast") {
  if (skip_without_gpu()) return;
  const TileSteps tiles;
  SyntheticLlama s;
  s.context = 1024;
  const auto bytes = s.build();
  const std::vector<int32_t> ids = random_ids(600, s.vocab, 5);
  const auto ref = testing::reference_forward(testing::load_reference(bytes), ids);
  const Model model = load(bytes, Device::kCuda);
  const std::vector<float> all = run_all(model, ids);
  const LogitError e = compare_logits(all, ref);
  MESSAGE("600 tokens: max " << 100 * e.rel() << "%, RMS " << 100 * e.rms_rel() << "% of logit RMS");
  check_bounds(e, kCudaBounds);

  auto seq = model.new_sequence();
  REQUIRE(seq.ok());
  std::vector<float> last;
  REQUIRE(model.forward(*seq, ids, {}, LogitsMode::kLast, &last).ok());
  REQUIRE(last.size() == 100);
  // The same layers; only the LM head runs 1 row instead of a 64-row block.
  const double diff = max_abs_diff(last, all.data() + all.size() - 100);
  CHECK_MESSAGE(diff <= 1e-3 * rms(all), "kLast vs kAll's last row: ", diff);
}

TEST_CASE("cuda model: prefill then decode gives the logits of a full recompute (decode from CUDA graphs)") {
  if (skip_without_gpu()) return;
  const TileSteps tiles;
  const auto vs = variants();
  for (const Variant* v : {&vs[0], &vs[1]}) {
    const std::string variant = v->name;
    CAPTURE(variant);
    const Model model = load(v->s.build(), Device::kCuda);
    const std::vector<int32_t> ids = random_ids(70, v->s.vocab, 21);
    const size_t V = static_cast<size_t>(v->s.vocab);
    const std::vector<float> full = run_all(model, ids);
    const double full_rms = rms(full);
    for (const std::vector<int>& pieces : {std::vector<int>{10}, std::vector<int>{3, 29, 5}}) {
      const model::CudaForwardStats before = model::cuda_total_stats();
      auto seq = model.new_sequence();
      REQUIRE(seq.ok());
      std::vector<float> logits, decoded;
      size_t done = 0;
      for (int p : pieces) {
        const std::vector<int32_t> part(ids.begin() + static_cast<long>(done), ids.begin() + static_cast<long>(done + p));
        const Status st = model.forward(*seq, part, {}, LogitsMode::kLast, &logits);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        done += static_cast<size_t>(p);
      }
      const size_t first = done;
      for (; done < ids.size(); ++done) {
        const Status st = model.forward(*seq, {ids[done]}, {}, LogitsMode::kLast, &logits);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        decoded.insert(decoded.end(), logits.begin(), logits.end());
      }
      CHECK(seq->n_tokens() == 70);
      CHECK(seq->tokens() == ids);
      const std::vector<float> want(full.begin() + static_cast<long>(first * V), full.end());
      const LogitError e = compare_logits(decoded, want, V);
      const model::CudaForwardStats after = model::cuda_total_stats();
      const uint64_t steps = ids.size() - first;
      MESSAGE(variant << ", prefill " << first << " then " << steps << " decode steps: max " << 100 * e.max_abs / full_rms
                      << "%, RMS " << 100 * e.rms_abs / full_rms << "% of logit RMS; graph replays "
                      << after.graph_replays - before.graph_replays << ", captures "
                      << after.graph_captures - before.graph_captures << ", capture failures "
                      << after.graph_capture_failures - before.graph_capture_failures);
      CHECK(e.max_abs <= kCudaBounds.max_rel * full_rms);
      CHECK(e.rms_abs <= kCudaBounds.rms_rel * full_rms);
      CHECK(after.decode_steps - before.decode_steps == steps);
      // The first decode step runs plainly (warm-up), the second is captured
      // and every later one replays it (kv_len stays in the 256 bucket).
      CHECK_MESSAGE(after.graph_capture_failures == before.graph_capture_failures,
                    "graph capture failed: ", after.last_capture_error);
      CHECK(after.graph_replays - before.graph_replays == steps - 1);
      CHECK(after.graph_captures - before.graph_captures == 1);
    }
  }
}

TEST_CASE("cuda model: decode replayed from a CUDA graph gives the logits of plain launches") {
  if (skip_without_gpu()) return;
  const auto bytes = variants()[4].s.build();  // 9 q-heads over 3
  ::setenv("FLASHSCOPE_CUDA_GRAPHS", "0", 1);
  const Model plain = load(bytes, Device::kCuda);
  ::unsetenv("FLASHSCOPE_CUDA_GRAPHS");
  const Model graphed = load(bytes, Device::kCuda);
  const std::vector<int32_t> ids = random_ids(52, 300, 8);
  const int prompt = 12;

  auto run = [&](const Model& m, model::CudaForwardStats* delta) {
    const model::CudaForwardStats before = model::cuda_total_stats();
    auto seq = m.new_sequence(64);
    REQUIRE(seq.ok());
    std::vector<float> logits, out;
    REQUIRE(m.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kLast, &logits).ok());
    for (size_t i = prompt; i < ids.size(); ++i) {
      const Status st = m.forward(*seq, {ids[i]}, {}, LogitsMode::kLast, &logits);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      out.insert(out.end(), logits.begin(), logits.end());
    }
    const model::CudaForwardStats after = model::cuda_total_stats();
    delta->graph_replays = after.graph_replays - before.graph_replays;
    delta->plain_decode_steps = after.plain_decode_steps - before.plain_decode_steps;
    delta->graph_capture_failures = after.graph_capture_failures - before.graph_capture_failures;
    delta->last_capture_error = after.last_capture_error;
    return out;
  };
  model::CudaForwardStats plain_stats, graph_stats;
  const std::vector<float> a = run(plain, &plain_stats);
  const std::vector<float> b = run(graphed, &graph_stats);
  const uint64_t steps = ids.size() - prompt;
  CHECK(plain_stats.graph_replays == 0);
  CHECK(plain_stats.plain_decode_steps == steps);
  CHECK_MESSAGE(graph_stats.graph_capture_failures == 0, "graph capture failed: ", graph_stats.last_capture_error);
  CHECK(graph_stats.graph_replays == steps - 1);
  // The same kernels with the same parameters: expected bit-equal; 2% of
  // the logit RMS leaves room for a cuBLAS algorithm chosen differently under
  // capture, while stale per-step inputs (an old position or token) move
  // logits by tens of percent.
  const double diff = max_abs_diff(b, a.data());
  MESSAGE("graph vs plain decode over " << steps << " steps: max |diff| " << diff << " (logit RMS " << rms(a) << ")");
  CHECK(diff <= 0.02 * rms(a));
}

TEST_CASE("cuda model: the fused few-token step gives the logits of the cuBLAS step") {
  if (skip_without_gpu()) return;
  const auto vs = variants();
  for (const Variant* v : {&vs[0], &vs[1], &vs[2]}) {
    const std::string variant = v->name;
    CAPTURE(variant);
    const auto bytes = v->s.build();
    // bf16 weights on both sides: the same roundings (test_model_cuda_quant.cpp has the quantized paths).
    ::setenv("FLASHSCOPE_CUDA_SKINNY", "0", 1);
    const Model unfused = load(bytes, Device::kCuda, WeightFormat::kBf16);
    ::unsetenv("FLASHSCOPE_CUDA_SKINNY");
    const Model fused = load(bytes, Device::kCuda, WeightFormat::kBf16);
    const std::vector<int32_t> ids = random_ids(48, v->s.vocab, 77);
    const int prompt = 11;
    auto run = [&](const Model& m, uint64_t* fused_enqueues) {
      const uint64_t before = model::cuda_total_stats().fused_step_enqueues;
      auto seq = m.new_sequence(64);
      REQUIRE(seq.ok());
      std::vector<float> logits, out;
      REQUIRE(m.forward(*seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kLast, &logits)
                  .ok());
      for (size_t i = prompt; i < ids.size(); ++i) {
        const Status st = m.forward(*seq, {ids[i]}, {}, LogitsMode::kLast, &logits);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        out.insert(out.end(), logits.begin(), logits.end());
      }
      *fused_enqueues = model::cuda_total_stats().fused_step_enqueues - before;
      return out;
    };
    uint64_t unfused_enqueues = 0, fused_enqueues = 0;
    const std::vector<float> a = run(unfused, &unfused_enqueues);
    const std::vector<float> b = run(fused, &fused_enqueues);
    CHECK(unfused_enqueues == 0);
    CHECK(fused_enqueues >= 2);  // the plain warm-up step and the captured one (then graph replays)
    // Both paths round the same values to bf16 and sum in fp32, in another
    // order: a few intermediate values round to the neighbouring bf16, which
    // the header's model bounds at max ~2% / RMS ~0.45% of the logit RMS
    // (as for prefill vs decode tilings). A wrong fused op (a RoPE pair, a
    // norm weight, gate and up swapped) moves logits by tens of percent.
    const LogitError e = compare_logits(b, a, static_cast<size_t>(v->s.vocab));
    const double scale = rms(a);
    MESSAGE(variant << ": fused vs cuBLAS decode over " << ids.size() - prompt << " steps: max "
                    << 100 * e.max_abs / scale << "%, RMS " << 100 * e.rms_abs / scale << "% of logit RMS");
    CHECK(e.max_abs <= 0.02 * scale);
    CHECK(e.rms_abs <= 0.005 * scale);
  }
}

TEST_CASE("cuda model: sequences interleaved, and on two threads, get what each gets alone") {
  if (skip_without_gpu()) return;
  const Model model = load(variants()[0].s.build(), Device::kCuda);
  const std::vector<int32_t> a_ids = random_ids(40, 100, 31), b_ids = random_ids(33, 100, 32);
  const int a_prompt = 15, b_prompt = 9;

  // Prefill, then one token at a time; every step's logits, concatenated.
  struct Run {
    Sequence seq;
    std::vector<float> out;
    Status status;
  };
  auto start = [&](Run& r, const std::vector<int32_t>& ids, int prompt) {
    auto seq = model.new_sequence(128);
    if (!seq.ok()) {
      r.status = seq.status();
      return;
    }
    r.seq = std::move(seq).value();
    std::vector<float> logits;
    r.status = model.forward(r.seq, std::vector<int32_t>(ids.begin(), ids.begin() + prompt), {}, LogitsMode::kLast, &logits);
    r.out = logits;
  };
  auto step = [&](Run& r, int32_t id) {
    if (!r.status.ok()) return;
    std::vector<float> logits;
    r.status = model.forward(r.seq, {id}, {}, LogitsMode::kLast, &logits);
    r.out.insert(r.out.end(), logits.begin(), logits.end());
  };
  auto alone = [&](const std::vector<int32_t>& ids, int prompt) {
    Run r;
    start(r, ids, prompt);
    for (size_t i = static_cast<size_t>(prompt); i < ids.size(); ++i) step(r, ids[i]);
    return r;
  };

  const Run a = alone(a_ids, a_prompt), b = alone(b_ids, b_prompt);
  REQUIRE_MESSAGE(a.status.ok(), a.status.to_string());
  REQUIRE_MESSAGE(b.status.ok(), b.status.to_string());
  const double tol = 1e-4 * rms(a.out);  // the same work in the same order: expected bit-equal

  Run ia, ib;
  start(ia, a_ids, a_prompt);
  start(ib, b_ids, b_prompt);
  for (size_t i = 0; i < std::max(a_ids.size() - a_prompt, b_ids.size() - b_prompt); ++i) {
    if (a_prompt + i < a_ids.size()) step(ia, a_ids[a_prompt + i]);
    if (b_prompt + i < b_ids.size()) step(ib, b_ids[b_prompt + i]);
  }
  REQUIRE_MESSAGE(ia.status.ok(), ia.status.to_string());
  REQUIRE_MESSAGE(ib.status.ok(), ib.status.to_string());
  REQUIRE(ia.out.size() == a.out.size());
  REQUIRE(ib.out.size() == b.out.size());
  CHECK_MESSAGE(max_abs_diff(ia.out, a.out.data()) <= tol, "interleaved A: ", max_abs_diff(ia.out, a.out.data()));
  CHECK_MESSAGE(max_abs_diff(ib.out, b.out.data()) <= tol, "interleaved B: ", max_abs_diff(ib.out, b.out.data()));

  // Two threads, one sequence each, the model (and its cuBLAS handle) shared.
  Run ta, tb;
  std::thread t1([&] { ta = alone(a_ids, a_prompt); });
  std::thread t2([&] { tb = alone(b_ids, b_prompt); });
  t1.join();
  t2.join();
  REQUIRE_MESSAGE(ta.status.ok(), ta.status.to_string());
  REQUIRE_MESSAGE(tb.status.ok(), tb.status.to_string());
  REQUIRE(ta.out.size() == a.out.size());
  REQUIRE(tb.out.size() == b.out.size());
  CHECK_MESSAGE(max_abs_diff(ta.out, a.out.data()) <= tol, "thread A: ", max_abs_diff(ta.out, a.out.data()));
  CHECK_MESSAGE(max_abs_diff(tb.out, b.out.data()) <= tol, "thread B: ", max_abs_diff(tb.out, b.out.data()));
}

TEST_CASE("cuda model: explicit positions, truncate, clear, and refused calls that change nothing") {
  if (skip_without_gpu()) return;
  const TileSteps tiles;
  const Model model = load(SyntheticLlama{}.build(), Device::kCuda);
  const std::vector<int32_t> ids = random_ids(16, 100, 2);
  const std::vector<float> full = run_all(model, ids);
  const double full_rms = rms(full);
  auto row = [&](size_t t) { return full.data() + t * 100; };

  auto seq = model.new_sequence(32);
  REQUIRE(seq.ok());
  std::vector<float> logits;
  const std::vector<int32_t> first12(ids.begin(), ids.begin() + 12);
  std::vector<int32_t> pos(12);
  for (int i = 0; i < 12; ++i) pos[static_cast<size_t>(i)] = i;
  REQUIRE(model.forward(*seq, first12, pos, LogitsMode::kLast, &logits).ok());
  // Row 11 of a 12-token prefill against a 16-token one: the same attention
  // per row (one split, later keys masked); GEMMs of 12 rows instead of 16
  // may sum in another order, which can flip a few bf16 roundings (~0.01%
  // of the RMS). 1% still fails a wrong row or position outright.
  CHECK(max_abs_diff(logits, row(11)) <= 0.01 * full_rms);

  // Drop the last 4 and run them again (a 4-token chunk over 8 cached), then
  // decode the rest one at a time: the cache follows the truncation.
  REQUIRE(seq->truncate(8).ok());
  CHECK(seq->n_tokens() == 8);
  REQUIRE(model.forward(*seq, std::vector<int32_t>(ids.begin() + 8, ids.begin() + 12), {}, LogitsMode::kLast, &logits).ok());
  CHECK(max_abs_diff(logits, row(11)) <= kCudaBounds.max_rel * full_rms);
  for (size_t t = 12; t < 16; ++t) {
    REQUIRE(model.forward(*seq, {ids[t]}, {}, LogitsMode::kLast, &logits).ok());
    CHECK(max_abs_diff(logits, row(t)) <= kCudaBounds.max_rel * full_rms);
  }
  CHECK(seq->truncate(17).code() == StatusCode::kInvalidArgument);
  REQUIRE(seq->truncate(3).ok());
  for (size_t t = 3; t < 6; ++t) {  // decode right after a truncation
    REQUIRE(model.forward(*seq, {ids[t]}, {}, LogitsMode::kLast, &logits).ok());
    CHECK(max_abs_diff(logits, row(t)) <= kCudaBounds.max_rel * full_rms);
  }

  seq->clear();
  CHECK(seq->n_tokens() == 0);
  REQUIRE(model.forward(*seq, first12, {}, LogitsMode::kNone, nullptr).ok());
  CHECK(seq->n_tokens() == 12);
  REQUIRE(model.forward(*seq, {ids[12]}, {}, LogitsMode::kLast, &logits).ok());
  CHECK(max_abs_diff(logits, row(12)) <= kCudaBounds.max_rel * full_rms);

  // A full context refuses and changes nothing.
  auto small = model.new_sequence(16);
  REQUIRE(small.ok());
  CHECK(small->capacity() == 16);
  logits = {42.0f};
  CHECK(model.forward(*small, random_ids(17, 100, 1), {}, LogitsMode::kLast, &logits).code() ==
        StatusCode::kInvalidArgument);
  CHECK(small->n_tokens() == 0);
  CHECK(logits == std::vector<float>{42.0f});
  REQUIRE(model.forward(*small, first12, {}, LogitsMode::kNone, nullptr).ok());
  CHECK(model.forward(*small, random_ids(5, 100, 4), {}, LogitsMode::kLast, &logits).code() ==
        StatusCode::kInvalidArgument);
  CHECK(small->n_tokens() == 12);
  REQUIRE(model.forward(*small, std::vector<int32_t>(ids.begin() + 12, ids.end()), {}, LogitsMode::kLast, &logits).ok());
  CHECK(max_abs_diff(logits, row(15)) <= kCudaBounds.max_rel * full_rms);
  CHECK(model.forward(*small, {1}, {}, LogitsMode::kLast, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(small->cache_bytes() > 0);
}

// --- generation ----------------------------------------------------------------------------

// The fixture: an untied synthetic model (seed 128) and a 6-token prompt
// whose float64 greedy continuation has top-2 gaps of at least 0.23 × the
// logit RMS for 7 steps (found by search; most random models repeat one
// token or have near-ties within a few steps). Both backends' worst logit
// errors (CPU ~7%, CUDA ~4% of the RMS) are far below half that gap, so
// both must produce the reference's tokens.
TEST_CASE("cuda model: greedy generation on CUDA and on the CPU follows the reference (well-separated logits)") {
  SyntheticLlama s;
  s.seed = 128;
  s.tied = false;
  s.output_type = GgmlType::kF16;
  const auto bytes = s.build();
  const std::vector<int32_t> prompt = random_ids(6, s.vocab, 228);
  constexpr int kSteps = 6;

  const RefModel ref = testing::load_reference(bytes);
  std::vector<int32_t> ctx = prompt, want;
  double min_gap = 1e9;
  for (int i = 0; i < kSteps; ++i) {
    const std::vector<double> last = testing::reference_forward(ref, ctx).back();
    double ss = 0;
    for (double l : last) ss += l * l;
    std::vector<double> sorted = last;
    std::sort(sorted.rbegin(), sorted.rend());
    min_gap = std::min(min_gap, (sorted[0] - sorted[1]) / std::sqrt(ss / static_cast<double>(last.size())));
    const int32_t id = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    want.push_back(id);
    ctx.push_back(id);
  }
  REQUIRE_MESSAGE(min_gap >= 0.2, "the fixture's logits are no longer well separated (min gap ", min_gap, ")");

  auto generate = [&](Device device) {
    const Model m = load(bytes, device);
    auto session = Session::create(m);
    REQUIRE(session.ok());
    GenerateParams gp;
    gp.max_tokens = kSteps;
    gp.stop_tokens = {-1};  // no stop token: exactly kSteps tokens
    std::vector<int32_t> got;
    auto stats = session->generate(prompt, gp, [&](const TokenEvent& e) {
      if (e.token >= 0) got.push_back(e.token);
      return true;
    });
    REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
    return got;
  };
  auto str = [](const std::vector<int32_t>& v) {
    std::string s;
    for (int32_t id : v) s += std::to_string(id) + " ";
    return s;
  };
  const std::vector<int32_t> cpu = generate(Device::kCpu);
  MESSAGE("reference " << str(want) << "(min gap " << min_gap << " of the logit RMS); CPU " << str(cpu));
  CHECK(cpu == want);
  if (skip_without_gpu()) return;
  const model::CudaForwardStats before = model::cuda_total_stats();
  const std::vector<int32_t> gpu = generate(Device::kCuda);
  const model::CudaForwardStats after = model::cuda_total_stats();
  MESSAGE("CUDA " << str(gpu) << "; graph replays " << after.graph_replays - before.graph_replays);
  CHECK(gpu == want);
  CHECK(gpu == cpu);
}

// --- SmolLM2 size ------------------------------------------------------------------------------

TEST_CASE("cuda model: a SmolLM2-shaped synthetic model (30 layers, vocab 49152) matches the reference") {
  if (skip_without_gpu()) return;
  const SyntheticLlama s = smollm2_shaped();
  const auto bytes = s.build();
  const std::vector<int32_t> ids = random_ids(8, s.vocab, 7);
  const auto ref = testing::reference_forward(testing::load_reference(bytes), ids);
  const Model model = load(bytes, Device::kCuda);
  const std::vector<float> got = run_all(model, ids);
  const LogitError e = compare_logits(got, ref);
  MESSAGE("SmolLM2-shaped: CUDA vs float64 max " << 100 * e.rel() << "%, RMS " << 100 * e.rms_rel() << "% of logit RMS "
                                                 << e.ref_rms << ", argmax mismatches " << e.argmax_mismatches << "/8");
  check_bounds(e, kDeepBounds);

  // Decode speed with the device sampler's shapes (timing only, printed).
  auto session = Session::create(model, SessionOptions{1024});
  REQUIRE(session.ok());
  GenerateParams gp;
  gp.max_tokens = 128;
  gp.stop_tokens = {-1};
  auto stats = session->generate(ids, gp, nullptr);
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  MESSAGE("SmolLM2-shaped greedy decode on CUDA: " << stats->decode_tokens_per_s << " tokens/s, prefill "
                                                   << stats->prefill_ms << " ms for 8 tokens");
}

// The real model against transformers' float64 logits
// (tests/data/smollm2_reference_logits.json, the fixture of
// test_model_cpu.cpp), against the CPU backend, and a greedy continuation.
// Bounds: the bf16 rounding model of llama_reference.hpp on this model and
// fixture gives top-10 error max 0.28 / RMS 0.061, centered (the position's
// mean error removed) max 0.16 / RMS 0.027, top-1 equal at 199 of 200
// positions (the other with a reference top-2 gap of 0.049); the CPU
// backend, with Q8 activations, is ~4x further (RMS 0.21-0.24). Held to
// about 2.5x the model: raw max 0.8 / RMS 0.15, centered max 0.5 / RMS 0.08,
// top-1 equal wherever the reference's gap is >= 0.25. Top-1 agreement with
// the CPU backend is printed and held to 90% (the CPU alone agrees with the
// reference at ~96%).
TEST_CASE("cuda model: SmolLM2-135M matches HF transformers and the CPU backend") {
  if (skip_without_gpu()) return;
  const std::string path = testing::default_model_path();
  if (!std::ifstream(path).good()) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh, or set FLASHSCOPE_MODEL_DIR)");
    flashscope::testing::mark_skipped();
    return;
  }
  const nlohmann::json fixture =
      testing::read_json_fixture(FLASHSCOPE_SOURCE_DIR "/tests/data/smollm2_reference_logits.json");

  ModelOptions cuda_options;
  cuda_options.device = Device::kCuda;
  auto gpu = Model::load(path, cuda_options);
  REQUIRE_MESSAGE(gpu.ok(), gpu.status().to_string());
  auto cpu = Model::load(path);
  REQUIRE_MESSAGE(cpu.ok(), cpu.status().to_string());
  const int V = gpu->config().vocab;

  double worst = 0, sum_sq = 0, worst_centered = 0, sum_sq_centered = 0;
  int positions = 0, top1_ref = 0, top1_cpu = 0, n_err = 0;
  for (const auto& c : fixture.at("cases")) {
    std::vector<int32_t> ids;
    for (const auto& v : c.at("ids")) ids.push_back(v.get<int32_t>());
    CAPTURE(c.at("text").get<std::string>());
    const std::vector<float> logits = run_all(*gpu, ids);
    const std::vector<float> cpu_logits = run_all(*cpu, ids);
    for (const auto& p : c.at("positions")) {
      const int pos = p.at("pos").get<int>();
      CAPTURE(pos);
      const float* row = logits.data() + static_cast<size_t>(pos) * static_cast<size_t>(V);
      const float* cpu_row = cpu_logits.data() + static_cast<size_t>(pos) * static_cast<size_t>(V);
      const auto& top_ids = p.at("top_ids");
      const auto& top_logits = p.at("top_logits");
      REQUIRE(top_ids.size() == 10);
      double mean = 0;
      for (size_t k = 0; k < top_ids.size(); ++k) {
        const double d = row[top_ids[k].get<size_t>()] - top_logits[k].get<double>();
        const double err = std::isfinite(d) ? std::fabs(d) : std::numeric_limits<double>::infinity();
        worst = std::max(worst, err);
        sum_sq += err * err;
        ++n_err;
        mean += d;
        CHECK(err <= 0.8);
      }
      mean /= static_cast<double>(top_ids.size());
      for (size_t k = 0; k < top_ids.size(); ++k) {
        const double err = std::fabs(row[top_ids[k].get<size_t>()] - top_logits[k].get<double>() - mean);
        worst_centered = std::max(worst_centered, err);
        sum_sq_centered += err * err;
        CHECK(err <= 0.5);
      }
      const int argmax = static_cast<int>(std::max_element(row, row + V) - row);
      const int cpu_argmax = static_cast<int>(std::max_element(cpu_row, cpu_row + V) - cpu_row);
      const double gap = top_logits[0].get<double>() - top_logits[1].get<double>();
      if (argmax == top_ids[0].get<int>()) {
        ++top1_ref;
      } else {
        CHECK(gap < 0.25);
      }
      top1_cpu += argmax == cpu_argmax;
      ++positions;
    }
  }
  const double rms_err = std::sqrt(sum_sq / n_err), rms_centered = std::sqrt(sum_sq_centered / n_err);
  MESSAGE("SmolLM2 on CUDA vs HF float64: " << positions << " positions, top-1 equal at " << top1_ref
                                            << "; top-10 logit error max " << worst << ", RMS " << rms_err
                                            << "; centered max " << worst_centered << ", RMS " << rms_centered
                                            << "; top-1 equal to the CPU backend's at " << top1_cpu);
  CHECK(rms_err <= 0.15);
  CHECK(rms_centered <= 0.08);
  CHECK(positions > 150);
  CHECK(top1_cpu >= 0.9 * positions);

  // A greedy continuation on both backends.
  const std::vector<int32_t> prompt = gpu->tokenizer().encode("The capital of France is", false);
  auto continue_on = [&](const Model& m, GenerateStats* stats) {
    auto session = Session::create(m, SessionOptions{256});
    REQUIRE(session.ok());
    GenerateParams gp;
    gp.max_tokens = 16;
    std::string out;
    std::vector<int32_t> toks;
    auto st = session->generate(prompt, gp, [&](const TokenEvent& e) {
      out += std::string(e.text);
      if (e.token >= 0) toks.push_back(e.token);
      return true;
    });
    REQUIRE_MESSAGE(st.ok(), st.status().to_string());
    *stats = st.value();
    return std::make_pair(out, toks);
  };
  GenerateStats gpu_stats, cpu_stats;
  const auto [gpu_text, gpu_tokens] = continue_on(*gpu, &gpu_stats);
  const auto [cpu_text, cpu_tokens] = continue_on(*cpu, &cpu_stats);
  MESSAGE("CUDA: \"The capital of France is" << gpu_text << "\" (" << gpu_stats.decode_tokens_per_s
                                             << " tokens/s decode, prefill " << gpu_stats.prefill_ms << " ms)");
  MESSAGE("CPU:  \"The capital of France is" << cpu_text << "\" (" << cpu_stats.decode_tokens_per_s
                                             << " tokens/s decode)");
  // The first token's top-2 gap on the CPU decides whether it must agree.
  auto seq = cpu->new_sequence(64);
  REQUIRE(seq.ok());
  std::vector<float> first;
  REQUIRE(cpu->forward(*seq, prompt, {}, LogitsMode::kLast, &first).ok());
  std::vector<float> sorted = first;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  REQUIRE(!gpu_tokens.empty());
  REQUIRE(!cpu_tokens.empty());
  if (sorted[0] - sorted[1] >= 0.5f) {
    CHECK(gpu_tokens[0] == cpu_tokens[0]);
  } else {
    MESSAGE("the first token's top-2 gap is " << sorted[0] - sorted[1] << ": not compared");
  }
  const model::CudaForwardStats totals = model::cuda_total_stats();
  CHECK_MESSAGE(totals.graph_capture_failures == 0, "graph capture failed: ", totals.last_capture_error);
}

// --- batched decode ------------------------------------------------------------------------------
//
// A batched step reads every sequence's pages from the model's one KV pool
// with one paged attention launch per layer and runs each GEMM once with
// M = batch. Against each sequence's own decode step the only difference is
// cuBLAS's algorithm for M = batch instead of M = 1 (another summation
// order, then bf16 roundings): held to 2% of the logit RMS, as the graph
// test holds its replays; a wrong page, position or row is tens of percent.

namespace {

// Sequence i's prompt: lengths 1..40, so the batch has different kv_lens and pages.
std::vector<int32_t> batch_prompt(int i, int vocab, uint64_t seed) {
  return random_ids(1 + (7 * i) % 40, vocab, seed + static_cast<uint64_t>(i));
}

Sequence prefilled_sequence(const Model& m, const std::vector<int32_t>& prompt, int capacity) {
  auto seq = m.new_sequence(capacity);
  REQUIRE_MESSAGE(seq.ok(), seq.status().to_string());
  const Status st = m.forward(*seq, prompt, {}, LogitsMode::kNone, nullptr);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  return std::move(seq).value();
}

std::vector<Sequence> prefilled_sequences(const Model& m, int count, int vocab, int capacity, uint64_t seed) {
  std::vector<Sequence> seqs;
  for (int i = 0; i < count; ++i) seqs.push_back(prefilled_sequence(m, batch_prompt(i, vocab, seed), capacity));
  return seqs;
}

std::vector<Sequence*> pointers(std::vector<Sequence>& seqs) {
  std::vector<Sequence*> p;
  for (Sequence& s : seqs) p.push_back(&s);
  return p;
}

}  // namespace

TEST_CASE("cuda model: forward_batch rows match each sequence's own decode step, batch graphs replay") {
  if (skip_without_gpu()) return;
  const TileSteps tiles;
  const auto vs = variants();
  for (const Variant* v : {&vs[0], &vs[1], &vs[2], &vs[4]}) {
    const std::string variant = v->name;
    CAPTURE(variant);
    const Model model = load(v->s.build(), Device::kCuda);
    const int V = v->s.vocab;
    for (int batch : {2, 5, 17}) {
      CAPTURE(batch);
      std::vector<Sequence> together = prefilled_sequences(model, batch, V, 128, 40);
      std::vector<Sequence> alone = prefilled_sequences(model, batch, V, 128, 40);
      const std::vector<Sequence*> ptrs = pointers(together);
      const model::CudaForwardStats before = model::cuda_total_stats();
      constexpr int kSteps = 4;
      double worst = 0, worst_rel = 0;
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<int32_t> next = random_ids(batch, V, 100 + static_cast<uint64_t>(step));
        std::vector<float> rows;
        const Status st = model.forward_batch(ptrs, next, &rows);
        REQUIRE_MESSAGE(st.ok(), st.to_string());
        REQUIRE(rows.size() == static_cast<size_t>(batch) * static_cast<size_t>(V));
        for (int i = 0; i < batch; ++i) {
          std::vector<float> want;
          REQUIRE(model.forward(alone[static_cast<size_t>(i)], {next[static_cast<size_t>(i)]}, {}, LogitsMode::kLast, &want).ok());
          const double diff = max_abs_diff(want, rows.data() + static_cast<size_t>(i) * V);
          worst = std::max(worst, diff);
          worst_rel = std::max(worst_rel, diff / rms(want));
          CHECK_MESSAGE(diff <= 0.02 * rms(want), "row ", i, " step ", step, ": max |diff| ", diff);
        }
      }
      for (int i = 0; i < batch; ++i) CHECK(together[static_cast<size_t>(i)].tokens() == alone[static_cast<size_t>(i)].tokens());
      const model::CudaForwardStats after = model::cuda_total_stats();
      MESSAGE(variant << ", batch " << batch << ": worst |diff| " << worst << " (" << 100 * worst_rel
                      << "% of the row's RMS); batch graph captures " << after.batch_graph_captures - before.batch_graph_captures
                      << ", replays " << after.batch_graph_replays - before.batch_graph_replays);
      CHECK(after.batch_steps - before.batch_steps == kSteps);
      CHECK(after.batch_rows - before.batch_rows == static_cast<uint64_t>(kSteps * batch));
      // Step 1 runs plainly (loads kernels and cuBLAS's choices), step 2 is
      // captured, every later step of the same size replays it.
      CHECK_MESSAGE(after.graph_capture_failures == before.graph_capture_failures,
                    "graph capture failed: ", after.last_capture_error);
      CHECK(after.batch_graph_captures - before.batch_graph_captures == 1);
      CHECK(after.batch_graph_replays - before.batch_graph_replays == kSteps - 1);
    }
  }
}

TEST_CASE("cuda model: a batch of 600 sequences (two chunks) matches the sequences' own steps") {
  if (skip_without_gpu()) return;
  const TileSteps tiles;
  const Model model = load(variants()[4].s.build(), Device::kCuda);  // 9 q-heads over 3, vocab 300
  const int V = 300, batch = 600;
  std::vector<Sequence> together = prefilled_sequences(model, batch, V, 64, 7);
  const std::vector<Sequence*> ptrs = pointers(together);
  const std::vector<int32_t> next = random_ids(batch, V, 8);
  std::vector<float> rows;
  const Status st = model.forward_batch(ptrs, next, &rows);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  for (int i : {0, 1, 37, 511, 512, 513, 599}) {
    CAPTURE(i);
    Sequence one = prefilled_sequence(model, batch_prompt(i, V, 7), 64);
    std::vector<float> want;
    REQUIRE(model.forward(one, {next[static_cast<size_t>(i)]}, {}, LogitsMode::kLast, &want).ok());
    CHECK(max_abs_diff(want, rows.data() + static_cast<size_t>(i) * V) <= 0.02 * rms(want));
    CHECK(together[static_cast<size_t>(i)].tokens() == one.tokens());
  }
}

TEST_CASE("cuda model: the KV pool grows and shrinks under live sequences, and refused batches change nothing") {
  if (skip_without_gpu()) return;
  const TileSteps tiles;
  const auto bytes = variants()[0].s.build();
  const Model model = load(bytes, Device::kCuda);
  const Model reference = load(bytes, Device::kCuda);  // the same calls without the pool moving
  const std::vector<int32_t> ids = random_ids(24, 100, 3);
  auto step = [&](const Model& m, Sequence& seq, size_t t) {
    std::vector<float> logits;
    const Status s = m.forward(seq, {ids[t]}, {}, LogitsMode::kLast, &logits);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    return logits;
  };
  auto a = model.new_sequence(64), r = reference.new_sequence(64);
  REQUIRE(a.ok());
  REQUIRE(r.ok());
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 20);
  REQUIRE(model.forward(*a, prompt, {}, LogitsMode::kNone, nullptr).ok());
  REQUIRE(reference.forward(*r, prompt, {}, LogitsMode::kNone, nullptr).ok());
  const std::vector<float> first = step(model, *a, 20);
  CHECK(max_abs_diff(first, step(reference, *r, 20).data()) <= 1e-4 * rms(first));  // the same work: expected bit-equal

  {
    // Sequences with room for 8192 tokens: the pool grows (moves) several
    // times while `a` holds pages and a captured graph.
    std::vector<Sequence> big;
    for (int i = 0; i < 6; ++i) {
      auto s = model.new_sequence(8192);
      REQUIRE_MESSAGE(s.ok(), s.status().to_string());
      CHECK(s->cache_bytes() > 0);
      big.push_back(std::move(s).value());
    }
    for (size_t t = 21; t < 23; ++t) {
      const std::vector<float> got = step(model, *a, t);
      // Plain launches here, a graph in the reference: 2% as in the graph test
      // (a stale pool address reads NaN pages or another sequence's keys).
      CHECK_MESSAGE(max_abs_diff(got, step(reference, *r, t).data()) <= 0.02 * rms(got), "after the pool grew, token ", t);
    }
    // A batch with a big sequence: its pages may be anywhere in the pool.
    REQUIRE(model.forward(big[3], prompt, {}, LogitsMode::kNone, nullptr).ok());
    std::vector<float> rows;
    REQUIRE(model.forward_batch({&*a, &big[3]}, {ids[23], ids[20]}, &rows).ok());
    const std::vector<float> want = step(reference, *r, 23);
    CHECK(max_abs_diff(want, rows.data()) <= 0.02 * rms(want));
  }  // the big sequences give their pages back

  // Refused batches: nothing moves.
  auto full = model.new_sequence(4);
  REQUIRE(full.ok());
  REQUIRE(model.forward(*full, {1, 2, 3, 4}, {}, LogitsMode::kNone, nullptr).ok());
  const Model cpu = load(bytes, Device::kCpu);
  auto cpu_seq = cpu.new_sequence(16);
  REQUIRE(cpu_seq.ok());
  std::vector<float> logits = {42.0f};
  CHECK(model.forward_batch({&*a, &*full}, {1, 2}, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward_batch({&*a, &*cpu_seq}, {1, 2}, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward_batch({}, {}, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(model.forward_batch({&*a}, {1, 2}, &logits).code() == StatusCode::kInvalidArgument);
  CHECK(logits == std::vector<float>{42.0f});
  CHECK(a->n_tokens() == 24);
  CHECK(full->n_tokens() == 4);

  // Every sequence gone frees the pool; new ones start a fresh one.
  *a = Sequence();
  *full = Sequence();
  auto again = model.new_sequence(64);
  REQUIRE(again.ok());
  REQUIRE(model.forward(*again, prompt, {}, LogitsMode::kNone, nullptr).ok());
  auto r2 = reference.new_sequence(64);
  REQUIRE(r2.ok());
  REQUIRE(reference.forward(*r2, prompt, {}, LogitsMode::kNone, nullptr).ok());
  const std::vector<float> fresh = step(model, *again, 20);
  CHECK(max_abs_diff(fresh, step(reference, *r2, 20).data()) <= 0.02 * rms(fresh));
}

TEST_CASE("cuda model sampling: the batched device sampler picks what sample() picks, row for row") {
  if (skip_without_gpu()) return;
  auto params = [](float t, int k, float p, float min_p, float rep = 1.0f, float presence = 0.0f,
                   float frequency = 0.0f) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = min_p;
    s.repetition_penalty = rep;
    s.presence_penalty = presence;
    s.frequency_penalty = frequency;
    return s;
  };
  for (int vocab : {1000, 49152, 262144}) {  // 262144: each row split over CTAs
    CAPTURE(vocab);
    const std::vector<int32_t> recent = random_ids(80, vocab, 9);
    // Rows: greedy, the CLI's defaults, top-k at the cap, a penalty, min-p,
    // presence and frequency penalties (over the last 30 of recent), and top-k 0 (the host fallback over 49152; on the device over 1000).
    const std::vector<SamplingParams> row_params = {
        params(0.0f, 0, 1.0f, 0.0f),          params(0.7f, 40, 0.95f, 0.05f), params(1.3f, 1024, 0.9f, 0.0f),
        params(0.9f, 20, 1.0f, 0.0f, 1.3f), params(1.0f, 0, 0.9f, 0.0f),      params(0.0f, 0, 1.0f, 0.0f, 1.3f),
        params(1.0f, 50, 1.0f, 0.2f),         params(0.9f, 20, 1.0f, 0.0f, 1.2f, 0.8f, 0.5f),
        params(0.7f, 40, 0.95f, 0.05f, 1.0f, 0.8f), params(0.0f, 0, 1.0f, 0.0f, 1.0f, 1.5f, 0.7f)};
    const int rows = static_cast<int>(row_params.size());
    std::mt19937_64 gen(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& l : logits) l = normal(gen);
    cuda::BatchSampleScratch scratch;
    int mismatches = 0, rng_mismatches = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      DeviceBuffer d = upload(logits);  // fresh: the sampler works in place
      std::vector<Rng> device_rngs, host_rngs;
      for (int r = 0; r < rows; ++r) {
        device_rngs.emplace_back(seed * 100 + static_cast<uint64_t>(r));
        host_rngs.emplace_back(seed * 100 + static_cast<uint64_t>(r));
      }
      std::vector<cuda::SampleRowInput> in(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        in[static_cast<size_t>(r)].params = row_params[static_cast<size_t>(r)];
        in[static_cast<size_t>(r)].rng = &device_rngs[static_cast<size_t>(r)];
        in[static_cast<size_t>(r)].recent = r % 2 ? &recent : nullptr;
        in[static_cast<size_t>(r)].generated = 30;
      }
      REQUIRE(cuda::enqueue_sample_rows(static_cast<float*>(d.data()), vocab, vocab, in, scratch, nullptr).ok());
      REQUIRE(device_synchronize().ok());
      std::vector<int32_t> got(static_cast<size_t>(rows), -1);
      REQUIRE(cuda::finish_sample_rows(in, vocab, scratch, got.data()).ok());
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> row(logits.begin() + static_cast<long>(r) * vocab,
                                     logits.begin() + static_cast<long>(r + 1) * vocab);
        const int32_t want = sample(row, row_params[static_cast<size_t>(r)], host_rngs[static_cast<size_t>(r)],
                                    r % 2 ? recent : std::vector<int32_t>{}, 30);
        if (got[static_cast<size_t>(r)] != want) {
          ++mismatches;
          MESSAGE("seed ", seed, " row ", r, ": device ", got[static_cast<size_t>(r)], ", host ", want);
        }
        rng_mismatches += device_rngs[static_cast<size_t>(r)].next_u64() != host_rngs[static_cast<size_t>(r)].next_u64();
      }
    }
    CHECK(mismatches == 0);
    CHECK_MESSAGE(rng_mismatches == 0, "a row consumed a different number of draws");
  }
}

TEST_CASE("cuda model: Session and BatchGenerator sample on the device (a token id back per step, not a row)") {
  if (skip_without_gpu()) return;
  const Model model = load(variants()[0].s.build(), Device::kCuda);
  auto a = Session::create(model, SessionOptions{128}), b = Session::create(model, SessionOptions{128});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  GenerateParams gp;
  gp.max_tokens = 8;
  gp.stop_tokens = {-1};
  model::CudaForwardStats before = model::cuda_total_stats();
  REQUIRE(a->generate({5, 6, 7}, gp, nullptr).ok());
  model::CudaForwardStats after = model::cuda_total_stats();
  CHECK(after.device_sampled_tokens - before.device_sampled_tokens == 8);
  CHECK(after.host_sampled_tokens == before.host_sampled_tokens);

  a->reset();
  before = after;
  auto results = generate_batch({{&*a, {5, 6, 7}, gp, nullptr}, {&*b, {8, 9}, gp, nullptr}});
  REQUIRE(results.ok());
  after = model::cuda_total_stats();
  CHECK(after.device_sampled_tokens - before.device_sampled_tokens == 16);
  CHECK(after.batch_steps - before.batch_steps == 7);  // the first tokens come from the prefills
  // top_k 0 over a vocabulary the device sampler can keep whole (100) stays on the device too.
  gp.sampling.temperature = 0.8f;
  before = after;
  a->reset();
  REQUIRE(a->generate({5, 6, 7}, gp, nullptr).ok());
  after = model::cuda_total_stats();
  CHECK(after.device_sampled_tokens - before.device_sampled_tokens == 8);
}

// The greedy fixture of the generation test above (top-2 gaps >= 0.2 of the
// logit RMS for 6 steps): batched replies must be the reference's tokens.
// Then SmolLM2 (when present): batched greedy chat replies against each
// session's own, token by token, until the first position where the solo
// run's top-2 gap is small enough for bf16 rounding to flip it.
TEST_CASE("cuda model: generate_batch greedy replies equal Session::generate's (fixture and SmolLM2)") {
  if (skip_without_gpu()) return;
  SyntheticLlama s;
  s.seed = 128;
  s.tied = false;
  s.output_type = GgmlType::kF16;
  const Model fixture = load(s.build(), Device::kCuda);
  const std::vector<int32_t> prompt = random_ids(6, s.vocab, 228);
  GenerateParams gp;
  gp.max_tokens = 6;
  gp.stop_tokens = {-1};
  auto solo = Session::create(fixture);
  REQUIRE(solo.ok());
  std::vector<int32_t> want;
  REQUIRE(solo->generate(prompt, gp, [&](const TokenEvent& e) {
    if (e.token >= 0) want.push_back(e.token);
    return true;
  }).ok());
  std::vector<Session> sessions;
  std::vector<std::vector<int32_t>> got(4);
  std::vector<BatchRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    auto session = Session::create(fixture);
    REQUIRE(session.ok());
    sessions.push_back(std::move(session).value());
  }
  for (int i = 0; i < 4; ++i) {
    GenerateParams p = gp;
    p.max_tokens = 3 + i;  // replies end at different steps
    reqs.push_back({&sessions[static_cast<size_t>(i)], prompt, p, [&got, i](const TokenEvent& e) {
                      if (e.token >= 0) got[static_cast<size_t>(i)].push_back(e.token);
                      return true;
                    }});
  }
  auto results = generate_batch(reqs);
  REQUIRE(results.ok());
  for (int i = 0; i < 4; ++i) {
    REQUIRE((*results)[static_cast<size_t>(i)].ok());
    CHECK(got[static_cast<size_t>(i)] == std::vector<int32_t>(want.begin(), want.begin() + 3 + i));
  }

  const std::string path = testing::default_model_path();
  if (!std::ifstream(path).good()) {
    MESSAGE("SmolLM2 half skipped: " << path << " is absent");
    return;
  }
  ModelOptions o;
  o.device = Device::kCuda;
  auto smol = Model::load(path, o);
  REQUIRE_MESSAGE(smol.ok(), smol.status().to_string());
  const std::vector<std::string> questions = {"What is a GPU?", "Name a color.", "Say hello to a knight.",
                                              "Write a haiku about rain.", "What is 2 + 2?"};
  constexpr int kTokens = 24;
  // Each question alone: greedy tokens and the top-2 gap at each step (logits downloaded).
  std::vector<std::vector<int32_t>> solo_tokens(questions.size());
  std::vector<std::vector<float>> gaps(questions.size());
  std::vector<std::vector<int32_t>> prompts;
  for (size_t q = 0; q < questions.size(); ++q) {
    prompts.push_back(encode_chatml(smol->tokenizer(), {{"user", questions[q]}}, true));
    auto seq = smol->new_sequence(512);
    REQUIRE(seq.ok());
    std::vector<float> logits;
    REQUIRE(smol->forward(*seq, prompts.back(), {}, LogitsMode::kLast, &logits).ok());
    for (int t = 0; t < kTokens; ++t) {
      std::vector<float> sorted = logits;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const int32_t id = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      solo_tokens[q].push_back(id);
      gaps[q].push_back(sorted[0] - sorted[1]);
      REQUIRE(smol->forward(*seq, {id}, {}, LogitsMode::kLast, &logits).ok());
    }
  }
  std::vector<Session> chats;
  std::vector<std::vector<int32_t>> batched(questions.size());
  std::vector<BatchRequest> chat_reqs;
  for (size_t q = 0; q < questions.size(); ++q) {
    auto session = Session::create(*smol, SessionOptions{512});
    REQUIRE(session.ok());
    chats.push_back(std::move(session).value());
  }
  GenerateParams chat = gp;
  chat.max_tokens = kTokens;
  for (size_t q = 0; q < questions.size(); ++q) {
    chat_reqs.push_back({&chats[q], prompts[q], chat, [&batched, q](const TokenEvent& e) {
                           if (e.token >= 0) batched[q].push_back(e.token);
                           return true;
                         }});
  }
  auto chat_results = generate_batch(chat_reqs);
  REQUIRE(chat_results.ok());
  int compared = 0;
  for (size_t q = 0; q < questions.size(); ++q) {
    CAPTURE(questions[q]);
    REQUIRE((*chat_results)[q].ok());
    REQUIRE(batched[q].size() == static_cast<size_t>(kTokens));
    for (int t = 0; t < kTokens; ++t) {
      if (batched[q][static_cast<size_t>(t)] != solo_tokens[q][static_cast<size_t>(t)]) {
        CHECK_MESSAGE(gaps[q][static_cast<size_t>(t)] < 0.25f, "step ", t, ": the solo top-2 gap was ",
                      gaps[q][static_cast<size_t>(t)]);
        break;  // the contexts differ from here on
      }
      ++compared;
    }
    MESSAGE("\"" << questions[q] << "\": " << smol->tokenizer().decode(batched[q]));
  }
  MESSAGE("batched = solo at " << compared << " of " << questions.size() * kTokens << " tokens");
  CHECK(compared >= static_cast<int>(questions.size()) * kTokens / 2);
}
