// The part of a prefill trace's metadata that comes from the problem alone
// (shape, dtype, causal, scale), shared by the CPU and the GPU captures;
// each fills in its producer, device, kernel and tiling after.
#pragma once

#include "attention/attention_validate.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/trace.hpp"

namespace flashscope::trace_detail {

inline void fill_prefill_problem(const PrefillParams& p, bool varlen, TraceMeta* m) {
  m->kind = TraceKind::kPrefill;
  m->dtype = p.dtype;
  m->batch = p.batch;
  m->q_heads = p.q_heads;
  m->kv_heads = p.kv_heads;
  m->q_len = p.q_len;
  m->kv_len = p.kv_len;
  m->head_dim = p.head_dim;
  m->causal = p.causal;
  m->varlen = varlen;
  m->softmax_scale = effective_softmax_scale(p);
}

}  // namespace flashscope::trace_detail
