// Every CUDA prefill kernel (v1..v6 bf16, v5 and v6 also fp16; the sm_90a
// "hopper" kernel in both dtypes where the device runs it, with head_dim 256,
// sliding windows and the soft-cap) against the FP64 CPU
// reference over a grid of shapes: odd lengths (tails of every size), Lq != Lk
// both ways, causal, GQA ratios 1/3/4/8, varlen batches, BSHD / BHSD / padded
// strides. Outputs are poisoned with NaN before each run and surrounded by
// guard regions, so an unwritten element or an out-of-bounds write fails.
// Tolerances come from AttentionProblem::tolerance() (tied to the dtype; see
// tests/support/attention_problem.hpp for the derivation).
//
// Without a CUDA device each case reports that it was skipped and passes:
// CI has no GPU; the GPU machine runs the same binary.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope_lab/lab.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "support/attention_problem.hpp"
#include "support/device_attention.hpp"
#include "support/gpu.hpp"

using namespace flashscope;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::upload;
using flashscope::testing::AttentionProblem;
using flashscope::testing::AttentionShape;
using flashscope::testing::DeviceAttention;
using flashscope::testing::Layout;
using flashscope::testing::Operand;

namespace {


// True (after saying so) where there is no GPU, or it does not run the sm_90a kernel.
bool skip_without_hopper() {
  if (skip_without_gpu()) return true;
  if (prefill_kernel_runnable(PrefillKernel::kHopper)) return false;
  MESSAGE("skipped: the hopper kernel does not run on this device or build");
  flashscope::testing::mark_skipped();
  return true;
}

// The problem's outputs (downloaded into its storage) against the FP64
// reference, within the dtype's tolerances, and no write outside them.
void check_outputs(AttentionProblem& prob) {
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
  CHECK_MESSAGE(lerr < tol.lse_abs, "lse error ", lerr, " >= ", tol.lse_abs);
}

// Runs `kernel` on a device copy of the problem and compares with the
// reference; with `workspace`, through that scratch (sized and zero-filled by
// the caller, as PrefillParams says).
void check_on_gpu(AttentionProblem& prob, PrefillKernel kernel, DeviceBuffer* workspace = nullptr) {
  const AttentionShape& s = prob.shape();
  INFO("case: ", s.describe(), " kernel ", std::string(prefill_kernel_name(kernel)));
  prob.reset_outputs();
  DeviceAttention dev(prob);
  PrefillParams p = dev.params(prob, kernel);
  if (workspace != nullptr) {
    p.workspace = workspace->data();
    p.workspace_bytes = workspace->size();
  }
  const Status st = prefill(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  const Status sync = device_synchronize();
  REQUIRE_MESSAGE(sync.ok(), sync.to_string());
  dev.read(prob);
  check_outputs(prob);
}

// The dense grid: lengths that are 1, prime, a tile, a tile minus one and long,
// each with a GQA ratio and layout chosen by position so that all ratios and
// layouts meet both head_dims and both causal settings.
std::vector<AttentionShape> dense_grid() {
  const int lens[][2] = {{1, 1},     {1, 17},     {17, 17},   {17, 64},    {64, 64},   {127, 127},
                         {127, 1000}, {1000, 127}, {1000, 1000}, {64, 4096}, {1, 4096}, {4096, 4096}};
  const int heads[][2] = {{1, 1}, {9, 3}, {4, 1}, {8, 1}};
  const Layout layouts[] = {Layout::kBSHD, Layout::kBHSD, Layout::kPaddedBSHD};
  std::vector<AttentionShape> shapes;
  int i = 0;
  for (const auto& len : lens)
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        AttentionShape s;
        const bool long_case = len[0] * len[1] >= 1000 * 1000;
        // Long cases keep the GQA ratio with one kv-head, so the FP64
        // reference stays a few seconds.
        const int ratio = heads[i % 4][0] / heads[i % 4][1];
        s.batch = long_case ? 1 : 2;
        s.q_heads = long_case ? ratio : heads[i % 4][0];
        s.kv_heads = long_case ? 1 : heads[i % 4][1];
        s.q_len = len[0];
        s.kv_len = len[1];
        s.head_dim = d;
        s.causal = causal;
        s.layout = layouts[i % 3];
        s.seed = 1000 + i;
        shapes.push_back(s);
        ++i;
      }
  return shapes;
}

std::vector<AttentionShape> varlen_grid() {
  std::vector<AttentionShape> shapes;
  int i = 0;
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      AttentionShape s;
      s.varlen = true;
      s.q_lens = {1, 17, 300, 64, 129};
      s.kv_lens = causal ? std::vector<int>{1, 17, 700, 64, 200} : std::vector<int>{5, 1000, 300, 1, 129};
      s.q_heads = i % 2 ? 9 : 8;
      s.kv_heads = i % 2 ? 3 : 2;
      s.head_dim = d;
      s.causal = causal;
      s.layout = Layout::kBSHD;
      s.seed = 2000 + i++;
      shapes.push_back(s);
    }
  return shapes;
}

// v1..v6, and the Hopper kernel where this device and build run it.
std::vector<PrefillKernel> gpu_kernels() {
  std::vector<PrefillKernel> kernels = lab::ladder_kernels();
  if (prefill_kernel_runnable(PrefillKernel::kHopper)) kernels.push_back(PrefillKernel::kHopper);
  return kernels;
}

}  // namespace

TEST_CASE("gpu prefill: every kernel matches the reference on the dense grid") {
  if (skip_without_gpu()) return;
  for (const AttentionShape& s : dense_grid()) {
    AttentionProblem prob(s);
    for (PrefillKernel k : gpu_kernels()) check_on_gpu(prob, k);
  }
}

TEST_CASE("gpu prefill: varlen batches, every kernel") {
  if (skip_without_gpu()) return;
  for (const AttentionShape& s : varlen_grid()) {
    AttentionProblem prob(s);
    for (PrefillKernel k : gpu_kernels()) check_on_gpu(prob, k);
  }
}

TEST_CASE("gpu prefill: fp16 through the production kernels") {
  if (skip_without_gpu()) return;
  for (AttentionShape s : dense_grid()) {
    if (s.q_len * s.kv_len > 1000 * 1000) continue;
    s.dtype = DType::kFP16;
    AttentionProblem prob(s);
    check_on_gpu(prob, PrefillKernel::kV5);
    check_on_gpu(prob, PrefillKernel::kV6);
    check_on_gpu(prob, PrefillKernel::kAuto);
    if (prefill_kernel_runnable(PrefillKernel::kHopper)) check_on_gpu(prob, PrefillKernel::kHopper);
  }
}

TEST_CASE("gpu prefill: custom softmax scale and causal chunk after a cached prefix") {
  if (skip_without_gpu()) return;
  AttentionShape s;
  s.batch = 3;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.q_len = 100;   // a chunk of new tokens ...
  s.kv_len = 612;  // ... after 512 cached ones: every row sees the prefix
  s.head_dim = 128;
  s.causal = true;
  s.softmax_scale = 0.05f;
  s.seed = 31;
  AttentionProblem prob(s);
  for (PrefillKernel k : gpu_kernels()) check_on_gpu(prob, k);
}

TEST_CASE("gpu prefill: q_len > kv_len causal leaves early rows empty (zeros, lse -inf)") {
  if (skip_without_gpu()) return;
  AttentionShape s;
  s.q_heads = 4;
  s.kv_heads = 4;
  s.q_len = 200;
  s.kv_len = 70;
  s.head_dim = 64;
  s.causal = true;
  s.seed = 77;
  AttentionProblem prob(s);
  for (PrefillKernel k : gpu_kernels()) check_on_gpu(prob, k);
}

TEST_CASE("gpu prefill: results do not depend on the run (no races)") {
  if (skip_without_gpu()) return;
  AttentionShape s;
  s.batch = 2;
  s.q_heads = 9;
  s.kv_heads = 3;
  s.q_len = 777;
  s.kv_len = 777;
  s.head_dim = 64;
  s.causal = true;
  s.seed = 5;
  AttentionProblem prob(s);
  for (PrefillKernel k : gpu_kernels()) {
    check_on_gpu(prob, k);
    const std::vector<uint16_t> first = prob.o_storage();
    check_on_gpu(prob, k);
    CHECK_MESSAGE(first == prob.o_storage(), "kernel ", std::string(prefill_kernel_name(k)),
                  " gave different bits on a rerun");
  }
}

// Causal launches read their grid longest q-tiles first, in groups of
// (q-head, sequence) pairs whose K and V fit in half the L2
// (kernels::causal_longest_first_group). With 8192 keys these problems hold
// more than that (32 MiB), so the grid splits into groups and every mapping
// step runs: each CTA must still find its own rows.
TEST_CASE("gpu prefill: causal grids split into longest-first groups") {
  if (skip_without_gpu()) return;
  for (int d : {128, 64}) {
    AttentionShape s;
    s.batch = 2;
    s.q_heads = 8;
    s.kv_heads = d == 128 ? 4 : 8;  // 16 pairs of 2 MiB of K/V each, both ways
    s.q_len = 200;
    s.kv_len = 8192;
    s.head_dim = d;
    s.causal = true;
    s.seed = 80 + d;
    AttentionProblem prob(s);
    for (PrefillKernel k : gpu_kernels()) check_on_gpu(prob, k);
  }
}

// With more work tiles (q-tiles x q-heads x sequences) than the GPU has SMs,
// the Hopper kernel's persistent CTAs walk several tiles each, carrying the
// K/V ring, Q's barriers and the warpgroups' turns from one tile to the
// next; causal lists are dealt group by group, and q_len > kv_len causal
// gives tiles without keys among them. The grids above stay under 132 tiles.
// Both dtypes, GQA, tails, LSE, and the same bits on a rerun.
// batch sequences x 12 q-heads over 4 kv-heads: grids of more work tiles than SMs.
AttentionShape gqa_12_over_4(int batch, int q_len, int kv_len, int head_dim, bool causal, DType dtype, int seed) {
  AttentionShape s = testing::dense_shape(batch, 12, 4, q_len, kv_len, head_dim, causal, uint64_t(seed));
  s.dtype = dtype;
  return s;
}

TEST_CASE("gpu prefill: hopper persistent CTAs walk more work tiles than SMs") {
  if (skip_without_hopper()) return;
  struct Case {
    int d, kv_len;
    bool causal;
    DType dtype;
  };
  const Case cases[] = {{128, 555, false, DType::kBF16}, {64, 555, false, DType::kBF16},
                        {128, 555, true, DType::kBF16},  {64, 555, true, DType::kBF16},
                        {128, 300, true, DType::kBF16},  {64, 300, true, DType::kBF16},
                        {128, 555, false, DType::kFP16}, {64, 555, true, DType::kFP16},
                        {256, 555, false, DType::kBF16}, {256, 555, true, DType::kFP16},
                        {256, 300, true, DType::kBF16}};
  for (const Case& c : cases) {
    // 777 queries: 7 q-tiles of 128 rows (5 of 192), 252 (180) work tiles.
    const AttentionShape s = gqa_12_over_4(3, 777, c.kv_len, c.d, c.causal, c.dtype, 61 + c.d + c.kv_len);
    AttentionProblem prob(s);
    check_on_gpu(prob, PrefillKernel::kHopper);
    const std::vector<uint16_t> first = prob.o_storage();
    check_on_gpu(prob, PrefillKernel::kHopper);
    CHECK_MESSAGE(first == prob.o_storage(), "different bits on a rerun: ", s.describe());
  }
}

// The workspace a problem's hopper launch asks for, zero-filled.
DeviceBuffer zeroed_workspace(AttentionProblem& prob) {
  flashscope::testing::AttentionBuffers shapes_only{reinterpret_cast<void*>(16), reinterpret_cast<void*>(16),
                                                    reinterpret_cast<void*>(16), reinterpret_cast<void*>(16),
                                                    nullptr, nullptr, nullptr};
  PrefillParams p = prob.params_for(shapes_only, Device::kCuda);
  p.kernel = PrefillKernel::kHopper;
  const size_t bytes = prefill_workspace_bytes(p);
  if (bytes == 0) return DeviceBuffer{};
  auto buf = DeviceBuffer::allocate(bytes);
  REQUIRE(buf.ok());
  REQUIRE(buf->fill_bytes(0).ok());
  return std::move(buf).value();
}

TEST_CASE("gpu prefill: hopper split tail shares the last wave's tiles through the workspace") {
  if (skip_without_hopper()) return;
  struct Case {
    int d, batch, q_len, kv_len;
    DType dtype;
  };
  // batch x 12 heads: 216-288 work tiles (128 rows; 192 at 64), 2-3 rounds
  // on 132 SMs, where splitting the last two saves more key tiles than it
  // costs (persistent_deal.h). Keys: 1500 and 3000 (9 and 18 tiles of 176,
  // the last masked), 1000 and 900 at 64 (8 tiles of 128), 4100 (the
  // 192-key tiles); at 256, 1500 keys are 19 tiles of 80.
  const Case cases[] = {{128, 3, 1000, 1500, DType::kBF16}, {64, 4, 1000, 1000, DType::kBF16},
                        {64, 4, 1000, 900, DType::kFP16},   {128, 3, 700, 4100, DType::kBF16},
                        {128, 3, 1000, 3000, DType::kFP16}, {256, 3, 1000, 1500, DType::kBF16}};
  for (const Case& c : cases) {
    const AttentionShape s = gqa_12_over_4(c.batch, c.q_len, c.kv_len, c.d, false, c.dtype, 71 + c.d + c.kv_len);
    AttentionProblem prob(s);
    INFO("case: ", s.describe());
    DeviceBuffer workspace = zeroed_workspace(prob);
    REQUIRE_MESSAGE(workspace.size() > 0, "expected a split on this device's SM count");
    check_on_gpu(prob, PrefillKernel::kHopper, &workspace);
    const std::vector<uint16_t> split = prob.o_storage();
    // Reused as is: the arrival counters are back at zero, and the merge
    // does not depend on which CTA arrives last.
    check_on_gpu(prob, PrefillKernel::kHopper, &workspace);
    CHECK_MESSAGE(split == prob.o_storage(), "different bits on a rerun with the same workspace");
    // Without a workspace the same launch deals whole tiles: same answer
    // within rounding (the pieces sum in another order).
    check_on_gpu(prob, PrefillKernel::kHopper);
  }
}

TEST_CASE("gpu prefill: hopper softmax at the running maximum, and where a new maximum breaks it") {
  if (skip_without_hopper()) return;
  // After a work tile's first key tile the kernel takes exponentials at the
  // running maximum without looking for a new one, and falls back on S
  // recomputed and the exact softmax when some p would pass 4096 (a logit
  // 12 powers of two above the maximum) or overflows. Every query gets a
  // component 1 along dimension 0, and a few keys a large one there, so
  // their logit is a chosen one in a late key tile (keys 600, 1000, 1400:
  // tiles 3-10 of 128-192 keys, 7-17 of 80 at head_dim 256), where the
  // random logits stay within about 3 nats of 0. One scenario per kv-head,
  // so no jump hides another under a larger one:
  //   0: 8 nats (p up to about 2^7: the stale maximum holds)
  //   1: 20 nats (p about 2^24: the vote fails, S is recomputed)
  //   2: 170 nats (exp2 overflows to inf: the vote fails)
  //   3: 8 nats at key 600, then 20 at key 1000 (a stale maximum, then a fallback)
  struct Jump {
    int kv_head, key;
    float nats;  // the key's logit against any query, before the random part
  };
  const Jump jumps[] = {{0, 600, 8.0f}, {1, 1000, 20.0f}, {2, 1400, 170.0f}, {3, 600, 8.0f}, {3, 1000, 20.0f}};
  // The last two: more queries than keys, causal, so the first 394 rows see
  // no key at all; at head_dim 64 (192-row q-tiles) rows 384-393 still have
  // m = -inf when their q-tile reaches its second key tile.
  struct Case {
    int d, q_len, kv_len;
    bool causal, varlen;
    DType dtype;
  };
  const Case cases[] = {{128, 300, 2000, false, false, DType::kBF16}, {64, 300, 2000, false, false, DType::kBF16},
                        {128, 300, 2000, true, false, DType::kFP16},  {64, 300, 2000, true, false, DType::kBF16},
                        {128, 300, 2000, false, true, DType::kBF16},  {128, 1100, 706, true, false, DType::kBF16},
                        {64, 1100, 706, true, false, DType::kBF16},   {256, 300, 2000, false, false, DType::kBF16},
                        {256, 300, 2000, true, false, DType::kFP16},  {256, 1100, 706, true, false, DType::kBF16}};
  for (const Case& c : cases) {
    AttentionShape s = gqa_12_over_4(2, c.q_len, c.kv_len, c.d, c.causal, c.dtype, 91 + c.d + c.q_len);
    if (c.varlen) {  // the cp.async producer
      s.varlen = true;
      s.q_lens = {300, 129};
      s.kv_lens = {2000, 1500};
    }
    AttentionProblem prob(s);
    INFO("case: ", s.describe());
    const float to_units = std::sqrt(float(c.d));  // logit = q·k / sqrt(d)
    for (int b = 0; b < prob.shape().batch; ++b) {
      for (int t = 0; t < prob.seq_q_len(b); ++t)
        for (int h = 0; h < s.q_heads; ++h) prob.set(Operand::kQ, b, t, h, 0, 1.0f);
      for (const Jump& j : jumps)
        if (j.key < prob.seq_kv_len(b)) prob.set(Operand::kK, b, j.key, j.kv_head, 0, j.nats * to_units);
    }
    check_on_gpu(prob, PrefillKernel::kHopper);
  }
}

TEST_CASE("gpu prefill: a hopper launch reads what the launch before it wrote") {
  if (skip_without_hopper()) return;
  // The TMA launches may be scheduled while the kernel before them in the
  // stream finishes (programmatic dependent launch) and must wait for it
  // before reading. Chained with nothing between them, the second launch
  // takes the first's output as its Q: read too early, it is the NaN the
  // output was poisoned with. Persistent CTAs (252 work tiles, and 180 of
  // 192 rows at 64) and one CTA per work tile (one wave).
  struct Case {
    int batch, q_len, kv_len, d;
    bool causal;
  };
  const Case cases[] = {{3, 777, 555, 128, false}, {3, 777, 900, 64, true}, {1, 300, 300, 64, true}};
  for (const Case& c : cases) {
    const AttentionShape s = gqa_12_over_4(c.batch, c.q_len, c.kv_len, c.d, c.causal, DType::kBF16, 81 + c.q_len);
    INFO("case: ", s.describe());
    AttentionProblem first(s), second(s);
    DeviceAttention first_dev(first), second_dev(second);
    const PrefillParams p1 = first_dev.params(first, PrefillKernel::kHopper);
    PrefillParams p2 = second_dev.params(second, PrefillKernel::kHopper);
    p2.q = p1.o;  // the first's output, in its layout (the second's own Q goes unread)
    REQUIRE(prefill(p1).ok());
    REQUIRE(prefill(p2).ok());
    REQUIRE(device_synchronize().ok());
    first_dev.read(first);
    second_dev.read(second);
    // The second's Q on the host: the first's output, element by element.
    const std::vector<float> q = first.output_as_float();  // [batch · q_len, q_heads, D]
    for (int b = 0; b < s.batch; ++b)
      for (int t = 0; t < s.q_len; ++t)
        for (int h = 0; h < s.q_heads; ++h)
          for (int d = 0; d < s.head_dim; ++d)
            second.set(Operand::kQ, b, t, h, d,
                       q[((static_cast<size_t>(b) * s.q_len + t) * s.q_heads + h) * s.head_dim + d]);
    check_outputs(second);
  }
}

TEST_CASE("gpu prefill: the hopper kernel runs exactly where it is reported runnable") {
  if (skip_without_gpu()) return;
  AttentionShape s;
  s.q_heads = 2;
  s.kv_heads = 1;
  s.q_len = 130;
  s.kv_len = 257;
  s.head_dim = 128;
  s.seed = 9;
  AttentionProblem prob(s);
  const auto info = query_device();
  REQUIRE(info.ok());
  const bool sm90 = info->cc_major == 9 && info->cc_minor == 0;
  if (!sm90) {
    // Elsewhere it must say so before launching, and leave the output alone.
    CHECK_FALSE(prefill_kernel_runnable(PrefillKernel::kHopper));
    DeviceAttention dev(prob);
    PrefillParams p = dev.params(prob, PrefillKernel::kHopper);
    p.lse = nullptr;
    CHECK(prefill(p).code() == StatusCode::kUnsupported);
    return;
  }
  // On an H100/H200 a standard build carries the sm_90a code.
  REQUIRE(prefill_kernel_runnable(PrefillKernel::kHopper));
  check_on_gpu(prob, PrefillKernel::kHopper);
}

// head_dim 256 (Gemma's) runs on the Hopper kernel: the dense grid's
// lengths (tails of every size against 128-row q-tiles and 80-key tiles),
// both dtypes, causal both ways, GQA 1/3/4/8, every layout. `auto` picks it
// on an H100/H200 for dense tensors.
TEST_CASE("gpu prefill: hopper head_dim 256 matches the reference") {
  if (skip_without_hopper()) return;
  const int lens[][2] = {{1, 1},      {1, 17},     {17, 17},     {17, 64},  {79, 81},
                         {127, 1000}, {1000, 127}, {1000, 1000}, {1, 4096}, {4096, 4096}};
  const int heads[][2] = {{1, 1}, {9, 3}, {4, 1}, {8, 1}};
  const Layout layouts[] = {Layout::kBSHD, Layout::kBHSD, Layout::kPaddedBSHD};
  int i = 0;
  for (const auto& len : lens)
    for (bool causal : {false, true}) {
      const bool long_case = len[0] * len[1] >= 1000 * 1000;
      const int ratio = heads[i % 4][0] / heads[i % 4][1];
      AttentionShape s = testing::dense_shape(long_case ? 1 : 2, long_case ? ratio : heads[i % 4][0],
                                              long_case ? 1 : heads[i % 4][1], len[0], len[1], 256, causal,
                                              uint64_t(3000 + i));
      s.layout = layouts[i % 3];
      s.dtype = (i / 2) % 2 ? DType::kFP16 : DType::kBF16;
      AttentionProblem prob(s);
      check_on_gpu(prob, PrefillKernel::kHopper);
      check_on_gpu(prob, PrefillKernel::kAuto);
      ++i;
    }
}

// What plan_prefill reports for head_dim 256 is a launch that covers the
// problem (the dashboard draws these tiles), and what the kernel does not
// run at 256 is refused with a status before anything is touched.
TEST_CASE("gpu prefill: hopper head_dim 256 plans its tiles and refuses varlen") {
  if (skip_without_hopper()) return;
  {
    AttentionProblem prob(testing::dense_shape(4, 8, 8, 4096, 4096, 256, true, 41));
    DeviceAttention dev(prob);
    const auto plan = plan_prefill(dev.params(prob, PrefillKernel::kAuto));
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    CHECK(plan->kernel == PrefillKernel::kHopper);
    CHECK(plan->block_q % 64 == 0);                    // whole warpgroups of 64 rows
    CHECK(plan->warps == (plan->block_q / 64 + 1) * 4);  // and the producer's
    CHECK(plan->block_kv % 16 == 0);
    CHECK(plan->persistent_ctas > 0);  // 1024 work tiles: more than one wave
  }
  {
    AttentionProblem prob(testing::varlen_shape({17, 300}, {40, 300}, 4, 2, 256, true, 42));
    prob.reset_outputs();
    DeviceAttention dev(prob);
    const Status st = prefill(dev.params(prob, PrefillKernel::kHopper));
    CHECK(st.code() == StatusCode::kUnsupported);
    CHECK_MESSAGE(st.message().find("varlen") != std::string::npos, st.message());
  }
}

// Sliding windows and the soft-cap on the Hopper kernel, against an FP64
// reference of their own here (the window and cap applied to the
// fixture's inputs in double): query row i sits at position
// i + kv_len − q_len and sees keys [pos − window_left, pos] (causal) or
// [pos − window_left, pos + window_right] (a side at -1 unbounded), and
// each scaled logit s becomes cap·tanh(s/cap) before the softmax.
struct Extras {
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
};

struct ExtrasReference {
  std::vector<float> o, lse;  // the fixture's dense layouts
};

// The fixture's operands in double, dense [batch, len, heads, D].
struct DenseOperands {
  std::vector<double> q, k, v;
  explicit DenseOperands(const AttentionProblem& prob) {
    const AttentionShape& s = prob.shape();
    auto read = [&](Operand which, int len, int heads, std::vector<double>& out) {
      out.resize(size_t(s.batch) * len * heads * s.head_dim);
      size_t n = 0;
      for (int b = 0; b < s.batch; ++b)
        for (int t = 0; t < len; ++t)
          for (int h = 0; h < heads; ++h)
            for (int d = 0; d < s.head_dim; ++d) out[n++] = prob.get(which, b, t, h, d);
    };
    read(Operand::kQ, s.q_len, s.q_heads, q);
    read(Operand::kK, s.kv_len, s.kv_heads, k);
    read(Operand::kV, s.kv_len, s.kv_heads, v);
  }
};

ExtrasReference extras_reference(const AttentionProblem& prob, const Extras& x) {
  const AttentionShape& s = prob.shape();
  const DenseOperands in(prob);
  const int dim = s.head_dim, group = s.q_heads / s.kv_heads;
  const double scale = s.softmax_scale > 0 ? s.softmax_scale : 1.0 / std::sqrt(double(dim));
  ExtrasReference r;
  r.o.assign(size_t(s.batch) * s.q_len * s.q_heads * dim, 0.0f);
  r.lse.assign(size_t(s.batch) * s.q_heads * s.q_len, -INFINITY);
  std::vector<double> logit(static_cast<size_t>(s.kv_len)), acc(static_cast<size_t>(dim));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h)
      for (int i = 0; i < s.q_len; ++i) {
        const int pos = i + s.kv_len - s.q_len;
        int lo = 0, hi = s.kv_len;  // keys [lo, hi)
        if (x.window_left >= 0) lo = std::max(lo, pos - x.window_left);
        if (s.causal) hi = std::min(hi, pos + 1);
        else if (x.window_right >= 0) hi = std::min(hi, pos + x.window_right + 1);
        if (lo >= hi) continue;  // no key: zeros, lse -inf
        const double* qi = &in.q[((size_t(b) * s.q_len + i) * s.q_heads + h) * dim];
        auto kv_row = [&](const std::vector<double>& t, int j) {
          return &t[((size_t(b) * s.kv_len + j) * s.kv_heads + h / group) * dim];
        };
        double m = -INFINITY;
        for (int j = lo; j < hi; ++j) {
          const double* kj = kv_row(in.k, j);
          double dot = 0;
          for (int d = 0; d < dim; ++d) dot += qi[d] * kj[d];
          double v = dot * scale;
          if (x.softcap > 0) v = x.softcap * std::tanh(v / x.softcap);
          logit[size_t(j)] = v;
          m = std::max(m, v);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = lo; j < hi; ++j) {
          const double p = std::exp(logit[size_t(j)] - m);
          const double* vj = kv_row(in.v, j);
          l += p;
          for (int d = 0; d < dim; ++d) acc[size_t(d)] += p * vj[d];
        }
        for (int d = 0; d < dim; ++d)
          r.o[((size_t(b) * s.q_len + i) * s.q_heads + h) * dim + d] = float(acc[size_t(d)] / l);
        r.lse[(size_t(b) * s.q_heads + h) * s.q_len + i] = float(m + std::log(l));
      }
  return r;
}

// Runs the Hopper kernel with x on the problem and compares with
// extras_reference, within the dtype's tolerances, guards intact.
void check_extras_on_gpu(AttentionProblem& prob, const Extras& x, const ExtrasReference& ref,
                         DeviceBuffer* workspace = nullptr) {
  INFO("case: ", prob.shape().describe(), " window_left ", x.window_left, " window_right ", x.window_right,
       " softcap ", x.softcap);
  prob.reset_outputs();
  DeviceAttention dev(prob);
  PrefillParams p = dev.params(prob, PrefillKernel::kHopper);
  p.window_left = x.window_left;
  p.window_right = x.window_right;
  p.softcap = x.softcap;
  if (workspace != nullptr) {
    p.workspace = workspace->data();
    p.workspace_bytes = workspace->size();
  }
  const Status st = prefill(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  REQUIRE(device_synchronize().ok());
  dev.read(prob);
  const auto tol = prob.tolerance();
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  CHECK_MESSAGE(prob.guards_intact(), "a write landed outside the output or lse");
  double diff2 = 0, ref2 = 0, worst = 0, lse_worst = 0;
  for (size_t i = 0; i < ref.o.size(); ++i) {
    const double d = std::isfinite(out[i]) ? double(out[i]) - ref.o[i] : INFINITY;
    diff2 += d * d;
    ref2 += double(ref.o[i]) * ref.o[i];
    worst = std::max(worst, std::fabs(d));
  }
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    const bool ref_empty = std::isinf(ref.lse[i]), out_empty = std::isinf(lse[i]) && lse[i] < 0;
    if (ref_empty && out_empty) continue;
    lse_worst = ref_empty != out_empty || !std::isfinite(lse[i])
                    ? INFINITY
                    : std::max(lse_worst, std::fabs(double(lse[i]) - ref.lse[i]));
  }
  const double nerr = ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 == 0 ? 0.0 : INFINITY);
  CHECK_MESSAGE(nerr < tol.normalized, "normalized error ", nerr, " >= ", tol.normalized);
  CHECK_MESSAGE(worst < tol.max_abs, "max abs error ", worst, " >= ", tol.max_abs);
  CHECK_MESSAGE(lse_worst < tol.lse_abs, "lse error ", lse_worst, " >= ", tol.lse_abs);
}

TEST_CASE("gpu prefill: hopper sliding windows match the reference") {
  if (skip_without_hopper()) return;
  struct Case {
    int d, batch, q_heads, kv_heads, q_len, kv_len;
    bool causal;
    DType dtype;
  };
  // 1000 queries: 8 q-tiles of 128 rows (6 of 192 at 64), one CTA per work
  // tile; 777 over 12 heads x 3: persistent CTAs. Gemma-3's 4 q-heads over
  // one kv-head; a chunk after a cached prefix (100 x 612); more queries
  // than keys (rows that see no key). Windows from one key to more than
  // the sequence, unaligned to every tile width.
  const Case cases[] = {{256, 2, 4, 1, 1000, 1000, true, DType::kBF16}, {128, 2, 8, 2, 1000, 1000, true, DType::kFP16},
                        {64, 2, 4, 4, 1000, 1000, true, DType::kBF16},  {256, 3, 12, 4, 777, 777, true, DType::kBF16},
                        {128, 3, 12, 4, 777, 777, false, DType::kBF16}, {256, 2, 4, 1, 100, 612, true, DType::kFP16},
                        {128, 1, 4, 4, 300, 200, true, DType::kBF16},   {256, 2, 4, 1, 1000, 1000, false, DType::kBF16}};
  const int windows[] = {1, 17, 128, 512, 5000};
  int i = 0;
  for (const Case& c : cases) {
    AttentionShape s = testing::dense_shape(c.batch, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.d, c.causal,
                                            uint64_t(5000 + i));
    s.dtype = c.dtype;
    AttentionProblem prob(s);
    for (int w : windows) {
      Extras x;
      x.window_left = w;
      check_extras_on_gpu(prob, x, extras_reference(prob, x));
      if (!c.causal) {  // two-sided: a window to the right too
        x.window_right = w / 2;
        check_extras_on_gpu(prob, x, extras_reference(prob, x));
      }
    }
    ++i;
  }
  // Varlen batches (no TMA maps) are refused with a status, nothing run.
  AttentionProblem varlen(testing::varlen_shape({17, 300}, {40, 300}, 4, 2, 128, true, 43));
  DeviceAttention dev(varlen);
  PrefillParams p = dev.params(varlen, PrefillKernel::kHopper);
  p.window_left = 16;
  const Status st = prefill(p);
  CHECK(st.code() == StatusCode::kUnsupported);
  CHECK_MESSAGE(st.message().find("sliding window") != std::string::npos, st.message());
}

TEST_CASE("gpu prefill: hopper soft-cap matches the reference, alone and with a window") {
  if (skip_without_hopper()) return;
  struct Case {
    int d, batch, q_heads, kv_heads, q_len, kv_len;
    bool causal;
    float q_gain;  // queries scaled so the logits reach well into tanh's bend
    float softcap;
    int window_left;
  };
  // Gemma 2's cap of 50 (logits up to about 60 here), and a cap of 2
  // on unit logits; non-causal long problems also run the split tail.
  const Case cases[] = {{256, 2, 4, 1, 1000, 1000, true, 30.0f, 50.0f, -1},
                        {128, 2, 8, 2, 700, 900, false, 1.0f, 2.0f, -1},
                        {64, 2, 4, 4, 1000, 1000, true, 1.0f, 2.0f, -1},
                        {256, 3, 12, 4, 777, 1500, false, 1.0f, 2.0f, -1},
                        {256, 2, 4, 1, 1000, 1000, true, 30.0f, 50.0f, 512},
                        {128, 2, 8, 2, 1000, 1000, true, 1.0f, 2.0f, 127}};
  int i = 0;
  for (const Case& c : cases) {
    AttentionProblem prob(testing::dense_shape(c.batch, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.d, c.causal,
                                               uint64_t(6000 + i++)));
    for (int b = 0; b < c.batch; ++b)
      for (int t = 0; t < c.q_len; ++t)
        for (int h = 0; h < c.q_heads; ++h)
          for (int d = 0; d < c.d; ++d)
            prob.set(Operand::kQ, b, t, h, d, prob.get(Operand::kQ, b, t, h, d) * c.q_gain);
    Extras x;
    x.softcap = c.softcap;
    x.window_left = c.window_left;
    const ExtrasReference capped = extras_reference(prob, x);
    // The cap changes the answer: a kernel that ignored it would fail.
    Extras uncapped = x;
    uncapped.softcap = 0.0f;
    const ExtrasReference plain = extras_reference(prob, uncapped);
    double moved = 0;
    for (size_t k = 0; k < capped.lse.size(); ++k)
      if (std::isfinite(capped.lse[k])) moved = std::max(moved, std::fabs(double(capped.lse[k]) - plain.lse[k]));
    REQUIRE_MESSAGE(moved > 0.1, "the cap barely moves this case's logits (", moved, ")");
    DeviceBuffer workspace = zeroed_workspace(prob);  // the split tail where the plan asks for one
    check_extras_on_gpu(prob, x, capped, workspace.size() > 0 ? &workspace : nullptr);
  }
}
