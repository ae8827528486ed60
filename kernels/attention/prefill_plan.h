// The launch plan of one prefill: which configuration of which kernel family
// runs, its tiles, the work deal and L2 grouping, the workspace. Made on the
// host from shapes and the device's facts (plan_prefill_sm80 in
// prefill_launch.h, plan_prefill_hopper in hopper_launch.h), once per shape:
// the launch that follows does O(1) arithmetic on it, no device query and
// no allocation, so a plan serves every call of its shape (and CUDA graphs).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention/persistent_deal.h"
#include "kernels/attention/prefill_params.h"

namespace flashscope::kernels {

enum class ElemType { kBF16, kFP16 };

// The tiles and warps of one kernel configuration: the trace's block_q /
// block_kv / warps, and the shape of the probe buffers.
struct KernelTiling {
  int block_q = 0;   // rows per CTA (paged: packed (token, q-head) rows)
  int block_kv = 0;  // keys per KV tile
  int warps = 0;     // warps per CTA
};

// What the launch paths need to know about the device (the runtime reads
// them once per device: runtime/src/device_facts.cpp).
struct DeviceLaunchFacts {
  int sm_count = 0;
  int l2_bytes = 0;
};

enum class PrefillFamily : uint8_t { kSm80, kHopper };

// The Hopper kernel's tile configurations (hopper_config.cuh): the six the
// production launch chooses from, and the research variants' (the lab's).
enum class HopperConfig : uint8_t {
  kDefault64,
  kShortCausal64,
  kDefault128,
  kLongKv128,
  kWindow128,
  kDefault256,  // the last production one
  kTwoConsumersPingPong64,
  kThreeConsumers64,
  kBlockKV128,
  kStages2,
  kPingPong128,
  kBlockKV176,
  kBlockKV192,
};

inline bool is_production_hopper_config(HopperConfig c) { return c <= HopperConfig::kDefault256; }

struct PrefillLaunchPlan {
  PrefillFamily family = PrefillFamily::kSm80;
  int version = 0;  // the sm80 family: 1..6 (prefill_versions.cuh)
  HopperConfig hopper_config = HopperConfig::kDefault128;
  ElemType type = ElemType::kBF16;
  int head_dim = 0;
  bool causal = false;

  // Hopper: dense tensors through TMA (where it can describe them at launch;
  // else, and for varlen, the cp.async producer with its own tiles).
  bool tma = false;
  KernelTiling tiling;  // of the launch the plan expects

  // Causal: (q-head, sequence) pairs per longest-first group of a grid of
  // one CTA per work tile (attention_views.cuh, cta_view), sized for the L2.
  int longest_first_group = 0;

  // Hopper TMA launches with more work tiles than SMs: persistent CTAs, one
  // per SM (persistent_deal.h). ctas = 0: one CTA per work tile.
  struct Persistent {
    int ctas = 0;
    int longest_first_group = 0;  // causal: the deal's groups
    SplitTail split{};            // non-causal: the split tail, used when the caller gives
    size_t split_workspace_bytes = 0;  // at least this much workspace
  } persistent;

  // The workspace the launch splits its last wave through (0: none).
  size_t workspace_bytes = 0;
};

// How many (q-head, sequence) pairs a causal grid takes longest-first
// together: the largest divisor of their count whose K and V fit in half
// the device's L2, so the CTAs running at once share K/V tiles through it
// and every group is as long as the others.
inline int causal_longest_first_group(const PrefillKernelParams& p, int head_dim, int l2_bytes) {
  // K and V of one kv-head (bf16/fp16), shared by `group` q-heads.
  const double bytes_per_pair = 4.0 * double(p.kv_len) * head_dim / (p.group > 0 ? p.group : 1);
  const double fit = 0.5 * l2_bytes / (bytes_per_pair > 0 ? bytes_per_pair : 1.0);
  const int64_t pairs = int64_t(p.q_heads) * p.batch;
  if (pairs <= 1 || fit >= double(pairs)) return int(pairs < 1 ? 1 : pairs > (1 << 30) ? (1 << 30) : pairs);
  // Groups of equal size: a smaller last group would run its longest
  // q-tiles alone at the end, the tail this ordering is there to avoid
  // (bench/TUNING.md#figures-moved-out-of-product-comments). The largest
  // divisor not above `fit`.
  long long best = 1;
  visit_divisors_ascending(pairs, [&](long long d) {
    if (d > fit) return true;
    best = d;
    return false;
  });
  return int(best);
}

}  // namespace flashscope::kernels
