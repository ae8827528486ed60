// Sliding windows, logit soft-capping and head_dim 32, 80, 96 and 256 on the CUDA
// paths (the sm80 kernel family, varlen, paged decode with split-KV and
// chunked prefill over the page cache) against the FP64 reference:
//   - dense prefill: head_dim {64, 96, 128, 256} x window {1, 17, 128, 512,
//     4096, longer than the sequence} x causal on/off (two-sided windows when
//     off) x GQA 1, 4, 8 and Gemma 3's 4 q-heads over one kv-head x lengths
//     {1, 17, 127, 1000, 4096, 9000} (the long ones sampled) x soft-cap on/off,
//     both dtypes by turns; varlen batches; every head_dim without a window;
//   - head_dim 32 and 80 (the sm80 family on every GPU: 80 is five k16
//     steps, its last K fragment read with ldmatrix.x2): dense, windows,
//     soft-cap, varlen, paged decode and chunked prefill with split-KV (80's
//     combine cuts rows into slices that end inside a 128-byte line), a
//     probed capture;
//   - adversarial logits: a new maximum in every key tile, a late spike,
//     huge magnitudes with and without the cap;
//   - paged: decode and chunked prefill over windows, split-KV forced and
//     planned, pages wholly before every window filled with NaN (the kernels
//     must not read them), the split plan sized by the window;
//   - refusals: a kernel without a window or head_dim build says so (the
//     Hopper kernel runs them on dense tensors, not on varlen batches);
//   - the trace capture of a windowed run: the tiles each CTA visits and the
//     skipped ones the dashboard draws (on the sm80 kernel: the Hopper one
//     has no probed window kernels).
// Keys no query sees hold NaN in the dense cases too, outputs start as NaN
// inside guard regions. Tolerances are the fixtures' (tied to the dtype).
// Without a CUDA device each case says it was skipped and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope_lab/lab.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/paged_attention.hpp"
#include "flashscope/trace_capture.hpp"
#include "support/attention_problem.hpp"
#include "support/attention_reference.hpp"
#include "support/device_attention.hpp"
#include "support/gpu.hpp"
#include "support/paged_problem.hpp"
#include "util/math.hpp"

using namespace flashscope;
using flashscope::testing::AttentionProblem;
using flashscope::testing::AttentionShape;
using flashscope::testing::DeviceAttention;
using flashscope::testing::DevicePagedAttention;
using flashscope::testing::Layout;
using flashscope::testing::Operand;
using flashscope::testing::PagedProblem;
using flashscope::testing::PagedShape;
using flashscope::testing::dense_shape;
using flashscope::testing::poison_invisible_keys;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::varlen_shape;

namespace {

// `kernel` on a device copy of the problem against the reference, within
// the dtype's tolerances (lse_bound, when set, overrides the lse one).
void check_on_gpu(AttentionProblem& prob, PrefillKernel kernel = PrefillKernel::kAuto, double lse_bound = -1) {
  INFO("case: ", prob.shape().describe(), " kernel ", std::string(prefill_kernel_name(kernel)));
  prob.reset_outputs();
  DeviceAttention dev(prob);
  const PrefillParams p = dev.params(prob, kernel);
  const Status st = prefill(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  const Status sync = device_synchronize();
  REQUIRE_MESSAGE(sync.ok(), sync.to_string());
  dev.read(prob);
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.to_string());
  const auto tol = prob.tolerance();
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  CHECK_MESSAGE(prob.guards_intact(), "a write landed outside the output or lse");
  const double nerr = prob.normalized_error(out.data());
  const double aerr = prob.max_abs_error(out.data());
  const double lerr = prob.lse_max_abs_error(lse.data());
  CHECK_MESSAGE(nerr < tol.normalized, "normalized error ", nerr, " >= ", tol.normalized);
  CHECK_MESSAGE(aerr < tol.max_abs, "max abs error ", aerr, " >= ", tol.max_abs);
  const double lse_tol = lse_bound > 0 ? lse_bound : tol.lse_abs;
  CHECK_MESSAGE(lerr < lse_tol, "lse error ", lerr, " >= ", lse_tol);
}

// The kernel the library builds windows for at head_dim d (auto's sm80 choice).
PrefillKernel sm80_kernel(int d) { return d <= 64 || d == 256 ? PrefillKernel::kV5 : PrefillKernel::kV6; }

struct WindowCase {
  int q_len, kv_len, left;
  bool causal;
};

// The dense window grid: every window against lengths it is shorter than,
// about as long as, and longer than; the long sequences only with windows
// that keep the FP64 reference to a few seconds.
std::vector<AttentionShape> window_grid() {
  const int lens[][2] = {{1, 1}, {17, 17}, {127, 127}, {1000, 1000}, {17, 1000}, {127, 4096}, {4096, 4096}, {9000, 9000}};
  const int windows[] = {1, 17, 128, 512, 4096, 20000};  // the last: longer than any sequence
  const int heads[][2] = {{1, 1}, {4, 1}, {8, 1}, {8, 2}};  // GQA 1, Gemma 3's 4:1, 8, 4
  const int dims[] = {64, 96, 128, 256};
  std::vector<AttentionShape> shapes;
  int i = 0;
  for (const auto& len : lens)
    for (int w : windows) {
      const bool long_seq = len[0] >= 4096;
      if (long_seq && w > 512) continue;  // the reference's cost grows with the window
      for (bool causal : {true, false}) {
        const int d = dims[i % 4];
        const auto& h = heads[(i / 4) % 4];
        // Long sequences: one head, so the FP64 reference stays a few seconds.
        AttentionShape s = dense_shape(long_seq ? 1 : 2, long_seq ? 1 : h[0], long_seq ? 1 : h[1], len[0], len[1], d,
                                       causal, uint64_t(5000 + i));
        s.window_left = w;
        // Non-causal: a two-sided window, narrower on the right by turns.
        s.window_right = causal ? -1 : (i % 2 ? w : w / 3);
        s.softcap = i % 3 == 0 ? 30.0f : 0.0f;
        s.dtype = i % 5 == 2 ? DType::kFP16 : DType::kBF16;
        s.layout = i % 7 == 3 ? Layout::kBHSD : Layout::kBSHD;
        shapes.push_back(s);
        ++i;
      }
    }
  return shapes;
}

// A paged problem through paged_attention() with num_splits forced (0: the
// plan), against the reference.
void check_paged_on_gpu(PagedProblem& prob, int num_splits) {
  INFO("case: ", prob.shape().describe(), " num_splits=", num_splits);
  DevicePagedAttention dev(prob);
  dev.poison(prob);
  PagedAttentionParams p = dev.params(prob);
  p.num_splits = num_splits;
  auto plan = plan_paged_attention(p);
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  DeviceBuffer workspace;
  if (plan->workspace_bytes > 0) {
    auto w = DeviceBuffer::allocate(plan->workspace_bytes);
    REQUIRE_MESSAGE(w.ok(), w.status().to_string());
    workspace = std::move(w.value());
    REQUIRE(workspace.fill_bytes(0xFF).ok());  // NaN: a split read before it is written shows
  }
  p.workspace = workspace.data();
  p.workspace_bytes = workspace.size();
  const Status st = paged_attention(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  REQUIRE(device_synchronize().ok());
  dev.read(prob);
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.to_string());
  const auto tol = prob.tolerance();
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  CHECK_MESSAGE(prob.guards_intact(), "a write landed outside o or lse");
  int worst_seq = -1;
  const double serr = prob.worst_sequence_error(out.data(), &worst_seq);
  const double aerr = prob.max_abs_error(out.data());
  const double lerr = prob.lse_max_abs_error(lse.data());
  CHECK_MESSAGE(serr < tol.normalized, "sequence ", worst_seq, " normalized error ", serr, " >= ", tol.normalized);
  CHECK_MESSAGE(aerr < tol.max_abs, "max abs error ", aerr, " >= ", tol.max_abs);
  CHECK_MESSAGE(lerr < tol.lse_abs, "lse error ", lerr, " >= ", tol.lse_abs);
}

}  // namespace

TEST_CASE("gpu window: head_dim 96 and 256 without a window, both dtypes, over the reference") {
  if (skip_without_gpu()) return;
  const int lens[][2] = {{1, 1}, {17, 17}, {127, 1000}, {1000, 127}, {1000, 1000}, {64, 4096}};
  const int heads[][2] = {{1, 1}, {4, 1}, {8, 1}, {9, 3}};
  int i = 0;
  for (int d : {96, 256})
    for (const auto& len : lens)
      for (bool causal : {false, true}) {
        AttentionShape s = dense_shape(2, heads[i % 4][0], heads[i % 4][1], len[0], len[1], d, causal, uint64_t(6000 + i));
        s.dtype = i % 2 ? DType::kFP16 : DType::kBF16;
        s.layout = i % 3 == 1 ? Layout::kPaddedBSHD : Layout::kBSHD;
        ++i;
        AttentionProblem prob(s);
        check_on_gpu(prob, PrefillKernel::kAuto);
        check_on_gpu(prob, sm80_kernel(d));
      }
}

TEST_CASE("gpu window: sliding windows over the reference, every head_dim, GQA, causal and two-sided") {
  if (skip_without_gpu()) return;
  for (const AttentionShape& s : window_grid()) {
    AttentionProblem prob(s);
    poison_invisible_keys(prob);
    check_on_gpu(prob, PrefillKernel::kAuto);
  }
}

// More work tiles than any GPU has SMs, so the Hopper kernel runs its
// persistent CTAs (window_grid's shapes all fit one wave): each CTA walks
// several windowed work tiles in turn (at head_dim 128 with short windows,
// the window tiles: 128 keys, the next work tile's Q in a second buffer),
// including runs of work tiles whose rows see no key beside ones that do.
TEST_CASE("gpu window: persistent CTAs over many windowed work tiles") {
  if (skip_without_gpu()) return;
  struct Case {
    int batch, q_heads, kv_heads, q_len, kv_len, dim, left, right;
    bool causal;
    float cap;
  };
  const Case cases[] = {
      {2, 16, 4, 2048, 2048, 128, 512, -1, true, 0.0f},     // 512 work tiles, five key tiles each
      {1, 32, 8, 1536, 1536, 128, 1000, -1, true, 30.0f},   // a wider window, capped
      {2, 16, 2, 1024, 1024, 128, 200, 77, false, 0.0f},    // two-sided
      {1, 64, 8, 900, 3000, 128, 300, -1, true, 0.0f},      // a chunk at the end of a longer context
      {1, 64, 8, 2000, 300, 128, 100, -1, true, 0.0f},      // rows 0..1699 see nothing: keyless tiles first
      {2, 16, 4, 2048, 2048, 64, 512, -1, true, 0.0f},      // the other head_dims' persistent window kernels
      {1, 16, 4, 2048, 2048, 256, 512, -1, true, 0.0f},
  };
  int i = 0;
  for (const Case& c : cases) {
    AttentionShape s = dense_shape(c.batch, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.dim, c.causal, uint64_t(6150 + i));
    s.window_left = c.left;
    s.window_right = c.right;
    s.softcap = c.cap;
    s.dtype = i % 3 == 1 ? DType::kFP16 : DType::kBF16;
    ++i;
    AttentionProblem prob(s);
    poison_invisible_keys(prob);
    check_on_gpu(prob, PrefillKernel::kAuto);
  }
}

TEST_CASE("gpu window: soft-cap without a window, causal and not, every head_dim") {
  if (skip_without_gpu()) return;
  int i = 0;
  for (int d : {64, 96, 128, 256})
    for (bool causal : {true, false})
      for (float cap : {50.0f, 5.0f}) {
        AttentionShape s = dense_shape(2, 8, 2, 300, 777, d, causal, uint64_t(6100 + i++));
        s.softcap = cap;
        s.dtype = i % 2 ? DType::kFP16 : DType::kBF16;
        AttentionProblem prob(s);
        check_on_gpu(prob, PrefillKernel::kAuto);
      }
}

TEST_CASE("gpu window: varlen batches with windows and soft-cap") {
  if (skip_without_gpu()) return;
  int i = 0;
  for (int d : {64, 128, 256})
    for (bool causal : {true, false}) {
      AttentionShape s = causal ? varlen_shape({1, 17, 300, 64, 129}, {1, 17, 700, 64, 200}, 8, 2, d, true)
                                : varlen_shape({1, 17, 300, 64, 129}, {5, 1000, 300, 1, 129}, 9, 3, d, false);
      s.seed = uint64_t(6200 + i);
      s.window_left = i % 2 ? 17 : 128;
      s.window_right = causal ? -1 : 40;
      s.softcap = i % 3 == 1 ? 20.0f : 0.0f;
      ++i;
      AttentionProblem prob(s);
      poison_invisible_keys(prob);
      check_on_gpu(prob, PrefillKernel::kAuto);
    }
}

TEST_CASE("gpu window: a window of 0, windows whose queries see nothing, queries before every key") {
  if (skip_without_gpu()) return;
  // window_left = 0, causal: every query sees exactly its own key.
  AttentionShape a = dense_shape(1, 4, 1, 200, 300, 128, true, 6300);
  a.window_left = 0;
  AttentionProblem pa(a);
  poison_invisible_keys(pa);
  check_on_gpu(pa);
  // Non-causal, q_len 40 > kv_len 10, window (1, 1): queries 0..28 see no
  // key (zeros, lse = -inf), the rest one to three.
  AttentionShape b = dense_shape(1, 2, 1, 40, 10, 64, false, 6301);
  b.window_left = 1;
  b.window_right = 1;
  AttentionProblem pb(b);
  check_on_gpu(pb);
  // Non-causal, 700 queries over 100 keys: whole q-tiles sit at negative
  // positions (query i at i - 600) and, with the right side unbounded or
  // wide, still see keys.
  for (int right : {-1, 300}) {
    AttentionShape c = dense_shape(1, 4, 1, 700, 100, 256, false, uint64_t(6302 + right));
    c.window_left = 50;
    c.window_right = right;
    AttentionProblem pc(c);
    check_on_gpu(pc);
  }
}

TEST_CASE("gpu window: adversarial logits") {
  if (skip_without_gpu()) return;
  SUBCASE("a new maximum in every key tile") {
    // k_j = (1 + j/32)·q: the score grows with j, so every key tile a row
    // sees raises its running max and rescales O and l.
    for (int d : {64, 256})
      for (bool causal : {true, false}) {
        AttentionShape s = dense_shape(1, 4, 1, 300, 600, d, causal, 6400);
        s.window_left = 200;
        s.window_right = causal ? -1 : 100;
        s.softmax_scale = 0.02f;
        AttentionProblem prob(s);
        for (int j = 0; j < s.kv_len; ++j)
          for (int c = 0; c < d; ++c)
            prob.set(Operand::kK, 0, j, 0, c, (1.0f + float(j) / 32.0f) * prob.get(Operand::kQ, 0, 299, 0, c));
        poison_invisible_keys(prob);
        check_on_gpu(prob);
      }
  }
  SUBCASE("a late spike: the last key of each window dominates") {
    for (int d : {96, 128}) {
      AttentionShape s = dense_shape(1, 2, 1, 64, 1000, d, true, 6401);
      s.window_left = 300;
      AttentionProblem prob(s);
      for (int c = 0; c < d; ++c) prob.set(Operand::kK, 0, 999, 0, c, 8.0f * prob.get(Operand::kQ, 0, 63, 0, c));
      poison_invisible_keys(prob);
      check_on_gpu(prob);
    }
  }
  SUBCASE("huge magnitudes, capped and uncapped") {
    // q, k ~ 16·N(0, 1): logits of a few hundred. The lse's float error
    // grows with |logit| (about 64·2^-24·4000 ≈ 0.015 for the dot): 0.05
    // uncapped; capped at 50 the logits stay within ±50 and tanh does not
    // grow their error (1-Lipschitz).
    for (float cap : {0.0f, 50.0f}) {
      AttentionShape s = dense_shape(1, 4, 1, 130, 400, 64, true, 6402);
      s.window_left = 128;
      s.softcap = cap;
      AttentionProblem prob(s);
      for (int j = 0; j < s.kv_len; ++j)
        for (int c = 0; c < s.head_dim; ++c) prob.set(Operand::kK, 0, j, 0, c, 16.0f * prob.get(Operand::kK, 0, j, 0, c));
      for (int i = 0; i < s.q_len; ++i)
        for (int h = 0; h < s.q_heads; ++h)
          for (int c = 0; c < s.head_dim; ++c)
            prob.set(Operand::kQ, 0, i, h, c, 16.0f * prob.get(Operand::kQ, 0, i, h, c));
      poison_invisible_keys(prob);
      check_on_gpu(prob, PrefillKernel::kAuto, cap > 0 ? 2e-3 : 5e-2);
    }
  }
}

TEST_CASE("gpu window: kernels without a build for a window or head_dim refuse by name") {
  if (skip_without_gpu()) return;
  struct Case {
    int d;
    PrefillKernel kernel;
    int left;
    float cap;
    const char* mentions;
  };
  const Case cases[] = {
      {128, PrefillKernel::kV5, 512, 0.0f, "sliding window"}, {64, PrefillKernel::kV6, -1, 30.0f, "soft-capping"},
      {256, PrefillKernel::kV6, -1, 0.0f, "head_dim 256"},   {96, PrefillKernel::kV5, -1, 0.0f, "head_dim 96"},
      {256, lab::kV1, -1, 0.0f, "head_dim 256"},   {80, PrefillKernel::kV5, -1, 0.0f, "head_dim 80"},
      {32, PrefillKernel::kV6, -1, 0.0f, "head_dim 32"},
  };
  for (const Case& c : cases) {
    AttentionShape s = dense_shape(1, 2, 1, 64, 64, c.d, true, 6500);
    s.window_left = c.left;
    s.softcap = c.cap;
    AttentionProblem prob(s);
    DeviceAttention dev(prob);
    const PrefillParams p = dev.params(prob, c.kernel);
    const Status st = prefill(p);
    INFO(s.describe(), " kernel ", std::string(prefill_kernel_name(c.kernel)), ": ", st.to_string());
    if (c.kernel == lab::kV1 && !prefill_kernel_runnable(lab::kV1)) continue;
    CHECK(st.code() == StatusCode::kUnsupported);
    CHECK(st.message().find(c.mentions) != std::string::npos);
  }
  if (prefill_kernel_runnable(PrefillKernel::kHopper)) {
    // The Hopper kernel runs windows, the soft-cap and head_dim 256 on dense
    // tensors (its TMA producer) ...
    AttentionShape s = dense_shape(1, 2, 1, 64, 64, 128, true, 6501);
    s.window_left = 17;
    AttentionProblem prob(s);
    poison_invisible_keys(prob);
    check_on_gpu(prob, PrefillKernel::kHopper);
    check_on_gpu(prob, PrefillKernel::kAuto);
    // ... and refuses them on varlen batches (its cp.async producer has
    // none), naming what it lacks; auto runs them on the sm80 family.
    struct VarlenCase {
      int d, left;
      float cap;
      const char* mentions;
    };
    // head_dim 32 and 80 are not whole 64-column blocks of its tiles: refused
    // by name, and auto runs them on the sm80 family.
    for (int d : {32, 80}) {
      AttentionShape h = dense_shape(1, 2, 1, 64, 64, d, true, 6503);
      AttentionProblem hprob(h);
      DeviceAttention hdev(hprob);
      const Status st = prefill(hdev.params(hprob, PrefillKernel::kHopper));
      INFO(h.describe(), " kernel hopper: ", st.to_string());
      CHECK(st.code() == StatusCode::kUnsupported);
      CHECK(st.message().find("head_dim " + std::to_string(d)) != std::string::npos);
      check_on_gpu(hprob, PrefillKernel::kAuto);
    }
    const VarlenCase varlen_cases[] = {
        {128, 17, 0.0f, "sliding window"}, {64, -1, 30.0f, "soft-capping"}, {256, -1, 0.0f, "head_dim 256"}};
    for (const VarlenCase& c : varlen_cases) {
      AttentionShape v = varlen_shape({64, 17}, {64, 40}, 2, 1, c.d, true, 6502);
      v.window_left = c.left;
      v.softcap = c.cap;
      AttentionProblem vprob(v);
      DeviceAttention vdev(vprob);
      const Status st = prefill(vdev.params(vprob, PrefillKernel::kHopper));
      INFO(v.describe(), " kernel hopper: ", st.to_string());
      CHECK(st.code() == StatusCode::kUnsupported);
      CHECK(st.message().find(c.mentions) != std::string::npos);
      CHECK(st.message().find("varlen") != std::string::npos);
      check_on_gpu(vprob, PrefillKernel::kAuto);
    }
  }
}

TEST_CASE("gpu window paged: decode and chunked prefill over windows, splits forced and planned") {
  if (skip_without_gpu()) return;
  using flashscope::testing::paged_lengths;
  using flashscope::testing::paged_shape;
  struct Case {
    PagedShape s;
    int left, right;
    float cap;
  };
  std::vector<Case> grid = {
      {paged_shape({1, 17, 127, 1000, 9000}, 4, 1, 1, 256, 16, 1), 512, -1, 0.0f},  // Gemma 3's local layers
      {paged_shape({1, 17, 127, 1000}, 4, 1, 1, 256, 16, 2), 1, -1, 30.0f},
      {paged_shape({17, 127, 1000, 4096}, 8, 1, 4, 96, 64, 3), 17, -1, 0.0f},  // drafted tokens
      {paged_shape(paged_lengths(12, 1, 1500, 4), 8, 2, 1, 64, 16, 4), 128, -1, 50.0f},
      {paged_shape({999, 1000, 8}, 4, 4, 8, 128, 256, 5), 0, -1, 0.0f},
      {paged_shape({300, 1000}, 4, 1, 1, 128, 16, 6), 5000, -1, 0.0f},  // a window past the start
      {paged_shape({127, 1000}, 8, 1, 3, 64, 32, 7), 17, 1, 0.0f},      // non-causal, two-sided
      {paged_shape({1000, 400}, 4, 2, 5, 256, 16, 8), 128, -1, 0.0f},
      {paged_shape({4096, 1000}, 8, 1, 300, 128, 16, 9), 512, -1, 0.0f},  // chunked prefill: the 128-row tile
      {paged_shape({2000, 700}, 4, 1, 200, 256, 64, 10), 4096, -1, 30.0f},
      {paged_shape({3000}, 8, 8, 70, 96, 16, 11), 128, -1, 0.0f},
  };
  grid[2].s.dtype = DType::kFP16;
  grid[4].s.dtype = DType::kFP16;
  grid[6].s.causal = false;
  grid[7].s.shared_prefix_pages = 10;  // forked sequences: shared pages outside one window, inside another's
  grid[10].s.dtype = DType::kFP16;
  for (Case& c : grid) {
    c.s.window_left = c.left;
    c.s.window_right = c.right;
    c.s.softcap = c.cap;
    PagedProblem prob(c.s);
    prob.poison_pages_outside_windows();
    for (int splits : {1, 0, 7}) check_paged_on_gpu(prob, splits);
  }
}

TEST_CASE("gpu window paged: head_dim 96 and 256 without a window, decode and chunked prefill") {
  if (skip_without_gpu()) return;
  using flashscope::testing::paged_shape;
  int i = 0;
  for (int d : {96, 256})
    for (int q_len : {1, 4, 100}) {
      // kv_lens count the new tokens (kv_lens[b] >= q_len, paged_attention.hpp):
      // the shortest sequence is a first chunk with no history, the next
      // has 16 cached tokens before its new ones.
      PagedShape s =
          paged_shape({q_len, q_len + 16, 1000, 3000}, 8, 2, q_len, d, i % 2 ? 16 : 64, uint64_t(6600 + i));
      s.dtype = i % 2 ? DType::kFP16 : DType::kBF16;
      ++i;
      PagedProblem prob(s);
      for (int splits : {1, 0, 64}) check_paged_on_gpu(prob, splits);
    }
}

TEST_CASE("gpu paged decode: 1..8 rows a kv-head over the reference, every decode head_dim and mod") {
  if (skip_without_gpu()) return;
  // The rows of a decode step (the q-heads of a kv-head times 1..8 new
  // tokens, each token with its own causal edge) at head_dim 32/64/128/256:
  // GQA 1/2/3/4/5/8, both dtypes, windows one- and two-sided, soft-cap with
  // and without a window, page sizes 16..256, lengths inside one key tile
  // and past many, splits beyond the keys (empty splits).
  using flashscope::testing::paged_shape;
  struct Case {
    int q_heads, kv_heads, q_len, dim, page;
    int left, right;
    float cap;
    bool causal;
  };
  const std::vector<Case> cases = {
      {9, 3, 1, 64, 64, -1, -1, 0.0f, true},     // SmolLM2
      {4, 1, 1, 256, 16, 512, -1, 0.0f, true},   // Gemma 3 local
      {4, 1, 1, 256, 64, -1, -1, 30.0f, true},   // soft-cap alone
      {32, 8, 1, 128, 16, -1, -1, 0.0f, true},   // Llama 3.2 1B
      {16, 8, 2, 128, 256, -1, -1, 0.0f, true},  // Qwen3, two drafted tokens
      {8, 8, 1, 32, 16, 17, 3, 0.0f, false},     // two-sided, MHA
      {8, 1, 1, 64, 32, 1, -1, 20.0f, true},     // 8 rows, window 1 with a cap
      {2, 1, 3, 128, 16, -1, -1, 0.0f, true},    // 6 rows over 3 tokens
      {1, 1, 8, 32, 64, -1, -1, 0.0f, false},    // 8 tokens of one head, non-causal
      {5, 1, 1, 256, 256, 4096, -1, 0.0f, true}, // 5 rows, a window past most contexts
  };
  int i = 0;
  for (const Case& c : cases) {
    PagedShape s = paged_shape({c.q_len, c.q_len + 1, 17, 40, 127, 1000, 4133}, c.q_heads, c.kv_heads, c.q_len, c.dim,
                               c.page, uint64_t(7700 + i));
    s.window_left = c.left;
    s.window_right = c.right;
    s.softcap = c.cap;
    s.causal = c.causal;
    s.dtype = i % 3 == 1 ? DType::kFP16 : DType::kBF16;
    ++i;
    PagedProblem prob(s);
    if (c.left >= 0 || c.right >= 0) prob.poison_pages_outside_windows();
    for (int splits : {1, 0, 3, 128}) check_paged_on_gpu(prob, splits);
  }
}

TEST_CASE("gpu window paged: the split plan covers the window, not the context") {
  if (skip_without_gpu()) return;
  // One 32k sequence, window 512: without the window the plan splits the
  // context in up to 128 pieces; with it, at most (512 + 1 + 64) / 32 = 18
  // (one CTA, so splits as short as one 32-key tile of the D128 decode
  // tile), so each split still has keys of the window.
  using flashscope::testing::paged_shape;
  PagedShape s = paged_shape({32768}, 8, 1, 1, 128, 16, 6700);
  PagedProblem prob(s);
  DevicePagedAttention dev(prob);
  PagedAttentionParams p = dev.params(prob);
  auto full = plan_paged_attention(p);
  REQUIRE(full.ok());
  p.window_left = 512;
  auto windowed = plan_paged_attention(p);
  REQUIRE(windowed.ok());
  CHECK(windowed->num_splits <= (512 + 1 + 64) / 32);
  CHECK(windowed->num_splits <= full->num_splits);
  s.window_left = 512;
  PagedProblem wprob(s);
  CHECK(wprob.poison_pages_outside_windows() > 0);
  check_paged_on_gpu(wprob, 0);
}

TEST_CASE("gpu head_dim 32 and 80: dense, windows, soft-cap and varlen over the reference") {
  if (skip_without_gpu()) return;
  const int lens[][2] = {{1, 1}, {17, 17}, {127, 1000}, {1000, 127}, {1000, 1000}, {64, 4096}};
  const int heads[][2] = {{1, 1}, {4, 1}, {8, 1}, {9, 3}};
  int i = 0;
  for (int d : {32, 80})
    for (const auto& len : lens)
      for (bool causal : {false, true}) {
        AttentionShape s = dense_shape(2, heads[i % 4][0], heads[i % 4][1], len[0], len[1], d, causal, uint64_t(6900 + i));
        s.dtype = i % 2 ? DType::kFP16 : DType::kBF16;
        s.layout = i % 3 == 1 ? Layout::kPaddedBSHD : (i % 3 == 2 ? Layout::kBHSD : Layout::kBSHD);
        ++i;
        AttentionProblem prob(s);
        check_on_gpu(prob, PrefillKernel::kAuto);
        check_on_gpu(prob, sm80_kernel(d));
      }
  // Windows (causal and two-sided) with and without the cap, the lengths
  // they are shorter than, about as long as and longer than.
  const int wlens[][2] = {{17, 17}, {127, 127}, {1000, 1000}, {17, 1000}, {127, 4096}};
  for (int d : {32, 80})
    for (const auto& len : wlens)
      for (int w : {1, 17, 128, 512, 20000})
        for (bool causal : {true, false}) {
          AttentionShape s = dense_shape(1, heads[i % 4][0], heads[i % 4][1], len[0], len[1], d, causal, uint64_t(6900 + i));
          s.window_left = w;
          s.window_right = causal ? -1 : (i % 2 ? w : w / 3);
          s.softcap = i % 3 == 0 ? 30.0f : 0.0f;
          s.dtype = i % 5 == 2 ? DType::kFP16 : DType::kBF16;
          ++i;
          AttentionProblem prob(s);
          poison_invisible_keys(prob);
          check_on_gpu(prob, PrefillKernel::kAuto);
        }
  // Soft-cap alone, and varlen batches with windows.
  for (int d : {32, 80})
    for (bool causal : {true, false}) {
      AttentionShape s = dense_shape(2, 8, 2, 300, 777, d, causal, uint64_t(6900 + i++));
      s.softcap = 5.0f;
      AttentionProblem prob(s);
      check_on_gpu(prob, PrefillKernel::kAuto);
      AttentionShape v = causal ? varlen_shape({1, 17, 300, 64, 129}, {1, 17, 700, 64, 200}, 8, 2, d, true)
                                : varlen_shape({1, 17, 300, 64, 129}, {5, 1000, 300, 1, 129}, 9, 3, d, false);
      v.seed = uint64_t(6900 + i++);
      AttentionProblem vprob(v);
      check_on_gpu(vprob, PrefillKernel::kAuto);
      v.window_left = 17;
      v.window_right = causal ? -1 : 40;
      v.softcap = causal ? 0.0f : 20.0f;
      AttentionProblem wprob(v);
      poison_invisible_keys(wprob);
      check_on_gpu(wprob, PrefillKernel::kAuto);
    }
  // A new maximum in every key tile, through the head_dim 80 tail.
  AttentionShape a = dense_shape(1, 4, 1, 300, 600, 80, true, 6990);
  a.softmax_scale = 0.02f;
  AttentionProblem aprob(a);
  for (int j = 0; j < a.kv_len; ++j)
    for (int c = 0; c < a.head_dim; ++c)
      aprob.set(Operand::kK, 0, j, 0, c, (1.0f + float(j) / 32.0f) * aprob.get(Operand::kQ, 0, 299, 0, c));
  check_on_gpu(aprob);
}

TEST_CASE("gpu head_dim 32 and 80 paged: decode and chunked prefill, windows, splits forced and planned") {
  if (skip_without_gpu()) return;
  using flashscope::testing::paged_lengths;
  using flashscope::testing::paged_shape;
  int i = 0;
  for (int d : {32, 80})
    for (int q_len : {1, 4, 100}) {
      // kv_lens count the new tokens: a first chunk with no history, one with
      // 16 cached tokens before its new ones, long ones.
      PagedShape s =
          paged_shape({q_len, q_len + 16, 1000, 3000}, 8, 2, q_len, d, i % 2 ? 16 : 64, uint64_t(7000 + i));
      s.dtype = i % 2 ? DType::kFP16 : DType::kBF16;
      ++i;
      PagedProblem prob(s);
      for (int splits : {1, 0, 64}) check_paged_on_gpu(prob, splits);
    }
  struct Case {
    PagedShape s;
    int left, right;
    float cap;
  };
  std::vector<Case> grid = {
      {paged_shape({1, 17, 127, 1000, 9000}, 4, 1, 1, 80, 16, 7010), 512, -1, 0.0f},
      {paged_shape({1, 17, 127, 1000}, 4, 1, 1, 32, 16, 7011), 1, -1, 30.0f},
      {paged_shape(paged_lengths(12, 1, 1500, 7012), 8, 2, 1, 80, 16, 7012), 128, -1, 50.0f},
      {paged_shape({127, 1000}, 8, 1, 3, 32, 32, 7013), 17, 1, 0.0f},  // non-causal, two-sided
      {paged_shape({4096, 1000}, 8, 1, 300, 80, 16, 7014), 512, -1, 0.0f},  // the 128-row tile
      {paged_shape({2000, 700}, 4, 1, 200, 32, 64, 7015), 4096, -1, 30.0f},
  };
  grid[1].s.dtype = DType::kFP16;
  grid[3].s.causal = false;
  grid[4].s.dtype = DType::kFP16;
  for (Case& c : grid) {
    c.s.window_left = c.left;
    c.s.window_right = c.right;
    c.s.softcap = c.cap;
    PagedProblem prob(c.s);
    prob.poison_pages_outside_windows();
    for (int splits : {1, 0, 7}) check_paged_on_gpu(prob, splits);
  }
  // Every split count the combine cuts differently at 80 (20 float4 chunks
  // a row: whole rows up to 8 splits' groups, halves beyond).
  PagedShape cut = paged_shape({4096}, 32, 8, 1, 80, 16, 7020);
  PagedProblem cprob(cut);
  for (int splits : {2, 3, 8, 9, 16, 17, 33, 64, 65, 127, 128}) check_paged_on_gpu(cprob, splits);
}

#if FLASHSCOPE_KERNEL_PROBES
TEST_CASE("gpu window trace: a windowed capture records the tiles the window skips") {
  if (skip_without_gpu()) return;
  for (bool causal : {true, false}) {
    AttentionShape s = dense_shape(1, 4, 1, 700, 900, 128, causal, 6800);
    s.window_left = 150;
    s.window_right = causal ? -1 : 70;
    s.softcap = causal ? 0.0f : 30.0f;
    AttentionProblem prob(s);
    INFO("case: ", s.describe());
    DeviceAttention dev(prob);
    dev.poison(prob);
    TraceOptions opt;
    opt.head = 2;
    opt.rows = {0, 333, 699};
    Trace t;
    // The Hopper kernel has no probed window or soft-cap kernels: naming it
    // is refused before anything runs, and auto traces the sm80 kernel it
    // picks elsewhere, which the trace names.
    if (prefill_kernel_runnable(PrefillKernel::kHopper)) {
      const Status hst = capture_cuda_prefill_trace(dev.params(prob, PrefillKernel::kHopper), opt, &t);
      CHECK(hst.code() == StatusCode::kUnsupported);
      CHECK(hst.message().find("hopper") != std::string::npos);
      CHECK(t.meta.kernel.empty());  // *out is replaced only on success
    }
    const Status st = capture_cuda_prefill_trace(dev.params(prob, PrefillKernel::kAuto), opt, &t);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    CHECK(t.meta.kernel == prefill_kernel_name(sm80_kernel(s.head_dim)));
    // It records in the tiles of that kernel's plan.
    const Result<PrefillPlan> plan = plan_prefill(dev.params(prob, sm80_kernel(s.head_dim)));
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    CHECK(plan->block_q == t.meta.block_q);
    CHECK(plan->block_kv == t.meta.block_kv);
    REQUIRE(device_synchronize().ok());
    dev.read(prob);
    REQUIRE(prob.reference().status.ok());
    const auto tol = prob.tolerance();
    const std::vector<float> out = prob.output_as_float();
    CHECK(prob.normalized_error(out.data()) < tol.normalized);
    CHECK(prob.guards_intact());

    // Each q-tile's CTA visits the tiles from its first row's window start
    // to its last row's window end; the trace marks the rest skipped.
    const int bq = t.meta.block_q, bk = t.meta.block_kv;
    REQUIRE(bq > 0);
    REQUIRE(bk > 0);
    const int shift = s.kv_len - s.q_len;
    const int q_tiles = ceil_div(s.q_len, bq), kv_tiles = ceil_div(s.kv_len, bk);
    auto tile_range = [&](int qt, int* first, int* end) {
      const int i0 = qt * bq, i1 = std::min(s.q_len, i0 + bq) - 1;
      const int lo = std::max(0, i0 + shift - s.window_left);
      const int hi = std::min(s.kv_len - 1, i1 + shift + (causal ? 0 : s.window_right));
      *first = lo / bk;
      *end = hi / bk + 1;
    };
    int traced = 0;
    for (const CtaRecord& c : t.ctas) {
      if (c.head != uint32_t(opt.head)) continue;
      int first = 0, end = 0;
      tile_range(int(c.q_tile), &first, &end);
      CHECK_MESSAGE(c.kv_tiles == uint32_t(end - first), "q-tile ", c.q_tile);
      ++traced;
    }
    CHECK(traced == q_tiles);
    REQUIRE(int(t.tile_mass.size()) == q_tiles * kv_tiles);
    for (int qt = 0; qt < q_tiles; ++qt) {
      int first = 0, end = 0;
      tile_range(qt, &first, &end);
      double mass = 0;
      for (int kt = 0; kt < kv_tiles; ++kt) {
        const TileMassRecord& r = t.tile_mass[size_t(qt * kv_tiles + kt)];
        CHECK_MESSAGE(bool(r.flags & TileMassRecord::kSkipped) == (kt < first || kt >= end), "tile ", qt, ",", kt);
        mass += r.mass;
      }
      CHECK_MESSAGE(std::fabs(mass - 1.0) < 1e-3, "q-tile ", qt, " mass ", mass);
    }
  }
}
TEST_CASE("gpu head_dim 32 and 80 trace: the probed sm80 kernels capture, and their output is the reference's") {
  if (skip_without_gpu()) return;
  for (int d : {32, 80}) {
    AttentionShape s = dense_shape(1, 4, 1, 300, 500, d, true, uint64_t(7100 + d));
    s.window_left = d == 80 ? 150 : -1;
    AttentionProblem prob(s);
    INFO("case: ", s.describe());
    DeviceAttention dev(prob);
    dev.poison(prob);
    TraceOptions opt;
    opt.head = 1;
    opt.rows = {0, 299};
    Trace t;
    const Status st = capture_cuda_prefill_trace(dev.params(prob, PrefillKernel::kAuto), opt, &t);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    CHECK(t.meta.kernel == prefill_kernel_name(sm80_kernel(d)));
    REQUIRE(device_synchronize().ok());
    dev.read(prob);
    REQUIRE(prob.reference().status.ok());
    const std::vector<float> out = prob.output_as_float();
    CHECK(prob.normalized_error(out.data()) < prob.tolerance().normalized);
    CHECK(prob.guards_intact());
    REQUIRE(t.meta.block_q > 0);
    REQUIRE(t.meta.block_kv > 0);
    const int q_tiles = (s.q_len + t.meta.block_q - 1) / t.meta.block_q;
    const int kv_tiles = (s.kv_len + t.meta.block_kv - 1) / t.meta.block_kv;
    REQUIRE(int(t.tile_mass.size()) == q_tiles * kv_tiles);
    for (int qt = 0; qt < q_tiles; ++qt) {
      double mass = 0;
      for (int kt = 0; kt < kv_tiles; ++kt) mass += t.tile_mass[size_t(qt * kv_tiles + kt)].mass;
      CHECK_MESSAGE(std::fabs(mass - 1.0) < 1e-3, "q-tile ", qt, " mass ", mass);
    }
  }
}
#endif
