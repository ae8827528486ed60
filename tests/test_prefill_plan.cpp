// The prefill plan (attention.hpp: plan_prefill, prefill(p, plan)) and the
// host arithmetic behind it (kernels/hopper/hopper_plan.h,
// kernels/attention/prefill_plan.h): which launch a shape gets, the
// workspace it asks for, reuse across calls of one shape and the refusal of
// another. Plain host code: it runs on CI; the GPU suites run the plans.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope/device.hpp"
#include "flashscope/half.hpp"
#include "flashscope_lab/lab.hpp"
#include "kernels/attention/prefill_plan.h"
#include "kernels/hopper/hopper_plan.h"
#include "support/attention_problem.hpp"

using namespace flashscope;
namespace k = flashscope::kernels;

namespace {

using Problem = flashscope::testing::SmallPrefill;

// Kernel parameters of a dense problem (shapes only: what the plan reads).
k::PrefillKernelParams shape(int batch, int heads, int q_len, int kv_len, int kv_heads = 0) {
  k::PrefillKernelParams p{};
  p.batch = batch;
  p.q_heads = heads;
  p.kv_heads = kv_heads > 0 ? kv_heads : heads;
  p.group = p.q_heads / p.kv_heads;
  p.q_len = q_len;
  p.kv_len = kv_len;
  return p;
}

// The Hopper production tiles at 128 (DefaultConfig<128>: 2 consumer
// warpgroups of 64 rows, 176-key tiles).
constexpr k::HopperTileShape kD128{128, 176, 8, 128};

k::PrefillLaunchPlan hopper_plan(const k::PrefillKernelParams& p, bool causal, bool tma, int sms, int l2_bytes) {
  k::PrefillLaunchPlan plan;
  plan.family = k::PrefillFamily::kHopper;
  plan.causal = causal;
  plan.tma = tma;
  plan.longest_first_group = causal ? k::causal_longest_first_group(p, 128, l2_bytes) : 0;
  k::plan_hopper_deal(&plan, p, kD128, /*one_cta=*/false, sms);
  return plan;
}

}  // namespace

TEST_CASE("prefill plan: a long non-causal problem runs persistent CTAs and asks for the split tail's workspace") {
  // 8k x 8k, 16 heads: 1024 work tiles on 132 SMs, 7.75 rounds.
  const k::PrefillKernelParams p = shape(1, 16, 8192, 8192);
  const k::PrefillLaunchPlan plan = hopper_plan(p, false, true, 132, 50 << 20);
  CHECK(plan.persistent.ctas == 132);
  CHECK(plan.persistent.split.split_tiles > 0);
  CHECK(plan.persistent.split.whole_tiles + plan.persistent.split.split_tiles == 1024);
  CHECK(plan.persistent.split.whole_tiles % 132 == 0);
  CHECK(plan.workspace_bytes == k::split_tail_workspace_bytes(132, 8, 128));
  CHECK(plan.workspace_bytes == plan.persistent.split_workspace_bytes);
}

TEST_CASE("prefill plan: causal, one-wave, varlen and full-last-round problems ask for no workspace") {
  SUBCASE("causal: persistent, longest-first groups, no split") {
    const k::PrefillKernelParams p = shape(4, 16, 4096, 4096);
    const k::PrefillLaunchPlan plan = hopper_plan(p, true, true, 132, 50 << 20);
    CHECK(plan.persistent.ctas == 132);
    CHECK(plan.workspace_bytes == 0);
    CHECK(plan.persistent.split.split_tiles == 0);
    // A divisor of the 64 pairs, at least the L2's group.
    CHECK(64 % plan.persistent.longest_first_group == 0);
    CHECK(plan.persistent.longest_first_group >= plan.longest_first_group);
  }
  SUBCASE("one wave: one CTA per work tile") {
    const k::PrefillKernelParams p = shape(1, 9, 300, 300, 3);  // 27 work tiles
    const k::PrefillLaunchPlan plan = hopper_plan(p, false, true, 132, 50 << 20);
    CHECK(plan.persistent.ctas == 0);
    CHECK(plan.workspace_bytes == 0);
  }
  SUBCASE("no TMA (varlen, the cp.async producer): one CTA per work tile") {
    const k::PrefillKernelParams p = shape(1, 16, 8192, 8192);
    const k::PrefillLaunchPlan plan = hopper_plan(p, false, false, 132, 50 << 20);
    CHECK(plan.persistent.ctas == 0);
    CHECK(plan.workspace_bytes == 0);
  }
  SUBCASE("a last round already full: no split") {
    const k::PrefillKernelParams p = shape(1, 132, 256, 8192);  // 264 work tiles: 2 whole rounds
    const k::PrefillLaunchPlan plan = hopper_plan(p, false, true, 132, 50 << 20);
    CHECK(plan.persistent.ctas == 132);
    CHECK(plan.persistent.split.split_tiles == 0);
    CHECK(plan.workspace_bytes == 0);
  }
}

TEST_CASE("prefill plan: the L2 group is the largest divisor of the pairs whose K and V fit half the L2") {
  // 64 pairs of 4096 keys at 128: 2 MiB of K and V each; half of 50 MiB holds 12 -> 8.
  CHECK(k::causal_longest_first_group(shape(4, 16, 4096, 4096), 128, 50 << 20) == 8);
  // Everything fits: one group of all pairs.
  CHECK(k::causal_longest_first_group(shape(2, 4, 512, 512), 64, 50 << 20) == 8);
  // GQA: q-heads of one kv-head share its K and V.
  CHECK(k::causal_longest_first_group(shape(4, 16, 4096, 4096, 4), 128, 50 << 20) == 32);
}

TEST_CASE("prefill plan: on the CPU a plan serves every call of its shape and refuses another") {
  Problem a;
  auto plan = plan_prefill(a.p);
  REQUIRE(plan.ok());
  CHECK(plan->kernel == PrefillKernel::kAuto);
  CHECK(plan->workspace_bytes == 0);
  REQUIRE(prefill(a.p, plan.value()).ok());

  // Same shape, other buffers: the plan runs it, with what prefill(p) computes.
  Problem b;
  b.q.assign(b.q.size(), float_to_bf16(-0.5f));
  REQUIRE(prefill(b.p, plan.value()).ok());
  Problem c;
  c.q = b.q;
  REQUIRE(prefill(c.p).ok());
  CHECK(b.o == c.o);

  // Another shape: refused, nothing written.
  Problem d(Device::kCpu, 64, /*q_len=*/34);
  const Status s = prefill(d.p, plan.value());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_MESSAGE(s.message().find("plan") != std::string::npos, "message: ", s.message());
  CHECK(d.output_untouched());
  Problem e;
  e.p.causal = true;
  CHECK(prefill(e.p, plan.value()).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("prefill plan: invalid parameters are refused before planning") {
  Problem a;
  a.p.q.data = nullptr;
  CHECK(plan_prefill(a.p).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("prefill plan: CUDA problems without a device or CUDA build are refused cleanly") {
  if (cuda_available()) return;  // the GPU suites plan real launches
  Problem a;
  a.p.device = Device::kCuda;
  const auto plan = plan_prefill(a.p);
  CHECK_FALSE(plan.ok());
  CHECK(prefill_workspace_bytes(a.p) == 0);
}

TEST_CASE("kernel lab: linking flashscope_lab installs the teaching ladder in CUDA builds") {
#if FLASHSCOPE_WITH_CUDA
  CHECK(flashscope::lab::ladder_available());
#else
  CHECK_FALSE(flashscope::lab::ladder_available());
#endif
}

TEST_CASE("prefill plan: a sliding window takes no split tail and sizes its L2 groups by the window") {
  // 8k x 8k non-causal: the split tail without a window (above), none with
  // one (its work tiles hold fewer key tiles than the split counts); a
  // soft-cap alone keeps it.
  const k::PrefillKernelParams p = shape(1, 16, 8192, 8192);
  auto plan_with = [&](const k::HopperExtras& x) {
    k::PrefillLaunchPlan plan;
    plan.family = k::PrefillFamily::kHopper;
    plan.tma = true;
    k::plan_hopper_deal(&plan, p, kD128, /*one_cta=*/false, 132, x);
    return plan;
  };
  k::HopperExtras window;
  window.window_left = 512;
  const k::PrefillLaunchPlan windowed = plan_with(window);
  CHECK(windowed.persistent.ctas == 132);
  CHECK(windowed.persistent.split.split_tiles == 0);
  CHECK(windowed.workspace_bytes == 0);
  k::HopperExtras cap;
  cap.softcap = 50.0f;
  CHECK(plan_with(cap).persistent.split.split_tiles > 0);

  // Causal 4 x 16 x 4096²: a q-tile reads its window, its rows and one more
  // key tile (the window's start is unaligned): 816 keys, 408 KiB of K and V
  // per pair, so 62 pairs fit half of 50 MiB and the groups hold 32 (the
  // largest divisor of 64 below that), where without a window 8 do (above).
  const k::PrefillKernelParams batch = shape(4, 16, 4096, 4096);
  CHECK(k::hopper_keys_per_q_tile(batch, window, kD128, true) == 512 + 128 + 176);
  k::PrefillKernelParams keys = batch;
  keys.kv_len = k::hopper_keys_per_q_tile(batch, window, kD128, true);
  CHECK(k::causal_longest_first_group(keys, 128, 50 << 20) == 32);
  // A window wider than the sequence, or none: the whole sequence.
  k::HopperExtras wide;
  wide.window_left = 100000;
  CHECK(k::hopper_keys_per_q_tile(batch, wide, kD128, true) == 4096);
  CHECK(k::hopper_keys_per_q_tile(batch, k::HopperExtras{}, kD128, true) == 4096);
  // Non-causal, both sides: the two widths.
  k::HopperExtras both;
  both.window_left = 300;
  both.window_right = 200;
  CHECK(k::hopper_keys_per_q_tile(batch, both, kD128, false) == 300 + 200 + 128 + 176);
}

TEST_CASE("prefill plan: short windows at head_dim 128 take the window tiles, longer ones and other head_dims do not") {
  auto window = [](int left, int right = -1) {
    k::HopperExtras x;
    x.window_left = left;
    x.window_right = right;
    return x;
  };
  // Causal: W + 128 keys a q-tile, up to 2048 + 128.
  CHECK(k::use_window_config(128, true, window(512)));
  CHECK(k::use_window_config(128, true, window(0)));
  CHECK(k::use_window_config(128, true, window(2048)));
  CHECK_FALSE(k::use_window_config(128, true, window(2049)));
  CHECK_FALSE(k::use_window_config(128, true, window(4096)));
  // A right width means nothing to causal; non-causal counts both sides, and
  // a side without a bound reads the whole range.
  CHECK(k::use_window_config(128, true, window(512, 100000)));
  CHECK(k::use_window_config(128, false, window(1000, 1000)));
  CHECK_FALSE(k::use_window_config(128, false, window(1500, 1000)));
  CHECK_FALSE(k::use_window_config(128, false, window(512)));
  CHECK_FALSE(k::use_window_config(128, false, window(-1, 512)));
  // No window (a soft-cap alone), or another head_dim: the usual tiles.
  k::HopperExtras cap;
  cap.softcap = 30.0f;
  CHECK_FALSE(k::use_window_config(128, true, cap));
  CHECK_FALSE(k::use_window_config(64, true, window(512)));
  CHECK_FALSE(k::use_window_config(256, true, window(512)));
}
