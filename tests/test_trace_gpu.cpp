// The GPU trace capture (capture_cuda_prefill_trace, capture_cuda_paged_trace):
// the kernels built with their probes, checked against the production kernels,
// the CPU capture and double-precision math from the same inputs.
//
//  * The run itself: o and lse bit for bit equal to prefill() / paged_attention()
//    with the same kernel (the probes record; they must not change the math),
//    and within the fixture's tolerance of the FP64 reference.
//  * CTA records: one per CTA of the grid, each (sequence, head, q-tile[, split])
//    once, end >= start, SM id < sm_count, the KV tiles it visited.
//  * Spans: every warp of every traced CTA, in time order and not overlapping,
//    inside its CTA's interval; every KV tile the CTA visited has its Q·Kᵀ,
//    softmax and P·V spans in that order; one epilogue, last.
//  * Softmax states of the traced rows after each KV tile: the recurrence of
//    trace.hpp, the CPU capture's state after the same keys, exact math, and
//    m + ln l = the lse the run wrote.
//  * Tile masses: the whole grid, skipped (causal) blocks exactly those no
//    row can see and no CTA visited, each q-tile's masses summing to 1.
//
// Tolerances (float32 logits from bf16 inputs on both sides; the GPU's MMA
// sums in another order than the CPU's loop, and exp2 is ex2.approx):
//   m (running max)        |Δ| <= 1e-3·max(1, |m|) against the CPU capture,
//                          1e-4·(1 + |m|) against the FP64 logits: a logit's
//                          error is D·2^-24 of Σ|q·k|·scale, about 1e-5 here
//   l (running sum)        relative 1e-2 against the CPU capture (the bound the
//                          trace format promises consumers: P·V rounds P to
//                          bf16 (u = 2^-8) on both sides, l itself sums the
//                          unrounded p), 1e-3 against FP64 sums at the GPU's m
//   recurrence             rescale and l within relative 1e-5 of the float
//                          recurrence (a few float ulps of a quad's sums)
//   m + ln l vs lse        1e-4·(1 + |lse|): the epilogue's log2f vs ln here
//   tile masses            1e-3 absolute (each is <= 1, p from fp32 logits and
//                          the run's lse), q-tile sums within 1e-3 of 1
//   probabilities          relative 1e-3 + 1e-6 absolute
// Without a CUDA device (or without the probed kernels) each GPU case says it
// was skipped and passes; the last case checks kUnsupported there.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope_lab/lab.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/paged_attention.hpp"
#include "flashscope/trace.hpp"
#include "support/attention_problem.hpp"
#include "support/attention_reference.hpp"
#include "support/device_attention.hpp"
#include "support/gpu.hpp"
#include "support/paged_problem.hpp"
#include "trace/cuda_capture.hpp"
#include "util/math.hpp"

namespace fs = flashscope;
using fs::ceil_div;
using fs::testing::AttentionProblem;
using fs::testing::AttentionShape;
using fs::testing::DeviceAttention;
using fs::testing::DevicePagedAttention;
using fs::testing::Operand;
using fs::testing::PagedProblem;
using fs::testing::PagedShape;
using fs::testing::upload;
using fs::testing::dense_shape;
using fs::testing::lse_index;
using fs::testing::near_rel;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool skip_gpu_trace_case() {
  if (fs::testing::skip_without_gpu()) return true;
#ifndef FLASHSCOPE_KERNEL_PROBES
  MESSAGE("this build has no probed kernels (FLASHSCOPE_KERNEL_PROBES=OFF): GPU trace case skipped");
  fs::testing::mark_skipped();
  return true;
#else
  return false;
#endif
}

// --- exact math for one (sequence, head) ------------------------------------

struct ExactHead {
  int q_len = 0, kv_len = 0;
  bool causal = false;
  std::vector<double> s;    // [q_len, kv_len] scaled logits, natural units
  std::vector<double> lse;  // [q_len]; -inf for a row that sees no key

  int shift() const { return kv_len - q_len; }
  bool visible(int i, int j) const { return !causal || j <= i + shift(); }
  // Keys of [0, kv_len) row i sees: a prefix.
  int visible_keys(int i) const { return causal ? std::clamp(i + shift() + 1, 0, kv_len) : kv_len; }
  double logit(int i, int j) const { return s[size_t(i) * size_t(kv_len) + size_t(j)]; }
  double p(int i, int j) const { return visible(i, j) ? std::exp(logit(i, j) - lse[size_t(i)]) : 0.0; }
  // Max of the row's visible logits among keys [0, e); -inf when none.
  double max_before(int i, int e) const {
    double m = -INFINITY;
    for (int j = 0; j < std::min(e, visible_keys(i)); ++j) m = std::max(m, logit(i, j));
    return m;
  }
  // Σ exp(s − m) over the row's visible keys among [0, e).
  double sum_before(int i, int e, double m) const {
    double l = 0;
    for (int j = 0; j < std::min(e, visible_keys(i)); ++j) l += std::exp(logit(i, j) - m);
    return l;
  }
};

template <typename Q, typename K>
ExactHead exact_head(int q_len, int kv_len, int dim, bool causal, double scale, Q q, K k) {
  ExactHead e;
  e.q_len = q_len;
  e.kv_len = kv_len;
  e.causal = causal;
  e.s.assign(size_t(q_len) * size_t(kv_len), 0.0);
  e.lse.assign(size_t(q_len), -INFINITY);
  for (int i = 0; i < q_len; ++i) {
    for (int j = 0; j < kv_len; ++j) {
      double dot = 0;
      for (int d = 0; d < dim; ++d) dot += double(q(i, d)) * double(k(j, d));
      e.s[size_t(i) * size_t(kv_len) + size_t(j)] = scale * dot;
    }
    const int n = e.visible_keys(i);
    if (n == 0) continue;
    const double m = e.max_before(i, n);
    e.lse[size_t(i)] = m + std::log(e.sum_before(i, n, m));
  }
  return e;
}

// --- the checks shared by prefill and paged captures -------------------------

// Softmax records of the traced rows: recurrence, exact math, the CPU
// capture's state after the same keys, and the run's lse.
void check_softmax(const fs::Trace& gpu, const fs::Trace& cpu, const ExactHead& ex, const std::vector<int32_t>& rows,
                   const std::function<float(int)>& run_lse) {
  const int bkv = gpu.meta.block_kv, cpu_bkv = cpu.meta.block_kv;
  std::map<int, std::vector<const fs::SoftmaxStateRecord*>> by_row, cpu_by_row;
  for (const fs::SoftmaxStateRecord& r : gpu.softmax) {
    REQUIRE(int(r.batch) == gpu.meta.traced_batch);
    REQUIRE(int(r.head) == gpu.meta.traced_head);
    by_row[int(r.row)].push_back(&r);
  }
  for (const fs::SoftmaxStateRecord& r : cpu.softmax) cpu_by_row[int(r.row)].push_back(&r);
  for (const auto& [row, recs] : by_row)
    CHECK_MESSAGE(std::count(rows.begin(), rows.end(), row) > 0, "a record for row ", row, ", which was not traced");

  for (int i : std::set<int>(rows.begin(), rows.end())) {
    CAPTURE(i);
    const int lv = ex.visible_keys(i);
    const auto& recs = by_row[i];
    // The CPU's states by the number of visible keys they include.
    std::map<int, const fs::SoftmaxStateRecord*> cpu_at;
    for (const fs::SoftmaxStateRecord* c : cpu_by_row[i]) {
      const int e = std::min({(int(c->kv_tile) + 1) * cpu_bkv, ex.kv_len, lv});
      cpu_at.emplace(e, c);
    }
    if (recs.empty()) {
      // Only a row whose CTA visits no KV tile has no records, and it sees no key.
      CHECK(lv == 0);
      CHECK(run_lse(i) == -kInf);
      continue;
    }
    float m_old = -kInf, l_old = 0.0f;
    bool compared_final = false;
    for (size_t n = 0; n < recs.size(); ++n) {
      const fs::SoftmaxStateRecord& r = *recs[n];
      CAPTURE(r.kv_tile);
      REQUIRE(r.kv_tile == n);  // tiles 0, 1, 2, ... in order
      const int j0 = int(r.kv_tile) * bkv;
      const int keys = std::clamp(std::min(ex.kv_len, lv) - j0, 0, bkv);
      CHECK(r.keys == uint32_t(keys));
      if (keys == 0) {
        CHECK(r.rescale == 1.0f);
        CHECK(r.tile_max == -kInf);
        CHECK(r.tile_sum == 0.0f);
        CHECK(std::memcmp(&r.m, &m_old, sizeof m_old) == 0);
        CHECK(r.l == doctest::Approx(l_old).epsilon(1e-6));
      } else {
        CHECK(r.m == std::max(m_old, r.tile_max));
        if (m_old == -kInf) {
          CHECK(r.rescale == 0.0f);
        } else {
          CHECK(near_rel(r.rescale, std::exp(double(m_old) - r.m), 1e-5));
        }
        CHECK(near_rel(r.l, double(r.rescale) * l_old + r.tile_sum, 1e-5));
        double tmax = -INFINITY;
        for (int j = j0; j < j0 + keys; ++j) tmax = std::max(tmax, ex.logit(i, j));
        CHECK(std::fabs(r.tile_max - tmax) <= 1e-4 * (1 + std::fabs(tmax)));
      }
      // The state after the row's first e visible keys, whoever tiled them.
      const int e = std::min({j0 + bkv, ex.kv_len, lv});
      if (e == 0) {
        CHECK(r.m == -kInf);
        CHECK(r.l == 0.0f);
      } else {
        const double m_exact = ex.max_before(i, e);
        CHECK(std::fabs(r.m - m_exact) <= 1e-4 * (1 + std::fabs(m_exact)));
        CHECK(near_rel(r.l, ex.sum_before(i, e, r.m), 1e-3));
        if (auto c = cpu_at.find(e); c != cpu_at.end()) {
          CHECK(std::fabs(r.m - c->second->m) <= 1e-3 * std::max(1.0f, std::fabs(c->second->m)));
          CHECK(near_rel(r.l, c->second->l, 1e-2));
          compared_final |= e == lv;
        }
      }
      m_old = r.m;
      l_old = r.l;
    }
    if (lv > 0) {
      CHECK_MESSAGE(compared_final, "the row's final state was never compared with the CPU capture's");
      const double lse = run_lse(i);
      CHECK(std::fabs(double(m_old) + std::log(double(l_old)) - lse) <= 1e-4 * (1 + std::fabs(lse)));
    } else {
      CHECK(l_old == 0.0f);
      CHECK(run_lse(i) == -kInf);
    }
  }
}

// Spans of the traced CTAs: which CTAs, and each warp's story.
void check_spans(const fs::Trace& t, const std::function<bool(const fs::CtaRecord&)>& traced) {
  const int warps = t.meta.warps;
  REQUIRE(warps >= 1);
  std::map<uint32_t, std::map<uint32_t, std::vector<const fs::WarpSpanRecord*>>> by_cta;
  for (const fs::WarpSpanRecord& s : t.spans) by_cta[s.cta][s.warp].push_back(&s);
  size_t traced_ctas = 0;
  for (size_t c = 0; c < t.ctas.size(); ++c) {
    const bool has = by_cta.count(uint32_t(c)) > 0;
    CHECK_MESSAGE(has == traced(t.ctas[c]), "CTA ", c, " (batch ", t.ctas[c].batch, ", head ", t.ctas[c].head,
                  ", q-tile ", t.ctas[c].q_tile, ") ", has ? "has spans but is not traced" : "is traced but has no spans");
    traced_ctas += has;
  }
  CHECK(traced_ctas > 0);
  for (const auto& [cta, warp_spans] : by_cta) {
    const fs::CtaRecord& c = t.ctas[cta];
    CAPTURE(cta);
    CHECK(int(warp_spans.size()) == warps);
    for (const auto& [warp, spans] : warp_spans) {
      CAPTURE(warp);
      uint64_t last = c.start;
      std::map<fs::SpanKind, std::vector<int32_t>> tiles;
      std::map<std::pair<fs::SpanKind, int32_t>, size_t> position;
      for (size_t n = 0; n < spans.size(); ++n) {
        const fs::WarpSpanRecord& s = *spans[n];
        CHECK(s.start >= last);  // in order, not overlapping
        CHECK(s.end >= s.start);
        CHECK(s.end <= c.end);
        last = s.end;
        tiles[s.kind].push_back(s.kv_tile);
        position[{s.kind, s.kv_tile}] = n;
        if (s.kind == fs::SpanKind::kEpilogue) {
          CHECK(n + 1 == spans.size());
          CHECK(s.kv_tile == -1);
        }
      }
      CHECK(tiles[fs::SpanKind::kEpilogue].size() == 1);
      // Q·Kᵀ, softmax and P·V once for each tile the CTA visited: a contiguous run.
      std::vector<int32_t>& qk = tiles[fs::SpanKind::kQK];
      REQUIRE(qk.size() == c.kv_tiles);
      for (size_t n = 1; n < qk.size(); ++n) CHECK(qk[n] == qk[0] + int32_t(n));
      for (fs::SpanKind k : {fs::SpanKind::kSoftmax, fs::SpanKind::kPV}) {
        std::vector<int32_t> v = tiles[k];
        std::sort(v.begin(), v.end());
        CHECK(v == qk);
      }
      for (int32_t tile : qk) {
        CHECK(position[{fs::SpanKind::kQK, tile}] < position[{fs::SpanKind::kSoftmax, tile}]);
        CHECK(position[{fs::SpanKind::kSoftmax, tile}] < position[{fs::SpanKind::kPV, tile}]);
      }
      for (fs::SpanKind k : {fs::SpanKind::kLoadIssueK, fs::SpanKind::kLoadIssueV, fs::SpanKind::kLoadWaitK,
                             fs::SpanKind::kLoadWaitV})
        for (int32_t tile : tiles[k]) {
          CHECK(!qk.empty());
          if (!qk.empty()) CHECK((tile >= qk.front() && tile <= qk.back()));
        }
    }
  }
}

// The Hopper kernel's spans: warp 0 (the producer) issues each tile's K and
// V copies, warps 1-3 record nothing, and every consumer warp (4..) has one
// wait for K, one for V, Q·Kᵀ, softmax and P·V per tile the CTA visited and one
// epilogue, after all of them. Its phases are asynchronous, so spans of one
// warp overlap (Q·K(t)ᵀ and P·V(t-1) are issued together).
void check_hopper_spans(const fs::Trace& t, const std::function<bool(const fs::CtaRecord&)>& traced) {
  std::map<uint32_t, std::map<uint32_t, std::vector<const fs::WarpSpanRecord*>>> by_cta;
  for (const fs::WarpSpanRecord& s : t.spans) by_cta[s.cta][s.warp].push_back(&s);
  size_t traced_ctas = 0;
  for (size_t c = 0; c < t.ctas.size(); ++c) {
    if (!traced(t.ctas[c])) {
      CHECK(by_cta.count(uint32_t(c)) == 0);
      continue;
    }
    ++traced_ctas;
    const fs::CtaRecord& cta = t.ctas[c];
    CAPTURE(c);
    const auto& warps = by_cta[uint32_t(c)];
    for (uint32_t w = 1; w < 4; ++w) CHECK(warps.count(w) == 0);
    for (const auto& [w, spans] : warps) {
      CAPTURE(w);
      std::map<fs::SpanKind, std::vector<int32_t>> tiles;
      for (const fs::WarpSpanRecord* s : spans) {
        CHECK(s->start >= cta.start);
        CHECK(s->end >= s->start);
        CHECK(s->end <= cta.end);
        tiles[s->kind].push_back(s->kv_tile);
      }
      std::vector<int32_t> want;
      for (uint32_t i = 0; i < cta.kv_tiles; ++i) want.push_back(int32_t(i) + (tiles[fs::SpanKind::kQK].empty() ? 0 : tiles[fs::SpanKind::kQK].front()));
      if (w == 0) {
        CHECK(tiles[fs::SpanKind::kLoadIssueK].size() == cta.kv_tiles);
        CHECK(tiles[fs::SpanKind::kLoadIssueV].size() == cta.kv_tiles);
        CHECK(tiles[fs::SpanKind::kQK].empty());
        continue;
      }
      CHECK(tiles[fs::SpanKind::kQK] == want);
      for (fs::SpanKind k :
           {fs::SpanKind::kLoadWaitK, fs::SpanKind::kLoadWaitV, fs::SpanKind::kSoftmax, fs::SpanKind::kPV}) {
        std::vector<int32_t> v = tiles[k];
        std::sort(v.begin(), v.end());
        CHECK(v == want);
      }
      REQUIRE(tiles[fs::SpanKind::kEpilogue].size() == 1);
      for (const fs::WarpSpanRecord* s : spans)
        if (s->kind != fs::SpanKind::kEpilogue) CHECK(s->end <= spans.back()->start);
    }
  }
  CHECK(traced_ctas > 0);
}

// Tile masses and probability samples of the traced head.
void check_mass(const fs::Trace& t, const ExactHead& ex, const std::vector<fs::TileCoord>& samples) {
  const int bq = t.meta.block_q, bkv = t.meta.block_kv;
  const int q_tiles = ceil_div(ex.q_len, bq), kv_tiles = ceil_div(ex.kv_len, bkv);
  REQUIRE(int(t.tile_mass.size()) == q_tiles * kv_tiles);
  for (int qt = 0; qt < q_tiles; ++qt) {
    const int i0 = qt * bq, i1 = std::min(ex.q_len, i0 + bq);
    int seeing = 0;
    for (int i = i0; i < i1; ++i) seeing += ex.visible_keys(i) > 0;
    double total = 0;
    for (int kt = 0; kt < kv_tiles; ++kt) {
      const fs::TileMassRecord& r = t.tile_mass[size_t(qt) * size_t(kv_tiles) + size_t(kt)];
      CAPTURE(qt);
      CAPTURE(kt);
      REQUIRE(r.q_tile == uint32_t(qt));
      REQUIRE(r.kv_tile == uint32_t(kt));
      CHECK(r.rows == uint32_t(seeing));
      const int j0 = kt * bkv, j1 = std::min(ex.kv_len, j0 + bkv);
      bool any_visible = false, any_masked = false;
      double mass = 0, max_p = 0;
      for (int i = i0; i < i1; ++i)
        for (int j = j0; j < j1; ++j) {
          const bool vis = ex.visible(i, j);
          any_visible |= vis;
          any_masked |= !vis;
          mass += ex.p(i, j);
          max_p = std::max(max_p, ex.p(i, j));
        }
      CHECK(bool(r.flags & fs::TileMassRecord::kSkipped) == !any_visible);
      if (any_visible) CHECK(bool(r.flags & fs::TileMassRecord::kMasked) == any_masked);
      CHECK(std::fabs(r.mass - (seeing > 0 ? mass / seeing : 0.0)) <= 1e-3);
      CHECK(near_rel(r.max_prob, max_p, 1e-3, 1e-6));
      total += r.mass;
    }
    if (seeing > 0) CHECK(std::fabs(total - 1.0) <= 1e-3);
  }
  size_t expected = 0;
  for (const fs::TileCoord& tc : samples)
    expected += size_t(std::min(ex.q_len, (tc.q_tile + 1) * bq) - tc.q_tile * bq) *
                size_t(std::min(ex.kv_len, (tc.kv_tile + 1) * bkv) - tc.kv_tile * bkv);
  CHECK(t.prob_samples.size() == expected);
  for (const fs::ProbSampleRecord& r : t.prob_samples) {
    const int i = int(r.row), j = int(r.key);
    const bool vis = ex.visible(i, j) && ex.visible_keys(i) > 0;
    CAPTURE(i);
    CAPTURE(j);
    CHECK(bool(r.flags & fs::ProbSampleRecord::kMasked) == !vis);
    CHECK(near_rel(r.prob, ex.p(i, j), 1e-3, 1e-6));
  }
}

void check_meta(const fs::Trace& t) {
  const fs::TraceMeta& m = t.meta;
  CHECK(m.backend == "cuda");
  CHECK(m.timer_unit == fs::TimerUnit::kNanoseconds);
  CHECK(m.timer_ticks_per_us == 1000.0);
  CHECK(m.sm_count > 0);
  CHECK(m.sol_tflops > 0);
  CHECK(m.sol_dram_gbps > 0);
  CHECK(m.elapsed_ms > 0);
  CHECK(m.flops > 0);
  CHECK(!m.device_name.empty());
  CHECK(m.dropped_spans == 0);
  CHECK(fs::validate_trace(t).ok());
  for (const fs::CtaRecord& c : t.ctas) {
    CHECK(c.end >= c.start);
    CHECK(c.sm < uint32_t(m.sm_count));
  }
  // A valid file, and the same trace read back.
  auto bytes = fs::serialize_trace(t);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().message());
  auto back = fs::parse_trace(bytes->data(), bytes->size());
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  CHECK(back->spans.size() == t.spans.size());
  CHECK(back->softmax.size() == t.softmax.size());
  CHECK(back->meta.dropped_spans == t.meta.dropped_spans);
}

// --- prefill ------------------------------------------------------------------

struct ExpectedTiles {
  int block_q, block_kv, warps;
};
ExpectedTiles prefill_tiles(fs::PrefillKernel k, int dim, bool varlen, bool causal, int q_len, int kv_len) {
  // hopper (hopper_config.cuh): at D128 dense (TMA) 176-key tiles, 192 from
  // 4096 keys, else 128; at D64 dense three consumer warpgroups of 64 rows
  // (16 warps with the producer) unless the problem is causal with at most
  // 1024 queries; otherwise two (12).
  if (k == fs::PrefillKernel::kHopper) {
    const bool three = dim == 64 && !varlen && !(causal && q_len <= 1024);
    const int keys = dim == 128 && !varlen ? (kv_len >= 4096 ? 192 : 176) : 128;
    return {three ? 192 : 128, keys, three ? 16 : 12};
  }
  // prefill_versions.cuh: 128-row CTAs; v3/v4 32-key tiles; v5 at D64 four warps.
  const bool small_kv = k == fs::lab::kV3 || k == fs::lab::kV4;
  const bool four_warps = k == fs::PrefillKernel::kV5 && dim == 64;
  return {128, small_kv ? 32 : 64, four_warps ? 4 : 8};
}

void check_prefill_capture(AttentionProblem& prob, DeviceAttention& dev, fs::PrefillKernel kernel,
                           const fs::TraceOptions& opt) {
  const AttentionShape& sh = prob.shape();
  INFO("case: ", sh.describe(), " kernel ", std::string(fs::prefill_kernel_name(kernel)));
  const int b = opt.batch, h = opt.head;

  // The capture, then prefill() on the same inputs: the same bits.
  dev.poison(prob);
  fs::Trace t;
  const fs::Status st = fs::capture_cuda_prefill_trace(dev.params(prob, kernel), opt, &t);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  // The plan made beforehand has the tiles the capture recorded in.
  const fs::Result<fs::PrefillPlan> plan = fs::plan_prefill(dev.params(prob, kernel));
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  CHECK(plan->block_q == t.meta.block_q);
  CHECK(plan->block_kv == t.meta.block_kv);
  dev.read(prob);
  const std::vector<uint16_t> captured_o = prob.o_storage();
  const std::vector<float> captured_lse = prob.lse_storage();
  CHECK(prob.guards_intact());
  const std::vector<float> out = prob.output_as_float(), lse = prob.lse_values();
  const fs::testing::Tolerance tol = prob.tolerance();
  CHECK(prob.normalized_error(out.data()) < tol.normalized);
  CHECK(prob.max_abs_error(out.data()) < tol.max_abs);
  CHECK(prob.lse_max_abs_error(lse.data()) < tol.lse_abs);
  // The kernel the trace names: the one asked for; for auto, prefill()'s choice.
  fs::PrefillKernel ran = fs::PrefillKernel::kAuto;
  REQUIRE(fs::parse_prefill_kernel(t.meta.kernel, &ran));
  CHECK(ran == fs::resolve_prefill_kernel(dev.params(prob, kernel)));
  dev.poison(prob);
  REQUIRE(fs::prefill(dev.params(prob, ran)).ok());
  REQUIRE(fs::device_synchronize().ok());
  dev.read(prob);
  CHECK_MESSAGE(captured_o == prob.o_storage(), "the probed kernel's o differs from prefill()'s");
  CHECK_MESSAGE(std::memcmp(captured_lse.data(), prob.lse_storage().data(), captured_lse.size() * 4) == 0,
                "the probed kernel's lse differs from prefill()'s");

  const ExpectedTiles tiles = prefill_tiles(ran, sh.head_dim, sh.varlen, sh.causal, sh.q_len, sh.kv_len);
  const fs::TraceMeta& m = t.meta;
  check_meta(t);
  CHECK(m.kind == fs::TraceKind::kPrefill);
  CHECK(m.block_q == tiles.block_q);
  CHECK(m.block_kv == tiles.block_kv);
  CHECK(m.warps == tiles.warps);
  CHECK(m.page_size == 0);
  CHECK(m.num_splits == 0);
  CHECK(m.traced_batch == b);
  CHECK(m.traced_head == h);

  // CTAs: one per (sequence, head, q-tile) that has rows, each visiting the
  // tiles up to its last row's last key.
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;
  size_t expected_ctas = 0;
  for (int sb = 0; sb < sh.batch; ++sb)
    expected_ctas += size_t(ceil_div(prob.seq_q_len(sb), tiles.block_q)) * sh.q_heads;
  CHECK(t.ctas.size() == expected_ctas);
  std::map<uint32_t, uint32_t> traced_tiles;  // q-tile -> KV tiles visited, traced (b, h)
  for (const fs::CtaRecord& c : t.ctas) {
    CHECK(seen.insert({c.batch, c.head, c.q_tile}).second);
    CHECK(c.split == 0);
    const int q_len = prob.seq_q_len(int(c.batch)), kv_len = prob.seq_kv_len(int(c.batch));
    const int kv_end =
        sh.causal ? std::clamp(int(c.q_tile) * tiles.block_q + tiles.block_q + kv_len - q_len, 0, kv_len) : kv_len;
    CHECK(c.kv_tiles == uint32_t(ceil_div(kv_end, tiles.block_kv)));
    if (int(c.batch) == b && int(c.head) == h) traced_tiles[c.q_tile] = c.kv_tiles;
  }
  if (ran == fs::PrefillKernel::kHopper)
    check_hopper_spans(t, [&](const fs::CtaRecord& c) { return int(c.batch) == b && int(c.head) == h; });
  else
    check_spans(t, [&](const fs::CtaRecord& c) { return int(c.batch) == b && int(c.head) == h; });

  // Softmax states against the CPU capture of the same inputs and exact math.
  const double scale = m.softmax_scale;
  const int group = sh.q_heads / sh.kv_heads;
  const ExactHead ex = exact_head(
      prob.seq_q_len(b), prob.seq_kv_len(b), sh.head_dim, sh.causal, scale,
      [&](int i, int d) { return prob.get(Operand::kQ, b, i, h, d); },
      [&](int j, int d) { return prob.get(Operand::kK, b, j, h / group, d); });
  fs::Trace cpu;
  fs::TraceOptions cpu_opt = opt;
  cpu_opt.sample_tiles.clear();  // in the CPU's 64x64 tiles these may not exist
  REQUIRE(fs::capture_cpu_prefill_trace(prob.host_params(), cpu_opt, &cpu).ok());
  check_softmax(t, cpu, ex, opt.rows, [&](int i) { return captured_lse[size_t(AttentionProblem::kLseGuard + lse_index(prob, b, h, i))]; });

  check_mass(t, ex, opt.sample_tiles);
  // A skipped block is one the kernel never computed: past its CTA's tiles.
  for (const fs::TileMassRecord& r : t.tile_mass)
    CHECK(bool(r.flags & fs::TileMassRecord::kSkipped) == (r.kv_tile >= traced_tiles[r.q_tile]));
}

// v1..v6, and the hopper kernel where the device runs it.
std::vector<fs::PrefillKernel> probed_kernels() {
  std::vector<fs::PrefillKernel> k = fs::lab::ladder_kernels();
  if (fs::prefill_kernel_runnable(fs::PrefillKernel::kHopper)) k.push_back(fs::PrefillKernel::kHopper);
  return k;
}

// --- paged ------------------------------------------------------------------------

void check_paged_capture(PagedProblem& prob, DevicePagedAttention& dev, int splits, const fs::TraceOptions& opt) {
  const PagedShape& sh = prob.shape();
  INFO("case: ", sh.describe(), " num_splits=", splits);
  const int b = opt.batch, h = opt.head, group = sh.q_heads / sh.kv_heads;

  // The capture (its own split workspace), then paged_attention() with the same split count.
  dev.poison(prob);
  fs::Trace t;
  fs::PagedAttentionParams p = dev.params(prob);
  p.num_splits = splits;
  const fs::Status st = fs::capture_cuda_paged_trace(p, opt, &t);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  dev.read(prob);
  const std::vector<uint16_t> captured_o = prob.o_storage();
  const std::vector<float> captured_lse = prob.lse_storage();
  CHECK(prob.guards_intact());
  const std::vector<float> out = prob.output_as_float(), lse = prob.lse_values();
  const fs::testing::Tolerance tol = prob.tolerance();
  CHECK(prob.worst_sequence_error(out.data()) < tol.normalized);
  CHECK(prob.max_abs_error(out.data()) < tol.max_abs);
  CHECK(prob.lse_max_abs_error(lse.data()) < tol.lse_abs);
  auto plan = fs::plan_paged_attention(p);
  REQUIRE(plan.ok());
  CHECK(t.meta.num_splits == plan->num_splits);
  fs::DeviceBuffer ws;
  if (plan->workspace_bytes > 0) {
    auto w = fs::DeviceBuffer::allocate(plan->workspace_bytes);
    REQUIRE(w.ok());
    ws = std::move(w.value());
  }
  p.workspace = ws.data();
  p.workspace_bytes = ws.size();
  dev.poison(prob);
  REQUIRE(fs::paged_attention(p).ok());
  REQUIRE(fs::device_synchronize().ok());
  dev.read(prob);
  CHECK_MESSAGE(captured_o == prob.o_storage(), "the probed kernel's o differs from paged_attention()'s");
  CHECK_MESSAGE(std::memcmp(captured_lse.data(), prob.lse_storage().data(), captured_lse.size() * 4) == 0,
                "the probed kernel's lse differs from paged_attention()'s");

  const fs::TraceMeta& m = t.meta;
  check_meta(t);
  const bool decode = sh.q_len * group <= 64;
  CHECK(m.kind == (decode ? fs::TraceKind::kDecode : fs::TraceKind::kPrefill));
  CHECK(m.page_size == sh.page_size);
  CHECK(m.kv_len == sh.max_kv_len());
  CHECK(m.q_len == sh.q_len);
  const int kernel_block_q = decode ? 16 : 128;
  CHECK(m.block_q == std::max(1, kernel_block_q / group));
  CHECK(m.warps == (decode ? 1 : 8));
  CHECK(m.block_kv == (decode && sh.head_dim == 128 ? 32 : 64));

  // CTAs: the whole grid, (q-tile x split) per kv-head and sequence.
  const int q_tiles = ceil_div(sh.q_len * group, kernel_block_q);
  CHECK(t.ctas.size() == size_t(q_tiles) * size_t(m.num_splits) * size_t(sh.kv_heads) * size_t(sh.batch()));
  std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> seen;
  for (const fs::CtaRecord& c : t.ctas) {
    CHECK(seen.insert({c.batch, c.head, c.q_tile, c.split}).second);
    CHECK(c.split < uint32_t(m.num_splits));
  }
  // Traced: the CTAs of the traced sequence whose rows include q-head h.
  check_spans(t, [&](const fs::CtaRecord& c) {
    if (int(c.batch) != b || int(c.head) / group != h / group) return false;
    // The CTA's rows are packed rows [r0, r0 + kernel_block_q) with r0 = token·group + head % group.
    const int r0 = int(c.q_tile) * m.block_q * group + int(c.head) % group;  // exact for these shapes (group | 16)
    for (int r = r0; r < std::min(r0 + kernel_block_q, sh.q_len * group); ++r)
      if (r % group == h % group) return true;
    return false;
  });

  const int kv_len = prob.kv_lens()[size_t(b)];
  const double scale = m.softmax_scale;
  const ExactHead ex = exact_head(
      sh.q_len, kv_len, sh.head_dim, sh.causal, scale, [&](int i, int d) { return prob.q_at(b, i, h, d); },
      [&](int j, int d) { return prob.k_at(b, j, h / group, d); });

  // The CPU capture of the same sequence as a dense problem: q [1, q_len, Hq, D],
  // k and v gathered from the pages into [1, kv_len, Hkv, D].
  const int D = sh.head_dim;
  std::vector<uint16_t> hq(size_t(sh.q_len) * sh.q_heads * D), hk(size_t(kv_len) * sh.kv_heads * D),
      hv(hk.size()), ho(hq.size());
  auto store = [&](float x) { return sh.dtype == fs::DType::kFP16 ? fs::float_to_fp16(x) : fs::float_to_bf16(x); };
  for (int i = 0; i < sh.q_len; ++i)
    for (int hh = 0; hh < sh.q_heads; ++hh)
      for (int d = 0; d < D; ++d) hq[(size_t(i) * sh.q_heads + hh) * D + d] = store(prob.q_at(b, i, hh, d));
  for (int j = 0; j < kv_len; ++j)
    for (int hh = 0; hh < sh.kv_heads; ++hh)
      for (int d = 0; d < D; ++d) {
        hk[(size_t(j) * sh.kv_heads + hh) * D + d] = store(prob.k_at(b, j, hh, d));
        hv[(size_t(j) * sh.kv_heads + hh) * D + d] = store(prob.v_at(b, j, hh, d));
      }
  fs::PrefillParams cp;
  cp.q = fs::bshd(hq.data(), sh.q_len, sh.q_heads, D);
  cp.k = fs::bshd(hk.data(), kv_len, sh.kv_heads, D);
  cp.v = fs::bshd(hv.data(), kv_len, sh.kv_heads, D);
  cp.o = fs::bshd(ho.data(), sh.q_len, sh.q_heads, D);
  cp.device = fs::Device::kCpu;
  cp.dtype = sh.dtype;
  cp.q_heads = sh.q_heads;
  cp.kv_heads = sh.kv_heads;
  cp.q_len = sh.q_len;
  cp.kv_len = kv_len;
  cp.head_dim = D;
  cp.causal = sh.causal;
  cp.softmax_scale = sh.softmax_scale;
  fs::TraceOptions cpu_opt = opt;
  cpu_opt.batch = 0;
  cpu_opt.sample_tiles.clear();
  fs::Trace cpu;
  REQUIRE(fs::capture_cpu_prefill_trace(cp, cpu_opt, &cpu).ok());
  for (fs::SoftmaxStateRecord& r : cpu.softmax) r.batch = uint32_t(b);
  check_softmax(t, cpu, ex, opt.rows, [&](int i) {
    return captured_lse[size_t(PagedProblem::kLseGuard + (int64_t(b) * sh.q_heads + h) * sh.q_len + i)];
  });
  check_mass(t, ex, opt.sample_tiles);
}

fs::TraceOptions options(int batch, int head, std::vector<int32_t> rows, std::vector<fs::TileCoord> samples) {
  fs::TraceOptions o;
  o.batch = batch;
  o.head = head;
  o.rows = std::move(rows);
  o.sample_tiles = std::move(samples);
  return o;
}

}  // namespace

TEST_CASE("gpu trace: prefill capture, every kernel: prefill()'s output, the CPU capture's softmax, tile masses") {
  if (skip_gpu_trace_case()) return;
  // Causal, GQA, tails in both lengths, a cached prefix (kv_len > q_len).
  AttentionProblem causal(dense_shape(2, 4, 2, 200, 330, 64, true, 401));
  DeviceAttention causal_dev(causal);
  const fs::TraceOptions causal_opt = options(1, 3, {0, 1, 63, 64, 127, 128, 150, 199}, {{0, 0}, {1, 2}, {0, 5}});
  // Full attention at head_dim 128, every row followed.
  AttentionProblem full(dense_shape(1, 2, 1, 130, 257, 128, false, 402));
  DeviceAttention full_dev(full);
  std::vector<int32_t> all(130);
  for (int i = 0; i < 130; ++i) all[size_t(i)] = i;
  const fs::TraceOptions full_opt = options(0, 1, all, {{1, 3}});
  // q_len > kv_len causal: early rows see nothing, the first CTA visits no tile.
  AttentionProblem empty_rows(dense_shape(1, 1, 1, 260, 70, 64, true, 403));
  DeviceAttention empty_dev(empty_rows);
  const fs::TraceOptions empty_opt = options(0, 0, {0, 128, 189, 190, 191, 259}, {{1, 1}, {2, 0}});
  // Sampled blocks are in the kernel's tiles: keep those its tiling has
  // (the hopper kernel's are up to 192 x 128), and always at least one.
  auto fit = [](fs::TraceOptions o, const AttentionProblem& prob, fs::PrefillKernel k) {
    const ExpectedTiles tiles =
        prefill_tiles(k, prob.shape().head_dim, prob.shape().varlen, prob.shape().causal, prob.shape().q_len,
                      prob.shape().kv_len);
    const int q_tiles = ceil_div(prob.seq_q_len(o.batch), tiles.block_q);
    const int kv_tiles = ceil_div(prob.seq_kv_len(o.batch), tiles.block_kv);
    std::vector<fs::TileCoord> kept;
    for (const fs::TileCoord& c : o.sample_tiles)
      if (c.q_tile < q_tiles && c.kv_tile < kv_tiles) kept.push_back(c);
    if (kept.empty()) kept.push_back({q_tiles - 1, 0});
    o.sample_tiles = kept;
    return o;
  };
  for (fs::PrefillKernel k : probed_kernels()) {
    check_prefill_capture(causal, causal_dev, k, fit(causal_opt, causal, k));
    check_prefill_capture(full, full_dev, k, fit(full_opt, full, k));
    check_prefill_capture(empty_rows, empty_dev, k, fit(empty_opt, empty_rows, k));
  }
}

TEST_CASE("gpu trace: prefill capture, fp16, varlen, auto, custom scale") {
  if (skip_gpu_trace_case()) return;
  AttentionShape s = dense_shape(2, 6, 3, 0, 0, 128, true, 404);
  s.varlen = true;
  s.q_lens = {70, 300};
  s.kv_lens = {100, 301};
  s.softmax_scale = 0.05f;
  s.dtype = fs::DType::kFP16;
  AttentionProblem prob(s);
  DeviceAttention dev(prob);
  const fs::TraceOptions opt = options(1, 4, {0, 127, 128, 299}, {{2, 4}});
  for (fs::PrefillKernel k : {fs::PrefillKernel::kV5, fs::PrefillKernel::kV6, fs::PrefillKernel::kAuto})
    check_prefill_capture(prob, dev, k, opt);
  // Dense auto: on an H100/H200 prefill() picks the hopper kernel, and the
  // capture traces that one (varlen above stays on v5/v6 there).
  AttentionProblem dense(dense_shape(1, 2, 2, 150, 150, 64, true, 405));
  DeviceAttention dense_dev(dense);
  check_prefill_capture(dense, dense_dev, fs::PrefillKernel::kAuto, options(0, 1, {149}, {}));
  // A long key range at head_dim 128: the hopper kernel's 192-key tiles
  // (4500 keys: a partial last tile), causal with a long cached prefix.
  AttentionProblem long_keys(dense_shape(1, 2, 1, 130, 4500, 128, true, 406));
  DeviceAttention long_dev(long_keys);
  check_prefill_capture(long_keys, long_dev, fs::PrefillKernel::kAuto, options(0, 1, {0, 129}, {{1, 23}}));

  // Only what is asked for: no CTAs, spans or masses.
  fs::TraceOptions minimal;
  minimal.record_ctas = minimal.record_spans = minimal.record_tile_mass = false;
  minimal.rows = {5};
  fs::Trace t;
  REQUIRE(fs::capture_cuda_prefill_trace(dev.params(prob, fs::PrefillKernel::kV5), minimal, &t).ok());
  CHECK(t.ctas.empty());
  CHECK(t.spans.empty());
  CHECK(t.tile_mass.empty());
  CHECK(t.prob_samples.empty());
  CHECK(t.softmax.size() == 2);  // row 5 of sequence 0: its q-tile visits ceil(100 / 64) tiles
}

TEST_CASE("gpu trace: paged decode capture, with and without KV splits") {
  if (skip_gpu_trace_case()) return;
  // Decode tile at D128 (32-key tiles), three new tokens, GQA 4, fragmented pages.
  PagedProblem decode(fs::testing::paged_shape({300, 1000, 77}, 8, 2, 3, 128, 16, 501));
  DevicePagedAttention decode_dev(decode);
  const fs::TraceOptions opt = options(1, 5, {0, 1, 2}, {{0, 0}, {0, 31}});
  for (int splits : {1, 3, 0}) check_paged_capture(decode, decode_dev, splits, opt);

  // Decode tile at D64 (64-key tiles), one token, GQA 9/3, splits that leave some empty.
  PagedProblem smol(fs::testing::paged_shape({70, 129}, 9, 3, 1, 64, 64, 502));
  DevicePagedAttention smol_dev(smol);
  for (int splits : {1, 5}) check_paged_capture(smol, smol_dev, splits, options(0, 7, {0}, {{0, 1}}));

  // Chunked prefill over the cache (the 128-row tile): 40 new tokens x 4 heads per kv-head.
  PagedProblem chunk(fs::testing::paged_shape({200, 90}, 8, 2, 40, 64, 16, 503));
  DevicePagedAttention chunk_dev(chunk);
  check_paged_capture(chunk, chunk_dev, 2, options(0, 2, {0, 17, 39}, {{0, 2}, {1, 1}}));
}

TEST_CASE("gpu trace: a full span store drops spans, counts them and corrupts nothing") {
  if (skip_gpu_trace_case()) return;
  AttentionProblem prob(dense_shape(1, 2, 2, 256, 512, 64, false, 601));
  DeviceAttention dev(prob);
  const fs::TraceOptions opt = options(0, 1, {3}, {});
  const fs::PrefillParams p = dev.params(prob, fs::PrefillKernel::kV5);
  fs::Trace whole, limited;
  REQUIRE(fs::capture_cuda_prefill_trace(p, opt, &whole).ok());
  CHECK(whole.meta.dropped_spans == 0);
  fs::trace_internal::CudaCaptureLimits limits;
  limits.spans_per_warp = 5;
  const fs::Status st = fs::trace_internal::capture_cuda_prefill_trace(p, opt, limits, &limited);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  CHECK(fs::validate_trace(limited).ok());

  // Each warp keeps its first 5 spans, in the order the unlimited run recorded them.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<const fs::WarpSpanRecord*>> a, b;
  for (const fs::WarpSpanRecord& s : whole.spans) a[{s.cta, s.warp}].push_back(&s);
  for (const fs::WarpSpanRecord& s : limited.spans) b[{s.cta, s.warp}].push_back(&s);
  REQUIRE(a.size() == b.size());
  uint64_t dropped = 0;
  for (const auto& [key, spans] : a) {
    const auto& kept = b[key];
    REQUIRE(kept.size() == std::min<size_t>(5, spans.size()));
    dropped += spans.size() - kept.size();
    for (size_t n = 0; n < kept.size(); ++n) {
      CHECK(kept[n]->kind == spans[n]->kind);
      CHECK(kept[n]->kv_tile == spans[n]->kv_tile);
    }
  }
  CHECK(dropped > 0);
  CHECK(limited.meta.dropped_spans == dropped);
  // The rest of the trace does not depend on the span store.
  CHECK(limited.ctas.size() == whole.ctas.size());
  REQUIRE(limited.softmax.size() == whole.softmax.size());
  for (size_t i = 0; i < whole.softmax.size(); ++i) CHECK(limited.softmax[i].l == whole.softmax[i].l);
}

TEST_CASE("gpu trace: bad options and kernels without probes are refused before any launch") {
  if (skip_gpu_trace_case()) return;
  AttentionProblem prob(dense_shape(1, 2, 2, 70, 70, 64, true, 602));
  DeviceAttention dev(prob);
  fs::PrefillParams p = dev.params(prob, fs::PrefillKernel::kV5);
  fs::Trace t;
  fs::TraceOptions opt;
  CHECK(fs::capture_cuda_prefill_trace(p, opt, nullptr).code() == fs::StatusCode::kInvalidArgument);
  opt.head = 2;
  CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).message().find("TraceOptions.head = 2") != std::string::npos);
  opt = {};
  opt.rows = {70};
  CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).message().find("row 70 is out of range") != std::string::npos);
  opt = {};
  opt.sample_tiles = {{0, 2}};  // 70 keys are two 64-key tiles
  CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).code() == fs::StatusCode::kInvalidArgument);
  opt = {};
  opt.record_ctas = false;
  CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).message().find("record_spans needs record_ctas") !=
        std::string::npos);
  opt = {};
  p.kernel = fs::lab::kV1;
  p.dtype = fs::DType::kFP16;
  CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).code() == fs::StatusCode::kUnsupported);
  p.dtype = fs::DType::kBF16;
  p.kernel = fs::PrefillKernel::kHopper;
  if (!fs::prefill_kernel_runnable(fs::PrefillKernel::kHopper))
    CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).code() == fs::StatusCode::kUnsupported);
  p.kernel = fs::PrefillKernel::kV5;
  p.device = fs::Device::kCpu;
  CHECK(fs::capture_cuda_prefill_trace(p, opt, &t).code() == fs::StatusCode::kInvalidArgument);
  CHECK(t.ctas.empty());  // *out untouched by every refusal
}

TEST_CASE("trace: without a CUDA device the GPU capture answers kUnsupported") {
  if (fs::cuda_available()) {
    MESSAGE("a CUDA device is present: the GPU capture runs (the gpu trace cases check it)");
    return;
  }
  // Well-formed CUDA problems (aligned dummy pointers, never dereferenced).
  void* dummy = reinterpret_cast<void*>(uintptr_t{256});
  fs::PrefillParams p;
  p.device = fs::Device::kCuda;
  p.q_heads = p.kv_heads = 2;
  p.q_len = p.kv_len = 64;
  p.head_dim = 64;
  p.q = p.k = p.v = p.o = fs::bshd(dummy, 64, 2, 64);
  fs::Trace t;
  const fs::Status s = fs::capture_cuda_prefill_trace(p, fs::TraceOptions{}, &t);
  CHECK(s.code() == fs::StatusCode::kUnsupported);
  CHECK(!s.message().empty());

  fs::PagedAttentionParams pp;
  pp.device = fs::Device::kCuda;
  pp.q_heads = 8;
  pp.kv_heads = 2;
  pp.q_len = 1;
  pp.head_dim = 64;
  pp.max_kv_len = 64;
  pp.block_table_stride = 4;
  pp.q = pp.o = fs::bshd(dummy, 1, 8, 64);
  pp.k_pages = pp.v_pages = dummy;
  pp.block_tables = static_cast<const int32_t*>(dummy);
  pp.kv_lens = static_cast<const int32_t*>(dummy);
  CHECK(fs::capture_cuda_paged_trace(pp, fs::TraceOptions{}, &t).code() == fs::StatusCode::kUnsupported);
  CHECK(t.ctas.empty());
}

TEST_CASE("trace: meta.dropped_spans survives the file") {
  fs::Trace t;
  t.meta.backend = "cuda";
  t.meta.head_dim = 64;
  t.meta.block_q = 128;
  t.meta.block_kv = 64;
  t.meta.softmax_scale = 0.125f;
  t.meta.dropped_spans = 0x123456789ull;
  auto bytes = fs::serialize_trace(t);
  REQUIRE(bytes.ok());
  auto back = fs::parse_trace(bytes->data(), bytes->size());
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  CHECK(back->meta.dropped_spans == 0x123456789ull);
}
