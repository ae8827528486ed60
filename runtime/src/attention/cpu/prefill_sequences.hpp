// The CPU prefill paths' view of a call, shared by the tiled attention
// (attention_tiled.cpp), the CPU trace capture (trace/cpu_capture.cpp) and,
// for its sequences, the FP64 reference (attention_reference.cpp):
// how an element of q/k/v/o widens and rounds, where each sequence starts
// and how long it is (padded batch or varlen), and the blocks of queries
// they hand to threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "flashscope/attention.hpp"
#include "flashscope/half.hpp"

namespace flashscope::cpu {

// The storage type of q/k/v/o: how to widen an element and how to round to it.
struct Bf16 {
  static float load(uint16_t x) { return bf16_to_float(x); }
  static uint16_t store(float f) { return float_to_bf16(f); }
  static float round(float f) { return bf16_to_float(float_to_bf16(f)); }
};
struct Fp16 {
  static float load(uint16_t x) { return fp16_to_float(x); }
  static uint16_t store(float f) { return float_to_fp16(f); }
  static float round(float f) { return fp16_to_float(float_to_fp16(f)); }
};

// One sequence: element offsets of its token 0 in q/k/v/o, where its lse
// rows start, and its lengths.
struct Sequence {
  int64_t q_offset = 0, k_offset = 0, v_offset = 0, o_offset = 0;
  int64_t lse_offset = 0;  // index of (head 0, query 0); heads are lse_head_stride apart
  int q_len = 0, kv_len = 0;
};

// A block of up to block_q queries of one sequence (all q-heads).
struct Block {
  int seq;
  int q0;
};

// Sequence b of p (padded batch or varlen). A decreasing cu_seqlens
// (malformed: validate() refuses it) gives an empty sequence, which keeps
// every later index in bounds.
inline Sequence prefill_sequence(const PrefillParams& p, int b) {
  Sequence s;
  if (p.cu_seqlens_q != nullptr) {
    const int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    s.q_len = static_cast<int>(std::max<int64_t>(0, p.cu_seqlens_q[b + 1] - q0));
    s.kv_len = static_cast<int>(std::max<int64_t>(0, p.cu_seqlens_k[b + 1] - k0));
    s.q_offset = q0 * p.q.seq_stride;
    s.k_offset = k0 * p.k.seq_stride;
    s.v_offset = k0 * p.v.seq_stride;
    s.o_offset = q0 * p.o.seq_stride;
    s.lse_offset = q0;
  } else {
    s.q_len = p.q_len;
    s.kv_len = p.kv_len;
    s.q_offset = b * p.q.batch_stride;
    s.k_offset = b * p.k.batch_stride;
    s.v_offset = b * p.v.batch_stride;
    s.o_offset = b * p.o.batch_stride;
    s.lse_offset = static_cast<int64_t>(b) * p.q_heads * p.q_len;
  }
  return s;
}

// p's sequences, and their blocks of block_q queries in order. With q_len 0
// (a call that computes nothing) no pointer, cu_seqlens included, is read.
// Throws std::bad_alloc.
inline void prefill_sequences(const PrefillParams& p, int block_q, std::vector<Sequence>* seqs,
                              std::vector<Block>* blocks) {
  seqs->assign(static_cast<size_t>(std::max(p.batch, 0)), Sequence{});
  blocks->clear();
  if (p.q_len == 0) return;
  for (int b = 0; b < p.batch; ++b) {
    const Sequence& s = (*seqs)[static_cast<size_t>(b)] = prefill_sequence(p, b);
    for (int q0 = 0; q0 < s.q_len; q0 += block_q) blocks->push_back({b, q0});
  }
}

// Items [0, items) over the OpenMP team, handed out one at a time (causal
// blocks near a sequence's end see many more keys than its first ones):
// each thread builds its state once, scratch(tid), then runs
// run(item, tid, state) for each item it takes.
template <typename MakeScratch, typename RunItem>
void parallel_items(int64_t items, MakeScratch&& scratch, RunItem&& run) {
#ifdef _OPENMP
#pragma omp parallel
#endif
  {
    int tid = 0;
#ifdef _OPENMP
    tid = omp_get_thread_num();
#endif
    const auto w = scratch(tid);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (int64_t item = 0; item < items; ++item) run(item, tid, w);
  }
}

}  // namespace flashscope::cpu
