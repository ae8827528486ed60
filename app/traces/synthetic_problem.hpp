// Attention inputs made up for a shape: what the dashboard captures when it
// has the model's shape (heads, head_dim, prompt length) but not its
// activations — the engine does not hand those out — and what the kernel
// lab runs. Every view that shows such a trace says the inputs are synthetic.
//
// Not plain noise: with i.i.d. random q and k every row's attention is
// nearly uniform and a mass heatmap is a featureless gradient. Instead,
// per head,
//   q_i = noise + kLocality · R(i)·u + kSinkQuery · s
//   k_j = noise + kLocality · R(j)·u + [j = 0] · kSinkKey · s
// with R(p) the rotary rotation of position p (base 10000, as RoPE) and u,
// s fixed random directions: q_i·k_j then falls off with |i − j| as RoPE'd
// models' scores do, and key 0 collects extra mass (an "attention sink").
// Values are noise. Seeded: one seed, one problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/attention.hpp"

namespace flashscope::app {

struct SyntheticShape {
  int batch = 1;
  int q_heads = 8, kv_heads = 8;
  int q_len = 256, kv_len = 256;
  int head_dim = 64;
  bool causal = true;
};

// "1×9×512×512 D64 causal" — for labels.
std::string shape_label(const SyntheticShape& s);

// Host buffers (bf16, BSHD) of one problem and the params that run it on
// the CPU; the caller keeps the struct alive while params() is in use.
struct SyntheticProblem {
  SyntheticShape shape;
  std::vector<uint16_t> q, k, v, o;  // [batch, len, heads, head_dim]
  std::vector<float> lse;            // [batch, q_heads, q_len]

  PrefillParams params();  // Device::kCpu, pointing into the vectors
};

SyntheticProblem make_synthetic_problem(const SyntheticShape& shape, uint64_t seed);

}  // namespace flashscope::app
