#include "viz/trace_label.hpp"

#include <cstdio>

#include "viz/color_scale.hpp"

namespace flashscope::viz {

std::string trace_source_line(const TraceMeta& m) {
  std::string s = m.device_name.empty() ? "unknown device" : m.device_name;
  s += " \xC2\xB7 " + (m.backend.empty() ? std::string("?") : m.backend);
  s += " \xC2\xB7 kernel " + (m.kernel.empty() ? std::string("?") : m.kernel);
  if (m.sm_count > 0) s += " \xC2\xB7 " + std::to_string(m.sm_count) + " SMs";
  if (!m.producer.empty()) s += " \xC2\xB7 by " + m.producer;
  return s;
}

std::string trace_shape_line(const TraceMeta& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s B=%d Hq=%d Hkv=%d Lq=%d Lk=%d D=%d %s%s %s \xC2\xB7 tiles %d\xC3\x97%d",
                m.kind == TraceKind::kDecode ? "decode" : "prefill", m.batch, m.q_heads, m.kv_heads, m.q_len, m.kv_len,
                m.head_dim, m.causal ? "causal" : "non-causal", m.varlen ? " varlen" : "", dtype_name(m.dtype),
                m.block_q, m.block_kv);
  std::string s = buf;
  if (m.traced_head >= 0) {
    s += " \xC2\xB7 traced head " + std::to_string(m.traced_head);
    if (m.batch > 1) s += " of sequence " + std::to_string(m.traced_batch);
  }
  return s;
}

const char* span_kind_label(SpanKind k) {
  switch (k) {
    case SpanKind::kLoadIssueK:
      return "K load (issue)";
    case SpanKind::kLoadIssueV:
      return "V load (issue)";
    case SpanKind::kLoadWaitK:
      return "K load (wait)";
    case SpanKind::kLoadWaitV:
      return "V load (wait)";
    case SpanKind::kQK:
      return "Q\xC2\xB7K\xE1\xB5\x80 MMA";  // Q·Kᵀ
    case SpanKind::kSoftmax:
      return "softmax";
    case SpanKind::kPV:
      return "P\xC2\xB7V MMA";
    case SpanKind::kEpilogue:
      return "epilogue";
  }
  return "?";
}

Rgb span_kind_color(SpanKind k) {
  switch (k) {
    case SpanKind::kLoadIssueK:
      return {77, 140, 242};
    case SpanKind::kLoadIssueV:
      return {64, 196, 222};
    case SpanKind::kLoadWaitK:
      return {52, 78, 140};
    case SpanKind::kLoadWaitV:
      return {40, 110, 128};
    case SpanKind::kQK:
      return {118, 186, 0};
    case SpanKind::kSoftmax:
      return {242, 178, 51};
    case SpanKind::kPV:
      return {46, 170, 120};
    case SpanKind::kEpilogue:
      return {190, 115, 230};
  }
  return {128, 128, 128};
}

}  // namespace flashscope::viz
