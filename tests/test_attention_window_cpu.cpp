// Sliding-window attention, logit soft-capping and every head_dim on the
// CPU paths (flashscope/attention.hpp, paged_attention.hpp):
//   - the FP64 reference against hand-computed cases and against a naive
//     full-score-matrix implementation written here;
//   - the tiled backend (prefill) and the paged backend against the
//     reference over a sampled grid: head_dim {32, 64, 80, 96, 128, 256} ×
//     window {0, 1, 17, 128, 512, longer than the sequence} × causal on/off
//     (two-sided windows when off) × GQA 1, 4, 8 and 4 q-heads over one
//     kv-head × lengths {1, 17, 127, 1000} × soft-cap on/off, varlen;
//   - adversarial logits: a new maximum in every key tile, a late spike,
//     huge magnitudes with and without the cap;
//   - keys outside every window hold NaN (and, paged, whole pages of them),
//     so a path that lets one reach the output fails.
// The full grid (with longer sequences) runs on the GPU suites.
//
// Tolerances are the fixtures' (AttentionProblem / PagedProblem::
// tolerance()), derived from the dtype's unit roundoff; the soft-cap does not
// change them (tanh is 1-Lipschitz: |cap·tanh(a/cap) − cap·tanh(b/cap)| <=
// |a − b|, so it cannot grow the logits' float error). Cases with huge
// logits state their own lse bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention/cpu/attention_cpu.hpp"
#include "attention/cpu/paged_attention_cpu.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/half.hpp"
#include "flashscope/paged_attention.hpp"
#include "support/attention_problem.hpp"
#include "support/attention_reference.hpp"
#include "support/paged_problem.hpp"

namespace fs = flashscope;
using fs::DType;
using fs::testing::AttentionProblem;
using fs::testing::AttentionShape;
using fs::testing::Layout;
using fs::testing::NaiveResult;
using fs::testing::Operand;
using fs::testing::PagedProblem;
using fs::testing::PagedShape;
using fs::testing::dense_shape;
using fs::testing::naive_attention;
using fs::testing::poison_invisible_keys;
using fs::testing::varlen_shape;

namespace {

const double kFloatUlp = std::ldexp(1.0, -24);

// The tiled backend through prefill() against the reference: status, guards,
// output and lse within the dtype's tolerance (lse_bound overrides it).
void check_tiled(AttentionProblem& prob, double lse_bound = -1) {
  INFO(prob.shape().describe());
  prob.reset_outputs();
  const fs::Status st = fs::prefill(prob.host_params());
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
  CHECK(lse_err <= (lse_bound >= 0 ? lse_bound : tol.lse_abs));
}

void check_tiled(const AttentionShape& shape, bool poison = true) {
  AttentionProblem prob(shape);
  if (poison) poison_invisible_keys(prob);
  check_tiled(prob);
}

void check_paged(PagedProblem& prob) {
  INFO(prob.shape().describe());
  prob.reset_outputs();
  const fs::Status st = fs::paged_attention(prob.host_params());
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.message());
  CHECK(prob.guards_intact());
  const auto tol = prob.tolerance();
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  const double serr = prob.worst_sequence_error(out.data());
  const double aerr = prob.max_abs_error(out.data());
  const double lerr = prob.lse_max_abs_error(lse.data());
  CAPTURE(serr);
  CAPTURE(aerr);
  CAPTURE(lerr);
  CHECK(serr < tol.normalized);
  CHECK(aerr < tol.max_abs);
  CHECK(lerr < tol.lse_abs);
}

// The reference's answer for a tiny problem whose outputs are computed by hand.
struct Tiny {
  AttentionProblem prob;
  explicit Tiny(AttentionShape s) : prob(std::move(s)) {}
  float o(int i, int d = 0) { return prob.reference().o[size_t(i * prob.shape().head_dim + d)]; }
  float lse(int i) { return prob.reference().lse[size_t(i)]; }
};

// q = 0 (every score 0, so every visible key weighs the same) and
// v_j = j + 1 in every dim: a row's output is the mean of (j + 1) over its
// visible keys, its lse the log of their count.
AttentionShape uniform_shape(int lq, int lk, bool causal, int left, int right) {
  AttentionShape s = dense_shape(1, 1, 1, lq, lk, 32, causal);
  s.window_left = left;
  s.window_right = right;
  return s;
}
void make_uniform(AttentionProblem& prob) {
  const AttentionShape& s = prob.shape();
  for (int d = 0; d < s.head_dim; ++d) {
    for (int i = 0; i < s.q_len; ++i) prob.set(Operand::kQ, 0, i, 0, d, 0.0f);
    for (int j = 0; j < s.kv_len; ++j) prob.set(Operand::kV, 0, j, 0, d, float(j + 1));
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// The reference

TEST_CASE("reference: sliding windows by hand") {
  struct Row {
    double mean;  // of (j + 1) over the visible keys
    int keys;
  };
  struct Case {
    const char* what;
    AttentionShape shape;
    std::vector<Row> rows;
  };
  const Case cases[] = {
      // Query i sits at position i and sees keys [i - 1, i].
      {"causal, window_left 1", uniform_shape(4, 4, true, 1, -1), {{1, 1}, {1.5, 2}, {2.5, 2}, {3.5, 2}}},
      // window_left 0: each query sees only its own key.
      {"causal, window_left 0", uniform_shape(3, 3, true, 0, 0), {{1, 1}, {2, 1}, {3, 1}}},
      // Bottom-right: query i sits at position i + 3 and sees [i + 1, i + 3].
      {"causal, chunk after 3 cached keys, window_left 2", uniform_shape(2, 5, true, 2, -1), {{3, 3}, {4, 3}}},
      // Two-sided: keys [i - 1, i + 1], clipped to [0, 3].
      {"two-sided (1, 1)", uniform_shape(4, 4, false, 1, 1), {{1.5, 2}, {2, 3}, {3, 3}, {3.5, 2}}},
      // Non-causal with window_right 0 is causal: keys [0, i + 2].
      {"window_right 0, non-causal", uniform_shape(3, 5, false, -1, 0), {{2, 3}, {2.5, 4}, {3, 5}}},
      // A window longer than the sequence is no window.
      {"causal, window longer than the keys", uniform_shape(3, 3, true, 100, -1), {{1, 1}, {1.5, 2}, {2, 3}}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Tiny t(c.shape);
    make_uniform(t.prob);
    REQUIRE(t.prob.reference().status.ok());
    for (size_t i = 0; i < c.rows.size(); ++i) {
      CAPTURE(i);
      for (int d = 0; d < 32; ++d) CHECK(t.o(int(i), d) == doctest::Approx(c.rows[i].mean).epsilon(1e-6));
      CHECK(t.lse(int(i)) == doctest::Approx(std::log(double(c.rows[i].keys))).epsilon(1e-6));
    }
    // The tiled backend agrees: p = 1 for every visible key, so only the
    // bf16 store of the mean rounds.
    REQUIRE(fs::prefill(t.prob.host_params()).ok());
    const std::vector<float> out = t.prob.output_as_float();
    const std::vector<float> lse = t.prob.lse_values();
    for (size_t i = 0; i < c.rows.size(); ++i) {
      CAPTURE(i);
      CHECK(out[i * 32] == fs::bf16_to_float(fs::float_to_bf16(float(c.rows[i].mean))));
      CHECK(lse[i] == doctest::Approx(std::log(double(c.rows[i].keys))).epsilon(1e-6));
    }
  }
}

TEST_CASE("reference: soft-cap by hand") {
  // One query, two keys: s0 = 0, s1 = scale · q·k1 = 6 (q = 2·e0, k1 = 3·e0,
  // scale 1). Capped at 5: s1' = 5·tanh(6/5). With v0 = 0 and v1 = 1 the
  // output is the weight of key 1, e^s1' / (1 + e^s1'); lse = ln(1 + e^s1').
  AttentionShape s = dense_shape(1, 1, 1, 1, 2, 32, false);
  s.softmax_scale = 1.0f;
  s.softcap = 5.0f;
  AttentionProblem prob(s);
  for (int d = 0; d < 32; ++d) {
    prob.set(Operand::kQ, 0, 0, 0, d, d == 0 ? 2.0f : 0.0f);
    prob.set(Operand::kK, 0, 0, 0, d, 0.0f);
    prob.set(Operand::kK, 0, 1, 0, d, d == 0 ? 3.0f : 0.0f);
    prob.set(Operand::kV, 0, 0, 0, d, 0.0f);
    prob.set(Operand::kV, 0, 1, 0, d, 1.0f);
  }
  const double capped = 5.0 * std::tanh(6.0 / 5.0);
  const double want_o = std::exp(capped) / (1.0 + std::exp(capped));
  const double want_lse = std::log(1.0 + std::exp(capped));
  const auto& ref = prob.reference();
  REQUIRE(ref.status.ok());
  for (int d = 0; d < 32; ++d) CHECK(std::fabs(ref.o[size_t(d)] - want_o) <= 4 * kFloatUlp);
  CHECK(std::fabs(ref.lse[0] - want_lse) <= 4 * kFloatUlp * want_lse);
  // Uncapped, the weight of key 1 would be e^6 / (1 + e^6) = 0.9975: far off.
  REQUIRE(std::fabs(want_o - std::exp(6.0) / (1 + std::exp(6.0))) > 0.01);

  REQUIRE(fs::prefill(prob.host_params()).ok());
  // The tiled backend rounds P to bf16 (u = 2^-8 relative, the derivation of
  // AttentionProblem::tolerance()) and stores o in bf16.
  const float out = prob.output_as_float()[0];
  CHECK(std::fabs(out - want_o) <= 2 * std::ldexp(1.0, -8));
  CHECK(std::fabs(prob.lse_values()[0] - want_lse) <= 1e-5);
}

TEST_CASE("reference matches a naive masked softmax with windows and soft-cap") {
  std::vector<AttentionShape> shapes = {
      dense_shape(1, 2, 2, 9, 9, 32, true),
      dense_shape(1, 4, 1, 5, 23, 80, true),   // chunked prefill, Gemma-3's 4 over 1
      dense_shape(1, 2, 1, 11, 11, 96, false),
      dense_shape(1, 3, 3, 30, 7, 64, false),  // q_len > kv_len, two-sided
      varlen_shape({5, 0, 12}, {9, 3, 12}, 4, 2, 256, true),
      varlen_shape({6, 3}, {6, 9}, 2, 1, 128, false),
  };
  const int lefts[] = {2, 0, 3, 1, 4, 5};
  const int rights[] = {-1, 0, 3, 2, -1, -1};
  for (size_t n = 0; n < shapes.size(); ++n) {
    shapes[n].window_left = lefts[n];
    shapes[n].window_right = rights[n];
    shapes[n].softcap = n % 2 ? 0.0f : 0.8f;  // small enough to bend these logits
    shapes[n].layout = n % 3 == 1 ? Layout::kBHSD : n % 3 == 2 ? Layout::kPaddedBSHD : Layout::kBSHD;
    shapes[n].dtype = n % 2 ? DType::kFP16 : DType::kBF16;
    shapes[n].seed = 500 + n;
  }
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
        REQUIRE(ref.lse[i] == -std::numeric_limits<float>::infinity());
      } else {
        REQUIRE(std::fabs(ref.lse[i] - naive.lse[i]) <= 4 * kFloatUlp * (1 + std::fabs(naive.lse[i])));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The tiled backend

TEST_CASE("tiled CPU backend: head_dim × window × causal over the reference") {
  // Every (head_dim, window, causal) triple; lengths, GQA, dtype, layout and
  // the soft-cap rotate with the case index so each meets many of the others.
  // Non-causal windows are two-sided (right = left, or a shorter right).
  const int dims[] = {32, 64, 80, 96, 128, 256};
  const int windows[] = {0, 1, 17, 128, 512, 5000};  // 5000: longer than any sequence here
  const int lengths[][2] = {{1, 1}, {17, 17}, {127, 127}, {1000, 1000}, {1, 1000}, {17, 127}, {127, 1000}, {17, 1}};
  const int heads[][2] = {{2, 2}, {4, 1}, {8, 2}, {8, 1}};
  const Layout layouts[] = {Layout::kBSHD, Layout::kBHSD, Layout::kPaddedBSHD};
  int n = 0;
  for (int dim : dims) {
    for (int window : windows) {
      for (bool causal : {true, false}) {
        const auto& len = lengths[(n * 5 + dim / 16) % 8];
        const auto& h = heads[n % 4];
        const bool big = int64_t(len[0]) * len[1] * dim >= int64_t(1000) * 1000 * 64;
        AttentionShape s = dense_shape(1, big ? h[0] / h[1] : h[0], big ? 1 : h[1], len[0], len[1], dim, causal);
        s.window_left = window;
        s.window_right = causal ? (n % 3 == 0 ? 0 : -1) : (n % 2 ? window : window / 3);
        s.softcap = n % 3 == 1 ? 30.0f : n % 3 == 2 ? 2.0f : 0.0f;
        s.dtype = (n / 2) % 2 ? DType::kFP16 : DType::kBF16;
        s.layout = layouts[(n / 3) % 3];
        s.seed = 7000 + uint64_t(n);
        check_tiled(s);
        ++n;
      }
    }
  }
}

TEST_CASE("tiled CPU backend: windows with varlen batches") {
  struct Case {
    std::vector<int> q_lens, kv_lens;
  };
  const Case cases[] = {
      {{1, 17, 127, 300}, {1, 40, 127, 1000}},  // prefill after a prefix
      {{17, 5, 100}, {5, 17, 100}},             // q_len > kv_len in one sequence
      {{33, 0, 70}, {33, 12, 0}},               // empty sequences
  };
  int n = 0;
  for (const Case& c : cases) {
    for (bool causal : {true, false}) {
      for (int window : {1, 17, 128}) {
        AttentionShape s = varlen_shape(c.q_lens, c.kv_lens, n % 2 ? 4 : 8, 1, n % 3 ? 96 : 256, causal);
        s.window_left = window;
        s.window_right = causal ? -1 : window / 2;
        s.softcap = n % 2 ? 0.0f : 20.0f;
        s.dtype = n % 4 >= 2 ? DType::kFP16 : DType::kBF16;
        s.seed = 7500 + uint64_t(n++);
        check_tiled(s);
      }
    }
  }
}

TEST_CASE("tiled CPU backend: without a window, every new head_dim over the reference, soft-cap on and off") {
  int n = 0;
  for (int dim : {32, 80, 96, 256}) {
    for (bool causal : {true, false}) {
      AttentionShape s = dense_shape(2, 4, 1, 127, 300, dim, causal);
      s.softcap = n % 2 ? 50.0f : 0.0f;
      s.dtype = n % 4 >= 2 ? DType::kFP16 : DType::kBF16;
      s.seed = 7700 + uint64_t(n++);
      check_tiled(s, /*poison=*/false);
    }
  }
}

TEST_CASE("tiled CPU backend: a window of the whole sequence equals no window, bit for bit") {
  // window_left = kv_len - 1 lets every causal row see all of its keys: the
  // same tiles, the same float operations.
  for (int dim : {64, 256}) {
    AttentionShape s = dense_shape(1, 4, 1, 200, 300, dim, true);
    s.seed = 7800;
    AttentionProblem a(s);
    s.window_left = 299;
    AttentionProblem b(s);
    REQUIRE(fs::prefill(a.host_params()).ok());
    REQUIRE(fs::prefill(b.host_params()).ok());
    const std::vector<float> oa = a.output_as_float(), ob = b.output_as_float();
    CHECK(std::equal(oa.begin(), oa.end(), ob.begin()));
  }
}

TEST_CASE("tiled CPU backend: adversarial logits with windows") {
  SUBCASE("a new maximum in every key tile") {
    // k_j = (1 + j/32)·q: the score grows with j, so every 64-key tile a row
    // sees raises its running max and rescales O and l.
    for (bool causal : {true, false}) {
      AttentionShape s = dense_shape(1, 4, 1, 300, 600, 128, causal);
      s.window_left = 200;
      s.window_right = causal ? -1 : 100;
      s.softmax_scale = 0.02f;
      s.seed = 7900;
      AttentionProblem prob(s);
      for (int j = 0; j < s.kv_len; ++j)
        for (int d = 0; d < s.head_dim; ++d)
          prob.set(Operand::kK, 0, j, 0, d, (1.0f + float(j) / 32.0f) * prob.get(Operand::kQ, 0, 299, 0, d));
      poison_invisible_keys(prob);
      check_tiled(prob);
    }
  }
  SUBCASE("a late spike: the last key of each window dominates") {
    AttentionShape s = dense_shape(1, 2, 1, 64, 1000, 64, true);
    s.window_left = 300;
    s.seed = 7901;
    AttentionProblem prob(s);
    for (int d = 0; d < s.head_dim; ++d)
      prob.set(Operand::kK, 0, 999, 0, d, 8.0f * prob.get(Operand::kQ, 0, 63, 0, d));
    poison_invisible_keys(prob);
    check_tiled(prob);
  }
  SUBCASE("huge magnitudes, capped and uncapped") {
    // q, k ~ 16·N(0, 1): logits ~ 16²·sqrt(D)/sqrt(D)·N(0,1) ≈ ±256·(a few).
    // lse's float error then scales with |logit|: D·2^-24·scale·Σ|q_d k_d|
    // bounds the dot (≈ 64·2^-24·4000 ≈ 0.015), so 0.05 uncapped; capped at
    // 50 the logits are within ±50 and tanh does not grow their error.
    for (float cap : {0.0f, 50.0f}) {
      AttentionShape s = dense_shape(1, 4, 1, 130, 400, 64, true);
      s.window_left = 128;
      s.softcap = cap;
      s.seed = 7902;
      AttentionProblem prob(s);
      for (int j = 0; j < s.kv_len; ++j)
        for (int d = 0; d < s.head_dim; ++d) prob.set(Operand::kK, 0, j, 0, d, 16.0f * prob.get(Operand::kK, 0, j, 0, d));
      for (int i = 0; i < s.q_len; ++i)
        for (int h = 0; h < s.q_heads; ++h)
          for (int d = 0; d < s.head_dim; ++d) prob.set(Operand::kQ, 0, i, h, d, 16.0f * prob.get(Operand::kQ, 0, i, h, d));
      poison_invisible_keys(prob);
      check_tiled(prob, cap > 0 ? 2e-3 : 5e-2);
    }
  }
}

TEST_CASE("tiled CPU backend: a query whose two-sided window holds no key gives zeros and lse = -inf") {
  // Non-causal, q_len 40 > kv_len 10: query i sits at position i - 30 and
  // sees keys [i - 31, i - 29]; queries 0..28 see none.
  AttentionShape s = dense_shape(1, 2, 1, 40, 10, 64, false);
  s.window_left = 1;
  s.window_right = 1;
  s.seed = 7950;
  AttentionProblem prob(s);
  REQUIRE(fs::prefill(prob.host_params()).ok());
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 40; ++i) {
      CAPTURE(i);
      const bool empty = i < 29;
      CHECK(std::isinf(lse[size_t(h * 40 + i)]) == empty);
      if (empty)
        for (int d = 0; d < 64; ++d) CHECK(out[size_t((i * 2 + h) * 64 + d)] == 0.0f);
    }
  check_tiled(prob);
}

// ---------------------------------------------------------------------------
// The paged backend

TEST_CASE("cpu paged attention: windows, soft-cap and head_dims over the reference") {
  using fs::testing::paged_lengths;
  using fs::testing::paged_shape;
  struct Case {
    PagedShape s;
    int left, right;
    float cap;
  };
  std::vector<Case> grid = {
      {paged_shape({1, 17, 127, 1000}, 4, 1, 1, 256, 16, 1), 512, -1, 0.0f},    // Gemma 3's local layers
      {paged_shape({1, 17, 127, 1000}, 4, 1, 1, 256, 16, 2), 1, -1, 30.0f},
      {paged_shape({17, 127, 1000}, 8, 1, 4, 96, 64, 3), 17, -1, 0.0f},         // drafted tokens
      {paged_shape(paged_lengths(12, 1, 1500, 4), 8, 2, 1, 32, 16, 4), 128, -1, 50.0f},
      {paged_shape({999, 1000, 8}, 4, 4, 8, 80, 256, 5), 0, 0, 0.0f},
      {paged_shape({300, 1000}, 4, 1, 1, 128, 16, 6), 5000, -1, 0.0f},         // window past the start
      {paged_shape({127, 1000}, 8, 1, 3, 64, 32, 7), 17, 1, 0.0f},              // non-causal, two-sided
      {paged_shape({1000, 400}, 4, 2, 5, 256, 16, 8), 128, -1, 0.0f},
  };
  grid[2].s.dtype = DType::kFP16;
  grid[4].s.dtype = DType::kFP16;
  grid[6].s.causal = false;
  grid[7].s.shared_prefix_pages = 10;  // forked sequences: shared pages outside one window, inside another's
  for (Case& c : grid) {
    c.s.window_left = c.left;
    c.s.window_right = c.right;
    c.s.softcap = c.cap;
    PagedProblem prob(c.s);
    prob.poison_pages_outside_windows();
    check_paged(prob);
  }
}

TEST_CASE("cpu paged attention: pages before every window are never read") {
  // 4 sequences of 2000 keys in pages of 16, window 100: each has
  // (2000 - 1 - 100) / 16 = 118 whole pages before its window, all NaN.
  PagedShape s = fs::testing::paged_shape({2000, 2000, 1990, 2001}, 4, 1, 1, 64, 16, 9);
  s.window_left = 100;
  PagedProblem prob(s);
  CHECK(prob.poison_pages_outside_windows() >= 4 * 118);
  check_paged(prob);
}

TEST_CASE("cpu paged attention: a window equals the same window in dense prefill over the gathered keys") {
  // Decode of q_len new tokens at the end of kv_len keys is the causal
  // prefill's last rows: query t at position kv_len - q_len + t. The paged
  // path skips the pages before the window, the dense one the tiles: both
  // within tolerance of one reference, and of each other.
  PagedShape ps = fs::testing::paged_shape({700}, 4, 1, 3, 128, 16, 10);
  ps.window_left = 64;
  ps.softcap = 25.0f;
  PagedProblem paged(ps);
  check_paged(paged);

  AttentionShape ds = dense_shape(1, 4, 1, 3, 700, 128, true);
  ds.window_left = 64;
  ds.softcap = 25.0f;
  AttentionProblem dense(ds);
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < 128; ++d) dense.set(Operand::kQ, 0, t, h, d, paged.q_at(0, t, h, d));
  for (int j = 0; j < 700; ++j)
    for (int d = 0; d < 128; ++d) {
      dense.set(Operand::kK, 0, j, 0, d, paged.k_at(0, j, 0, d));
      dense.set(Operand::kV, 0, j, 0, d, paged.v_at(0, j, 0, d));
    }
  REQUIRE(fs::prefill(dense.host_params()).ok());
  const std::vector<float> a = paged.output_as_float(), b = dense.output_as_float();
  REQUIRE(a.size() == b.size());
  const double u = std::ldexp(1.0, -8);
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) <= 4 * u * paged.max_abs_v());
}

TEST_CASE("prefill_flops counts the pairs a window lets in") {
  fs::PrefillParams p;
  p.q_heads = 2;
  p.head_dim = 64;
  p.q_len = p.kv_len = 4;
  p.causal = true;
  p.window_left = 1;  // rows see 1, 2, 2, 2 keys
  CHECK(fs::prefill_flops(p) == 4.0 * 7 * 2 * 64);
  p.causal = false;
  p.window_right = 1;  // rows see 2, 3, 3, 2 keys
  CHECK(fs::prefill_flops(p) == 4.0 * 10 * 2 * 64);
  p.q_len = 2;
  p.kv_len = 5;
  p.causal = true;
  p.window_right = -1;
  p.window_left = 2;  // rows at positions 3 and 4 see 3 keys each
  CHECK(fs::prefill_flops(p) == 4.0 * 6 * 2 * 64);
  p.window_left = 100;  // a window past the start: every causal pair (4 + 5)
  CHECK(fs::prefill_flops(p) == 4.0 * 9 * 2 * 64);
  // varlen with host prefix sums: per sequence.
  const int32_t cu_q[] = {0, 2, 6}, cu_k[] = {0, 5, 9};
  p.batch = 2;
  p.q_len = 4;
  p.kv_len = 5;
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_k = cu_k;
  p.window_left = 0;  // causal, each row only its own key: 2 + 4 pairs
  CHECK(fs::prefill_flops(p) == 4.0 * 6 * 2 * 64);
}
