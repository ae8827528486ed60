// validate_trace(): what every consumer of a Trace may rely on, checked once
// (by the writer, so no producer can save a trace the reader rejects, and by
// the reader, so the app can index its arrays with the records' fields).
#include <cmath>
#include <string>

#include "flashscope/trace_records.hpp"
#include "util/math.hpp"

namespace flashscope {
namespace {

std::string at(const char* section, size_t i) { return std::string(section) + "[" + std::to_string(i) + "]"; }

Status out_of_range(const std::string& where, const char* field, int64_t value, const char* limit_name,
                    int64_t limit) {
  return invalid_argument(where + "." + field + " = " + std::to_string(value) + " is out of range (" + limit_name +
                          " = " + std::to_string(limit) + ")");
}

Status check_meta(const TraceMeta& m) {
  struct Str {
    const char* name;
    const std::string& value;
    size_t max;
  };
  for (const Str& s : {Str{"producer", m.producer, TraceMeta::kMaxProducerChars},
                       Str{"device_name", m.device_name, TraceMeta::kMaxDeviceChars},
                       Str{"backend", m.backend, TraceMeta::kMaxBackendChars},
                       Str{"kernel", m.kernel, TraceMeta::kMaxKernelChars}}) {
    if (s.value.size() > s.max)
      return invalid_argument(std::string("meta.") + s.name + " is " + std::to_string(s.value.size()) +
                              " characters, the format holds " + std::to_string(s.max));
    if (s.value.find('\0') != std::string::npos)
      return invalid_argument(std::string("meta.") + s.name + " contains a NUL character");
  }
  if (m.backend != "cpu" && m.backend != "cuda")
    return invalid_argument("meta.backend is '" + m.backend + "', expected 'cpu' or 'cuda'");
  if (m.kind != TraceKind::kPrefill && m.kind != TraceKind::kDecode)
    return invalid_argument("meta.kind = " + std::to_string(static_cast<uint32_t>(m.kind)) + " is unknown");
  if (m.dtype != DType::kBF16 && m.dtype != DType::kFP16 && m.dtype != DType::kFP32)
    return invalid_argument("meta.dtype = " + std::to_string(static_cast<uint32_t>(m.dtype)) + " is unknown");
  if (m.timer_unit != TimerUnit::kNanoseconds && m.timer_unit != TimerUnit::kCycles)
    return invalid_argument("meta.timer_unit = " + std::to_string(static_cast<uint32_t>(m.timer_unit)) +
                            " is unknown");
  if (m.batch < 1 || m.q_heads < 1 || m.kv_heads < 1 || m.head_dim < 1)
    return invalid_argument("meta: batch, q_heads, kv_heads and head_dim must be >= 1");
  if (m.q_heads % m.kv_heads != 0) return invalid_argument("meta.q_heads must be a multiple of meta.kv_heads");
  if (m.q_len < 0 || m.kv_len < 0) return invalid_argument("meta: q_len and kv_len must be >= 0");
  if (m.block_q < 1 || m.block_kv < 1) return invalid_argument("meta: block_q and block_kv must be >= 1");
  if (m.warps < 0 || m.page_size < 0 || m.num_splits < 0 || m.sm_count < 0)
    return invalid_argument("meta: warps, page_size, num_splits and sm_count must be >= 0");
  if (!(std::isfinite(m.softmax_scale) && m.softmax_scale > 0.0f))
    return invalid_argument("meta.softmax_scale must be finite and > 0");
  if (!(std::isfinite(m.timer_ticks_per_us) && m.timer_ticks_per_us > 0.0))
    return invalid_argument("meta.timer_ticks_per_us must be finite and > 0");
  if (m.traced_batch < -1 || m.traced_batch >= m.batch)
    return out_of_range("meta", "traced_batch", m.traced_batch, "batch", m.batch);
  if (m.traced_head < -1 || m.traced_head >= m.q_heads)
    return out_of_range("meta", "traced_head", m.traced_head, "q_heads", m.q_heads);
  return {};
}

Status check_tokens(const TraceTokens& t, const TraceMeta& m) {
  if (t.keys.size() > size_t(m.kv_len))
    return out_of_range("tokens", "keys.size()", int64_t(t.keys.size()), "kv_len", m.kv_len);
  if (t.row_keys.size() > size_t(m.q_len))
    return out_of_range("tokens", "row_keys.size()", int64_t(t.row_keys.size()), "q_len", m.q_len);
  for (size_t i = 0; i < t.row_keys.size(); ++i) {
    if (t.row_keys[i] >= t.keys.size())
      return out_of_range(at("tokens.row_keys", i), "key", t.row_keys[i], "keys", int64_t(t.keys.size()));
  }
  for (size_t j = 0; j < t.keys.size(); ++j) {
    if (t.keys[j].text.size() > TraceToken::kMaxTextBytes)
      return out_of_range(at("tokens.keys", j), "text bytes", int64_t(t.keys[j].text.size()), "most",
                          int64_t(TraceToken::kMaxTextBytes));
  }
  return {};
}

}  // namespace

const char* span_kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::kLoadIssueK: return "load_issue_k";
    case SpanKind::kLoadIssueV: return "load_issue_v";
    case SpanKind::kLoadWaitK: return "load_wait_k";
    case SpanKind::kLoadWaitV: return "load_wait_v";
    case SpanKind::kQK: return "qk";
    case SpanKind::kSoftmax: return "softmax";
    case SpanKind::kPV: return "pv";
    case SpanKind::kEpilogue: return "epilogue";
  }
  return "?";
}

Status validate_trace(const Trace& t) {
  const TraceMeta& m = t.meta;
  FLASHSCOPE_RETURN_IF_ERROR(check_meta(m));
  const int64_t q_tiles = ceil_div<int64_t>(m.q_len, m.block_q);
  const int64_t kv_tiles = ceil_div<int64_t>(m.kv_len, m.block_kv);
  const int64_t splits = m.num_splits > 0 ? m.num_splits : 1;

  // Checks shared by the record types that name a (batch, head).
  auto check_bh = [&](const std::string& w, uint32_t batch, uint32_t head) -> Status {
    if (batch >= uint32_t(m.batch)) return out_of_range(w, "batch", batch, "batch", m.batch);
    if (head >= uint32_t(m.q_heads)) return out_of_range(w, "head", head, "q_heads", m.q_heads);
    return {};
  };

  for (size_t i = 0; i < t.ctas.size(); ++i) {
    const CtaRecord& r = t.ctas[i];
    const std::string w = at("ctas", i);
    if (r.end < r.start) return invalid_argument(w + " ends before it starts");
    FLASHSCOPE_RETURN_IF_ERROR(check_bh(w, r.batch, r.head));
    if (r.q_tile >= q_tiles) return out_of_range(w, "q_tile", r.q_tile, "q-tiles", q_tiles);
    if (r.split >= splits) return out_of_range(w, "split", r.split, "splits", splits);
    if (r.kv_tiles > kv_tiles) return out_of_range(w, "kv_tiles", r.kv_tiles, "kv-tiles", kv_tiles);
  }
  for (size_t i = 0; i < t.spans.size(); ++i) {
    const WarpSpanRecord& r = t.spans[i];
    const std::string w = at("spans", i);
    if (r.end < r.start) return invalid_argument(w + " ends before it starts");
    if (r.cta >= t.ctas.size()) return out_of_range(w, "cta", r.cta, "CTA records", int64_t(t.ctas.size()));
    if (static_cast<uint32_t>(r.kind) >= kSpanKindCount)
      return out_of_range(w, "kind", static_cast<uint32_t>(r.kind), "kinds", kSpanKindCount);
    if (m.warps > 0 && r.warp >= uint32_t(m.warps)) return out_of_range(w, "warp", r.warp, "warps", m.warps);
    if (r.kv_tile < -1 || r.kv_tile >= kv_tiles) return out_of_range(w, "kv_tile", r.kv_tile, "kv-tiles", kv_tiles);
  }
  for (size_t i = 0; i < t.softmax.size(); ++i) {
    const SoftmaxStateRecord& r = t.softmax[i];
    const std::string w = at("softmax", i);
    FLASHSCOPE_RETURN_IF_ERROR(check_bh(w, r.batch, r.head));
    if (r.row >= uint32_t(m.q_len)) return out_of_range(w, "row", r.row, "q_len", m.q_len);
    if (r.kv_tile >= kv_tiles) return out_of_range(w, "kv_tile", r.kv_tile, "kv-tiles", kv_tiles);
    if (r.keys > uint32_t(m.block_kv)) return out_of_range(w, "keys", r.keys, "block_kv", m.block_kv);
  }
  for (size_t i = 0; i < t.tile_mass.size(); ++i) {
    const TileMassRecord& r = t.tile_mass[i];
    const std::string w = at("tile_mass", i);
    FLASHSCOPE_RETURN_IF_ERROR(check_bh(w, r.batch, r.head));
    if (r.q_tile >= q_tiles) return out_of_range(w, "q_tile", r.q_tile, "q-tiles", q_tiles);
    if (r.kv_tile >= kv_tiles) return out_of_range(w, "kv_tile", r.kv_tile, "kv-tiles", kv_tiles);
    if (r.rows > uint32_t(m.block_q)) return out_of_range(w, "rows", r.rows, "block_q", m.block_q);
    if (r.flags & ~(TileMassRecord::kSkipped | TileMassRecord::kMasked))
      return invalid_argument(w + ".flags = " + std::to_string(r.flags) + " has unknown bits");
  }
  for (size_t i = 0; i < t.prob_samples.size(); ++i) {
    const ProbSampleRecord& r = t.prob_samples[i];
    const std::string w = at("prob_samples", i);
    FLASHSCOPE_RETURN_IF_ERROR(check_bh(w, r.batch, r.head));
    if (r.row >= uint32_t(m.q_len)) return out_of_range(w, "row", r.row, "q_len", m.q_len);
    if (r.key >= uint32_t(m.kv_len)) return out_of_range(w, "key", r.key, "kv_len", m.kv_len);
    if (r.flags & ~ProbSampleRecord::kMasked)
      return invalid_argument(w + ".flags = " + std::to_string(r.flags) + " has unknown bits");
  }
  return check_tokens(t.tokens, m);
}

}  // namespace flashscope
