// Between the decode attention driver (decode_attention.cpp: plan, threads,
// merge) and its per-instruction-set kernels (decode_attention_kernel.inc,
// stamped out once per ISA). Private to those files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/cpu/decode_attention.hpp"

// On the kernels' prefetch lambdas. A function whose only effect is
// __builtin_prefetch counts as "const" in GCC's interprocedural passes, and a
// call of it whose result is unused is then deleted: GCC 12 built the q8_0
// item without one request (and the bf16 items' only at -O3, where the early
// inliner got there first). Inlined before those passes, the requests stay.
#if defined(__GNUC__) || defined(__clang__)
#define FS_ALWAYS_INLINE __attribute__((always_inline))
#else
#define FS_ALWAYS_INLINE
#endif

namespace flashscope::cpu::decode {

constexpr int kBlock = 64;  // keys per online-softmax step, blocks aligned to absolute positions
constexpr int kQkRowsQ8 = 4;  // rows scored together over a q8_0 cache (each K line loaded once for them)

// Resolved shapes of one call.
struct Problem {
  const DecodeParams* p = nullptr;
  int group = 0;           // q-heads per kv-head
  int rows = 0;            // group · q_len; row r is token r / group, q-head kv_head · group + r % group
  float scale_log2 = 0.0f; // softmax scale · log2(e), folded into q
  float cap_log2 = 0.0f;   // softcap · log2(e); 0: no soft-cap
};

// One work item: keys [key_begin, key_end) of sequence b, every kv-head
// (key_begin a multiple of kBlock). All heads in one item: the engine's
// cache interleaves the heads of a token, so one pass reads it in order.
struct Item {
  int b = 0;
  int key_begin = 0, key_end = 0;
};

// Rows of an item's partial state: every kv-head's rows, row h · rows + r.
inline size_t item_rows(const Problem& pr) { return static_cast<size_t>(pr.p->kv_heads) * pr.rows; }

// Floats of one q row in an item's scratch: D (bf16 items: q as float); the
// q8_0 item's row takes 4.25·D bytes (decode_attention_q8.inc: QRowQ8).
inline size_t q_row_floats(int head_dim) { return static_cast<size_t>(head_dim) + static_cast<size_t>(head_dim) / 8; }

// Floats of per-thread scratch an item needs: q [item_rows, q_row_floats] and scores [item_rows, kBlock].
inline size_t item_scratch_floats(const Problem& pr) {
  return item_rows(pr) * (q_row_floats(pr.p->head_dim) + kBlock);
}

// Runs one item into its partial state: m [item_rows] (running max, log2 units),
// l [item_rows] (sum of exp2(s − m)), acc [item_rows, D] (unnormalised Σ p·v).
// Rows that see no key of the range leave m = −inf, l = 0, acc = 0.
using ItemFn = void (*)(const Problem& pr, const Item& it, float* scratch, float* m, float* l, float* acc);

// The kernels; null where this build has none (then never selected).
extern const ItemFn kItemScalar;
extern const ItemFn kItemPortable;
extern const ItemFn kItemAvx2;
extern const ItemFn kItemAvx512;
extern const ItemFn kItemAvx512Bf16;
extern const ItemFn kItemNeon;
// Over a q8_0 or q4_0 cache (DecodeParams::kv_q8, kv_q4).
extern const ItemFn kItemQ8Portable;
extern const ItemFn kItemQ8Avx2;
extern const ItemFn kItemQ8Avx512Vnni;
extern const ItemFn kItemQ8NeonDot;

}  // namespace flashscope::cpu::decode
