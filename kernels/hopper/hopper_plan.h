// The Hopper plan's arithmetic (plan_prefill_hopper in hopper_prefill.cu
// calls it with the chosen configuration's numbers): whether a launch runs
// persistent CTAs, how it groups and deals the work tiles, its split tail
// and the workspace that needs. Plain host code, apart from the kernel, so
// it is tested without a GPU (tests/test_prefill_plan.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention/persistent_deal.h"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/prefill_plan.h"
#include "kernels/hopper/hopper_extras.h"
#include "kernels/hopper/split_tail_workspace.h"

namespace flashscope::kernels {

// The numbers of a Hopper tile configuration (HopperPrefillConfig) the plan uses.
struct HopperTileShape {
  int block_q = 0;         // kBlockQ
  int block_kv = 0;        // kBlockKV
  int consumer_warps = 0;  // kConsumerWarps
  int dim = 0;             // kDim
};

// Whether a launch at head_dim 128 takes the short-window tiles
// (hopper_config.cuh's WindowConfig128): a window whose q-tiles read at most
// kShortWindowKeys keys (its width, both sides' when non-causal, plus the
// tile's rows). Wider windows keep the wide key tiles, which measured as fast
// from there on (bench/TUNING.md#sliding-windows-and-the-soft-cap-issue-20).
inline constexpr int kWindowBlockQ = 128;  // WindowConfig128's rows (asserted there)
inline constexpr int64_t kShortWindowKeys = 2048 + kWindowBlockQ;
inline bool use_window_config(int head_dim, bool causal, const HopperExtras& x) {
  if (head_dim != 128 || !x.windowed(causal)) return false;
  const int64_t unbounded = kShortWindowKeys + 1;
  const int64_t left = x.window_left >= 0 ? x.window_left : unbounded;
  const int64_t right = causal ? 0 : x.window_right >= 0 ? x.window_right : unbounded;
  return left + right + kWindowBlockQ <= kShortWindowKeys;
}

// The keys a q-tile of t.block_q rows reads at most: the whole range, or
// with a window the window's width plus the tile's rows. The L2 groups are
// sized by it: a windowed group's pairs hold only that much K and V in L2 at
// a time, so more of them fit.
inline int hopper_keys_per_q_tile(const PrefillKernelParams& p, const HopperExtras& x, const HopperTileShape& t,
                                  bool causal) {
  if (!x.windowed(causal)) return p.kv_len;
  const int64_t left = x.window_left >= 0 ? x.window_left : p.kv_len;
  const int64_t right = causal ? 0 : x.window_right >= 0 ? x.window_right : p.kv_len;
  const int64_t keys = left + right + t.block_q + t.block_kv;  // + one tile: the window's start is unaligned
  return int(keys < p.kv_len ? keys : p.kv_len);
}

// The split tail of a persistent non-causal launch of tiles t on `sms` CTAs
// (split_tiles = 0 where whole tiles deal as well).
inline SplitTail hopper_split_tail(const PrefillKernelParams& p, const HopperTileShape& t, int sms) {
  const int q_tiles = (p.q_len + t.block_q - 1) / t.block_q;
  const int64_t work_tiles = int64_t(q_tiles) * p.q_heads * p.batch;
  if (work_tiles >= (int64_t(1) << 31)) return SplitTail{0, 0, 1, sms};
  return plan_split_tail(int(work_tiles), (p.kv_len + t.block_kv - 1) / t.block_kv, sms);
}

// Fills plan->persistent and plan->workspace_bytes for tiles t on `sms` SMs.
// TMA launches with more work tiles than SMs run persistent CTAs (unless
// one_cta: a variant that runs one CTA per work tile); one round of work
// tiles leaves a persistent CTA nothing to overlap, so one CTA per tile
// saves its bookkeeping. Causal: the deal's longest-first groups
// (persistent_longest_first_group, from the L2's plan->longest_first_group);
// non-causal: the split tail, used where the caller gives its workspace
// (not with a window: its work tiles have fewer key tiles than the split
// counts, and none start at key 0).
inline void plan_hopper_deal(PrefillLaunchPlan* plan, const PrefillKernelParams& p, const HopperTileShape& t,
                             bool one_cta, int sms, const HopperExtras& x = {}) {
  const int q_tiles = (p.q_len + t.block_q - 1) / t.block_q;
  const int64_t work_tiles = int64_t(q_tiles) * p.q_heads * p.batch;
  if (!plan->tma || one_cta || work_tiles <= sms) return;
  plan->persistent.ctas = sms;
  plan->persistent.longest_first_group =
      plan->causal ? persistent_longest_first_group(p.q_heads * p.batch, q_tiles, sms, plan->longest_first_group)
                   : plan->longest_first_group;
  if (plan->causal || x.windowed(plan->causal)) return;
  plan->persistent.split = hopper_split_tail(p, t, sms);
  plan->persistent.split_workspace_bytes = split_tail_workspace_bytes(sms, t.consumer_warps, t.dim);
  if (plan->persistent.split.split_tiles > 0) plan->workspace_bytes = plan->persistent.split_workspace_bytes;
}

}  // namespace flashscope::kernels
