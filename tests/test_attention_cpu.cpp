// The CPU attention path: the FP64 reference against an independent naive
// implementation and closed-form cases, then the tiled CPU backend against
// the reference over a grid of shapes.
//
// Tolerances. The reference is compared in float32 terms: it and the naive
// version both compute in double, so they differ by the final float rounding
// only (2^-24 relative; bounds below allow 4 ulp). The tiled backend is held
// to AttentionProblem::tolerance(), derived from the dtype's unit roundoff u
// (bf16 2^-8, fp16 2^-11): normalized error < 1e-2 (bf16) / 2e-3 (fp16),
// max |error| <= (2u + 2^-12)·max|v|, lse within 1e-3. See that function for
// the derivation. NaN never passes: every error function returns infinity
// for a non-finite output.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "flashscope/attention.hpp"
#include "flashscope/half.hpp"
#include "attention/cpu/attention_cpu.hpp"
#include "cpu_features.hpp"
#include "support/attention_problem.hpp"
#include "support/attention_reference.hpp"
#include "support/skip.hpp"

namespace fs = flashscope;
using fs::DType;
using fs::testing::AttentionProblem;
using fs::testing::AttentionShape;
using fs::testing::Layout;
using fs::testing::NaiveResult;
using fs::testing::Operand;
using fs::testing::dense_shape;
using fs::testing::naive_attention;
using fs::testing::varlen_shape;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
const double kFloatUlp = std::ldexp(1.0, -24);

// Runs the tiled backend on the problem's host buffers through the public
// entry point: prefill() validates, then sends Device::kCpu to
// cpu::attention_tiled, so every case here is also one validate() accepts.
fs::Status run_tiled(AttentionProblem& prob) { return fs::prefill(prob.host_params()); }

// The whole check a backend run must pass: status, guards, output and lse
// within the dtype's tolerance.
void check_tiled_against_reference(const AttentionShape& shape) {
  INFO(shape.describe());
  AttentionProblem prob(shape);
  const fs::Status st = run_tiled(prob);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.message());
  CHECK(prob.guards_intact());
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  const fs::testing::Tolerance tol = prob.tolerance();
  const double normalized = prob.normalized_error(out.data());
  const double max_abs = prob.max_abs_error(out.data());
  const double lse_err = prob.lse_max_abs_error(lse.data());
  CAPTURE(normalized);
  CAPTURE(max_abs);
  CAPTURE(lse_err);
  CHECK(normalized < tol.normalized);
  CHECK(max_abs <= tol.max_abs);
  CHECK(lse_err <= tol.lse_abs);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------
// The reference

TEST_CASE("reference matches a naive softmax(scale·QKᵀ + mask)·V") {
  std::vector<AttentionShape> shapes = {
      dense_shape(1, 2, 2, 5, 7, 64, false),
      dense_shape(1, 2, 2, 7, 7, 64, true),
      dense_shape(1, 6, 2, 9, 4, 128, true),  // q_len > kv_len: the first 5 rows see nothing
      dense_shape(1, 3, 1, 4, 13, 64, true),  // chunked prefill
      varlen_shape({3, 0, 6}, {5, 2, 6}, 4, 2, 64, true),
      varlen_shape({4, 1}, {4, 9}, 3, 3, 64, false),
  };
  shapes[0].batch = 2;
  shapes[1].layout = Layout::kBHSD;
  shapes[2].dtype = DType::kFP16;
  shapes[3].layout = Layout::kPaddedBSHD;
  shapes[3].softmax_scale = 0.3f;
  shapes[4].layout = Layout::kBHSD;
  for (size_t n = 0; n < shapes.size(); ++n) shapes[n].seed = 100 + n;

  for (const AttentionShape& shape : shapes) {
    INFO(shape.describe());
    AttentionProblem prob(shape);
    const AttentionProblem::Reference& ref = prob.reference();
    REQUIRE(ref.status.ok());
    const NaiveResult naive = naive_attention(prob);
    const double o_bound = 4 * kFloatUlp * prob.max_abs_v();
    for (size_t i = 0; i < naive.o.size(); ++i) {
      INFO("o element " << i);
      REQUIRE(std::fabs(ref.o[i] - naive.o[i]) <= o_bound);
    }
    for (size_t i = 0; i < naive.lse.size(); ++i) {
      INFO("lse element " << i);
      if (std::isinf(naive.lse[i])) {
        REQUIRE(ref.lse[i] == kNegInf);
      } else {
        REQUIRE(std::fabs(ref.lse[i] - naive.lse[i]) <= 4 * kFloatUlp * (1 + std::fabs(naive.lse[i])));
      }
    }
  }
}

TEST_CASE("identical keys: the output is the mean of the visible V rows") {
  for (bool causal : {false, true}) {
    AttentionShape shape = dense_shape(1, 2, 1, 5, 9, 64, causal);
    shape.seed = 7;
    CAPTURE(causal);
    AttentionProblem prob(shape);
    for (int j = 1; j < shape.kv_len; ++j)
      for (int d = 0; d < shape.head_dim; ++d) prob.set(Operand::kK, 0, j, 0, d, prob.get(Operand::kK, 0, 0, 0, d));

    const AttentionProblem::Reference& ref = prob.reference();
    REQUIRE(ref.status.ok());
    REQUIRE(run_tiled(prob).ok());
    const std::vector<float> tiled = prob.output_as_float();
    const std::vector<float> tiled_lse = prob.lse_values();
    const double scale = 1.0 / std::sqrt(64.0);
    // Tiled: every p is exactly 1 and l counts the keys exactly, so only the
    // float sum of <= 9 V rows (n·2^-24·Σ|v| / n) and the bf16 store (u·|o|) round.
    const double u = std::ldexp(1.0, -8);
    const double lse_tol = prob.tolerance().lse_abs;

    for (int h = 0; h < shape.q_heads; ++h) {
      for (int i = 0; i < shape.q_len; ++i) {
        const int keys = causal ? i + (shape.kv_len - shape.q_len) + 1 : shape.kv_len;
        double qk = 0;
        for (int d = 0; d < shape.head_dim; ++d) qk += double(prob.get(Operand::kQ, 0, i, h, d)) * prob.get(Operand::kK, 0, 0, 0, d);
        const double want_lse = scale * qk + std::log(double(keys));
        const size_t lse_at = size_t(h * shape.q_len + i);
        CHECK(std::fabs(ref.lse[lse_at] - want_lse) <= 4 * kFloatUlp * (1 + std::fabs(want_lse)));
        CHECK(std::fabs(tiled_lse[lse_at] - want_lse) <= lse_tol);
        for (int d = 0; d < shape.head_dim; ++d) {
          double mean = 0, abs_mean = 0;
          for (int j = 0; j < keys; ++j) {
            mean += prob.get(Operand::kV, 0, j, 0, d);
            abs_mean += std::fabs(prob.get(Operand::kV, 0, j, 0, d));
          }
          mean /= keys;
          abs_mean /= keys;
          const size_t at = size_t((i * shape.q_heads + h) * shape.head_dim + d);
          CHECK(std::fabs(ref.o[at] - mean) <= 4 * kFloatUlp * (1 + std::fabs(mean)));
          CHECK(std::fabs(tiled[at] - mean) <= u * std::fabs(mean) + (keys + 2) * kFloatUlp * abs_mean);
        }
      }
    }
  }
}

TEST_CASE("causal with q_len == kv_len: row 0 sees only key 0, so it is v[0] exactly") {
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    AttentionShape shape = dense_shape(1, 8, 2, 70, 70, 128, true);
    shape.dtype = dtype;
    shape.batch = 2;
    shape.seed = 11;
    INFO(shape.describe());
    AttentionProblem prob(shape);
    const AttentionProblem::Reference& ref = prob.reference();
    REQUIRE(ref.status.ok());
    REQUIRE(run_tiled(prob).ok());
    const std::vector<float> tiled = prob.output_as_float();
    for (int b = 0; b < shape.batch; ++b) {
      for (int h = 0; h < shape.q_heads; ++h) {
        for (int d = 0; d < shape.head_dim; ++d) {
          const float v0 = prob.get(Operand::kV, b, 0, h / 4, d);
          const size_t at = size_t(((int64_t(b) * shape.q_len) * shape.q_heads + h) * shape.head_dim + d);
          REQUIRE(ref.o[at] == v0);
          REQUIRE(tiled[at] == v0);  // p = 1 and l = 1: no rounding anywhere
        }
      }
    }
  }
}

TEST_CASE("a huge softmax scale selects the one key equal to the query") {
  AttentionShape shape = dense_shape(1, 1, 1, 1, 50, 64, false);
  shape.softmax_scale = 1000.0f;
  shape.seed = 21;
  AttentionProblem prob(shape);
  const int match = 37;
  for (int d = 0; d < 64; ++d) prob.set(Operand::kK, 0, match, 0, d, prob.get(Operand::kQ, 0, 0, 0, d));

  // Every other key must trail by a clear margin for the closed form to hold:
  // at scale 1000 a margin of 1 leaves the others e^-1000 of the weight.
  double best = 0, runner_up = -INFINITY;
  for (int j = 0; j < 50; ++j) {
    double dot = 0;
    for (int d = 0; d < 64; ++d) dot += double(prob.get(Operand::kQ, 0, 0, 0, d)) * prob.get(Operand::kK, 0, j, 0, d);
    if (j == match) best = dot;
    else runner_up = std::max(runner_up, dot);
  }
  REQUIRE(best - runner_up > 1.0);

  const AttentionProblem::Reference& ref = prob.reference();
  REQUIRE(ref.status.ok());
  REQUIRE(run_tiled(prob).ok());
  const std::vector<float> tiled = prob.output_as_float();
  const std::vector<float> tiled_lse = prob.lse_values();
  for (int d = 0; d < 64; ++d) {
    const float v = prob.get(Operand::kV, 0, match, 0, d);
    CHECK(ref.o[size_t(d)] == v);
    CHECK(tiled[size_t(d)] == v);  // the other keys' p underflow to 0; p_match = 1
  }
  // lse = 1000·|q|². The tiled float32 dot of 64 positive terms carries up to
  // 63·2^-24 relative error, the log2(e)/ln(2) round trip a few ulps more.
  const double want = 1000.0 * best;
  CHECK(std::fabs(ref.lse[0] - want) <= 4 * kFloatUlp * want);
  CHECK(std::fabs(tiled_lse[0] - want) <= 72 * kFloatUlp * want);
}

// ---------------------------------------------------------------------------
// The tiled backend

TEST_CASE("tiled CPU backend rounds P to the dtype before P·V, as the GPU's tensor cores do") {
  // Two keys: s0 = 0 and s1 = scale·q·k1 ≈ -0.01, so p0 = 1 and p1 ≈ 0.990,
  // which bf16 rounds to 253/256 (an error of about 2^-9). With v0 = -256 and
  // v1 = +256 the output 256·(p1 − 1)/(1 + p1) ≈ -1.28 amplifies that error
  // to ≈ 0.23, about 30 ulps of the bf16 output, so a backend that skips the
  // rounding is told apart.
  AttentionShape shape = dense_shape(1, 1, 1, 1, 2, 64, false);
  AttentionProblem prob(shape);
  for (int d = 0; d < 64; ++d) {
    prob.set(Operand::kQ, 0, 0, 0, d, d == 0 ? 1.0f : 0.0f);
    prob.set(Operand::kK, 0, 0, 0, d, 0.0f);
    prob.set(Operand::kK, 0, 1, 0, d, d == 0 ? -0.08f : 0.0f);
    prob.set(Operand::kV, 0, 0, 0, d, -256.0f);
    prob.set(Operand::kV, 0, 1, 0, d, 256.0f);
  }
  const double p1 = std::exp(prob.get(Operand::kK, 0, 1, 0, 0) / 8.0);  // scale 1/sqrt(64)
  const double p1_rounded = fs::bf16_to_float(fs::float_to_bf16(float(p1)));
  REQUIRE(p1_rounded != p1);
  const double want_rounded = 256.0 * (p1_rounded - 1.0) / (1.0 + p1);
  const double want_exact = 256.0 * (p1 - 1.0) / (1.0 + p1);
  REQUIRE(std::fabs(want_rounded - want_exact) > 0.01);

  REQUIRE(run_tiled(prob).ok());
  const std::vector<float> out = prob.output_as_float();
  const double out_ulp = std::ldexp(1.0, -8) * std::fabs(want_rounded);  // the bf16 store
  for (int d = 0; d < 64; ++d) {
    CAPTURE(d);
    CHECK(std::fabs(out[size_t(d)] - want_rounded) <= out_ulp);
  }
  // The reference does not round P: it must land on the exact value.
  CHECK(std::fabs(prob.reference().o[0] - want_exact) <= 1e-5);
}


TEST_CASE("tiled CPU backend: the AVX2 micro-kernels give the portable ones' bits") {
  if (!fs::cpu::cpu_has_avx2()) {
    MESSAGE("skipped: this CPU has no AVX2, so only the portable micro-kernels run");
    fs::testing::mark_skipped();
    return;
  }
  struct Case {
    int q_heads, kv_heads, q_len, kv_len, dim;
    bool causal;
    DType dtype;
  };
  const Case cases[] = {{9, 3, 130, 130, 64, true, DType::kBF16},   {4, 1, 77, 300, 256, true, DType::kBF16},
                        {8, 8, 65, 129, 128, false, DType::kFP16},  {6, 2, 200, 200, 80, true, DType::kFP16},
                        {2, 2, 17, 1000, 96, false, DType::kBF16}};
  for (const Case& c : cases) {
    AttentionShape shape = dense_shape(2, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.dim, c.causal);
    shape.dtype = c.dtype;
    INFO(shape.describe());
    AttentionProblem prob(shape);
    fs::cpu::use_portable_tiled_kernels(true);
    const fs::Status portable_status = run_tiled(prob);
    fs::cpu::use_portable_tiled_kernels(false);
    REQUIRE(portable_status.ok());
    const std::vector<float> portable_out = prob.output_as_float();
    const std::vector<float> portable_lse = prob.lse_values();
    REQUIRE(run_tiled(prob).ok());
    const std::vector<float> out = prob.output_as_float();
    const std::vector<float> lse = prob.lse_values();
    REQUIRE(out.size() == portable_out.size());
    CHECK(std::memcmp(out.data(), portable_out.data(), out.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(lse.data(), portable_lse.data(), lse.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("tiled CPU backend matches the reference over lengths, head_dim, GQA, layouts and dtypes") {
  // Every (q_len, kv_len) pair, causal and not; the other axes rotate with
  // the case index so each value meets many lengths without a full product.
  const int lengths[] = {1, 17, 64, 127, 1000};
  const int ratios[] = {1, 3, 4, 8};
  const Layout layouts[] = {Layout::kBSHD, Layout::kBHSD, Layout::kPaddedBSHD};
  int n = 0;
  for (int q_len : lengths) {
    for (int kv_len : lengths) {
      for (bool causal : {false, true}) {
        const bool big = int64_t(q_len) * kv_len >= 100000;  // keep the suite quick on 2 cores
        const int ratio = ratios[n % 4];
        const int kv_heads = big ? 1 : 2;
        AttentionShape s = dense_shape(1, ratio * kv_heads, kv_heads, q_len, kv_len, (n / 2) % 2 ? 128 : 64, causal);
        s.batch = big ? 1 : 2;
        s.dtype = (n / 4) % 2 ? DType::kFP16 : DType::kBF16;
        s.layout = layouts[(n / 3) % 3];
        s.seed = 1000 + uint64_t(n);
        check_tiled_against_reference(s);
        ++n;
      }
    }
  }
}

TEST_CASE("tiled CPU backend: every GQA ratio, both dtypes and head_dims") {
  const int pairs[][2] = {{2, 2}, {9, 3}, {4, 1}, {8, 1}, {16, 2}};
  int n = 0;
  for (const auto& heads : pairs) {
    for (DType dtype : {DType::kBF16, DType::kFP16}) {
      for (int dim : {64, 128}) {
        AttentionShape s = dense_shape(1, heads[0], heads[1], 67, 131, dim, n % 2 == 0);
        s.dtype = dtype;
        s.layout = n % 3 == 0 ? Layout::kBHSD : Layout::kBSHD;
        s.seed = 2000 + uint64_t(n++);
        check_tiled_against_reference(s);
      }
    }
  }
}

TEST_CASE("tiled CPU backend: varlen batches") {
  struct Case {
    std::vector<int> q_lens, kv_lens;
  };
  const Case cases[] = {
      {{1, 17, 64, 127, 300}, {1, 40, 64, 200, 300}},  // prefill after a prefix, and exact tiles
      {{17, 5, 100}, {5, 17, 100}},                    // causal q_len > kv_len in one sequence
      {{33, 0, 70}, {33, 12, 0}},                      // empty sequences on either side
      {{200}, {200}},                                  // one sequence: same as dense
  };
  int n = 0;
  for (const Case& c : cases) {
    for (bool causal : {false, true}) {
      AttentionShape s = varlen_shape(c.q_lens, c.kv_lens, n % 2 ? 9 : 4, n % 2 ? 3 : 4, n % 3 ? 64 : 128, causal);
      s.dtype = n % 4 >= 2 ? DType::kFP16 : DType::kBF16;
      s.layout = n % 3 == 0 ? Layout::kBHSD : n % 3 == 1 ? Layout::kPaddedBSHD : Layout::kBSHD;
      s.seed = 3000 + uint64_t(n++);
      check_tiled_against_reference(s);
    }
  }
}

TEST_CASE("causal with q_len > kv_len: rows that see no key are zero with lse = -inf") {
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    AttentionShape s = dense_shape(1, 4, 2, 100, 30, 64, true);
    s.dtype = dtype;
    s.seed = 41;
    INFO(s.describe());
    AttentionProblem prob(s);
    REQUIRE(run_tiled(prob).ok());
    CHECK(prob.guards_intact());
    const std::vector<float> out = prob.output_as_float();
    const std::vector<float> lse = prob.lse_values();
    const int empty_rows = s.q_len - s.kv_len;  // query i sees keys j <= i - 70
    for (int h = 0; h < s.q_heads; ++h) {
      for (int i = 0; i < s.q_len; ++i) {
        CAPTURE(h);
        CAPTURE(i);
        const float row_lse = lse[size_t(h * s.q_len + i)];
        if (i < empty_rows) {
          REQUIRE(row_lse == kNegInf);
          for (int d = 0; d < s.head_dim; ++d) REQUIRE(out[size_t((i * s.q_heads + h) * s.head_dim + d)] == 0.0f);
        } else {
          REQUIRE(std::isfinite(row_lse));
        }
      }
    }
    CHECK(prob.normalized_error(out.data()) < prob.tolerance().normalized);
    CHECK(prob.lse_max_abs_error(lse.data()) <= prob.tolerance().lse_abs);
  }
}

TEST_CASE("kv_len == 0: every row is zero with lse = -inf") {
  AttentionShape s = dense_shape(1, 2, 1, 9, 0, 64, false);
  AttentionProblem prob(s);
  REQUIRE(run_tiled(prob).ok());
  CHECK(prob.guards_intact());
  for (float x : prob.output_as_float()) REQUIRE(x == 0.0f);
  for (float x : prob.lse_values()) REQUIRE(x == kNegInf);
}

TEST_CASE("chunked prefill: a causal chunk after a cached prefix equals the full prefill's last rows") {
  // Same keys; the chunk's queries are the full problem's last 50. On the
  // CPU backend the two runs do the same float operations for each of these
  // rows (key tiles start at key 0 in both), so they agree bit for bit.
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    AttentionShape full_shape = dense_shape(1, 6, 2, 200, 200, 64, true);
    full_shape.dtype = dtype;
    full_shape.seed = 51;
    AttentionShape chunk_shape = full_shape;
    chunk_shape.q_len = 50;
    INFO(full_shape.describe());
    AttentionProblem full(full_shape), chunk(chunk_shape);
    const int start = full_shape.q_len - chunk_shape.q_len;
    for (int i = 0; i < chunk_shape.q_len; ++i)
      for (int h = 0; h < 6; ++h)
        for (int d = 0; d < 64; ++d) chunk.set(Operand::kQ, 0, i, h, d, full.get(Operand::kQ, 0, start + i, h, d));

    REQUIRE(run_tiled(full).ok());
    REQUIRE(run_tiled(chunk).ok());
    const std::vector<float> full_out = full.output_as_float();
    const std::vector<float> chunk_out = chunk.output_as_float();
    const std::vector<float> full_tail(full_out.begin() + start * 6 * 64, full_out.end());
    CHECK(same_bits(chunk_out, full_tail));
    const std::vector<float> full_lse = full.lse_values(), chunk_lse = chunk.lse_values();
    for (int h = 0; h < 6; ++h)
      for (int i = 0; i < chunk_shape.q_len; ++i)
        REQUIRE(chunk_lse[size_t(h * 50 + i)] == full_lse[size_t(h * 200 + start + i)]);
    CHECK(chunk.normalized_error(chunk_out.data()) < chunk.tolerance().normalized);
  }
}

TEST_CASE("tiled CPU backend: the layout changes the addresses, not the numbers") {
  std::vector<float> first;
  for (Layout layout : {Layout::kBSHD, Layout::kBHSD, Layout::kPaddedBSHD}) {
    AttentionShape s = dense_shape(1, 9, 3, 77, 150, 64, true);
    s.batch = 2;
    s.layout = layout;
    s.seed = 61;
    INFO(s.describe());
    AttentionProblem prob(s);
    REQUIRE(run_tiled(prob).ok());
    CHECK(prob.guards_intact());
    const std::vector<float> out = prob.output_as_float();
    if (first.empty()) first = out;
    else CHECK(same_bits(out, first));
  }
}

TEST_CASE("tiled CPU backend: lse is optional and does not change the output") {
  AttentionShape s = dense_shape(1, 4, 2, 65, 130, 128, true);
  s.seed = 71;
  AttentionProblem prob(s);
  REQUIRE(run_tiled(prob).ok());
  const std::vector<float> with_lse = prob.output_as_float();
  prob.reset_outputs();
  fs::PrefillParams p = prob.host_params();
  p.lse = nullptr;
  REQUIRE(fs::prefill(p).ok());
  CHECK(prob.guards_intact());
  CHECK(same_bits(prob.output_as_float(), with_lse));
  for (float x : prob.lse_values()) REQUIRE(std::isnan(x));  // still the poison: never written
}

#ifdef _OPENMP
TEST_CASE("tiled CPU backend: the result does not depend on the thread count") {
  // Each (sequence, head, query block) is one thread's work from start to end.
  AttentionShape s = dense_shape(1, 8, 2, 300, 300, 64, true);
  s.seed = 81;
  AttentionProblem prob(s);
  REQUIRE(run_tiled(prob).ok());
  const std::vector<float> parallel = prob.output_as_float();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  prob.reset_outputs();
  const fs::Status st = run_tiled(prob);
  omp_set_num_threads(threads);
  REQUIRE(st.ok());
  CHECK(same_bits(prob.output_as_float(), parallel));
}
#endif

TEST_CASE("prefill() on the CPU validates and runs the tiled backend") {
  AttentionShape s = varlen_shape({40, 3}, {90, 3}, 9, 3, 64, true);
  s.seed = 91;
  AttentionProblem prob(s);
  REQUIRE(fs::prefill(prob.host_params()).ok());
  CHECK(prob.guards_intact());
  const std::vector<float> out = prob.output_as_float();
  CHECK(prob.normalized_error(out.data()) < prob.tolerance().normalized);

  fs::PrefillParams bad = prob.host_params();
  bad.kv_heads = 2;  // 9 q-heads over 2 kv-heads: rejected before any work
  prob.reset_outputs();
  const fs::Status st = fs::prefill(bad);
  CHECK(st.code() == fs::StatusCode::kInvalidArgument);
  for (float x : prob.output_as_float()) REQUIRE(std::isnan(x));  // nothing was written
}
