// Synthetic traces for the viz suites: a TraceMeta of a given shape and
// small helpers to append CTA and span records, so each test writes down
// exactly the records whose derived numbers it checks.
#pragma once

#include <cstdint>

#include "flashscope/trace.hpp"

namespace viz_test {

inline flashscope::Trace make_trace(int q_len, int kv_len, int block_q, int block_kv, bool causal, int warps = 4) {
  flashscope::Trace t;
  flashscope::TraceMeta& m = t.meta;
  m.producer = "test";
  m.device_name = "Test GPU";
  m.backend = "cuda";
  m.kernel = "v3";
  m.batch = 1;
  m.q_heads = 2;
  m.kv_heads = 1;
  m.q_len = q_len;
  m.kv_len = kv_len;
  m.head_dim = 64;
  m.causal = causal;
  m.softmax_scale = 0.125f;
  m.block_q = block_q;
  m.block_kv = block_kv;
  m.warps = warps;
  m.timer_unit = flashscope::TimerUnit::kNanoseconds;
  m.timer_ticks_per_us = 1000.0;
  m.traced_batch = 0;
  m.traced_head = 0;
  return t;
}

inline uint32_t add_cta(flashscope::Trace& t, uint32_t sm, uint64_t start, uint64_t end, uint32_t q_tile = 0,
                        uint32_t head = 0) {
  flashscope::CtaRecord c;
  c.start = start;
  c.end = end;
  c.sm = sm;
  c.head = head;
  c.q_tile = q_tile;
  t.ctas.push_back(c);
  return static_cast<uint32_t>(t.ctas.size() - 1);
}

inline void add_span(flashscope::Trace& t, uint32_t cta, uint32_t warp, flashscope::SpanKind kind, int kv_tile,
                     uint64_t start, uint64_t end) {
  flashscope::WarpSpanRecord s;
  s.start = start;
  s.end = end;
  s.cta = cta;
  s.warp = warp;
  s.kind = kind;
  s.kv_tile = kv_tile;
  t.spans.push_back(s);
}

}  // namespace viz_test
