// The CPU attention path: a plain FP64 reference and the tiled CPU backend.
//
// Two implementations on purpose. The reference is the yardstick every
// kernel (CPU or GPU) is measured against: exact two-pass softmax in double,
// no tiling, nothing clever, its own indexing code. The tiled backend is what
// a machine without a GPU runs, and it mirrors the GPU kernel step for step
// (64-key tiles, online softmax in float, exp2 with the scale folded in, P
// rounded to the input dtype before P·V), so that its numbers look like the
// GPU's and the dashboard's softmax traces mean the same thing on both.
//
// Semantics are those of flashscope/attention.hpp: bottom-right causal
// alignment (and sliding windows aligned the same way), soft-capping,
// varlen through host cu_seqlens, GQA head mapping, natural-log LSE of the
// scaled (capped) logits, rows that see no key give zeros and lse = -inf.
//
// Neither function validates its params: the dispatcher calls
// flashscope::validate() first. They only guard what memory safety needs and
// never crash on params validate() accepts.
#pragma once

#include "flashscope/attention.hpp"
#include "flashscope/status.hpp"

namespace flashscope::cpu {

// Reference attention in FP64, for tests and GPU checks.
//   q, k, v : read through p.q / p.k / p.v strides, in p.dtype (bf16 or fp16)
//   o_out   : float32, dense [batch, q_len, q_heads, head_dim]
//             (varlen: [total_q, q_heads, head_dim], total_q = cu_seqlens_q[batch])
//   lse_out : float32 or null; dense [batch, q_heads, q_len]
//             (varlen: [q_heads, total_q]); natural log, -inf for rows with no key
// p.o and p.lse are ignored. Returns kUnsupported for a dtype other than
// bf16/fp16 and kOutOfMemory if scratch cannot be allocated.
Status attention_reference(const PrefillParams& p, float* o_out, float* lse_out);

// The CPU backend: FlashAttention-2 online softmax over 64-key tiles, float32
// accumulation, OpenMP over (batch, q-head, 64-query block).
//   writes p.o in p.dtype through its strides and p.lse (float32, layout as
//   above) when non-null.
Status attention_tiled(const PrefillParams& p);

// Tests: true runs attention_tiled's portable micro-kernels even where the
// CPU has AVX2 (both give the same bits); false restores the choice by CPU.
void use_portable_tiled_kernels(bool on);

}  // namespace flashscope::cpu
