// The whole launch on an SM × time chart: where each CTA ran and when, how
// many SMs were busy over time, and the tail — the stretch at the end where
// most SMs have finished and a few stragglers hold the launch open.
//
// Rows: with meta.sm_count > 0 (a GPU trace) every SM of the device gets a
// row, so SMs that received no CTA show as idle; otherwise (CPU: OpenMP
// threads) the ids that occur. CTAs resident on one SM at the same time get
// separate slots (greedy, as pipeline lanes).
//
// Tail, for a share x (say 0.1): with n SMs that ran work and f_1 ≤ … ≤ f_n
// the time each finished its last CTA, the tail starts when only ⌈x·n⌉ SMs
// are still busy — at f_{n−⌈x·n⌉} — and lasts until the launch ends. Its
// length as a fraction of the launch is the time the device ran at ≤ x of
// its width. With one SM (or a share that rounds up to all of them) there
// is no tail: it starts at the end.
//
// With TimerUnit::kCycles each SM counts its own clock, so positions across
// SMs are only approximate (clock_aligned = false says so).
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

struct CtaBar {
  uint32_t cta = 0;
  int row = 0;   // index into Occupancy::sm_ids
  int slot = 0;  // concurrent CTAs on the SM
  uint64_t start = 0, end = 0;
};

struct Occupancy {
  std::vector<uint32_t> sm_ids;  // one per row
  uint64_t t0 = 0, t1 = 0;       // first CTA start, last CTA end
  std::vector<CtaBar> bars;
  int max_slots = 0;  // most CTAs resident on one SM at once
  bool clock_aligned = true;

  int bins = 0;
  std::vector<float> busy_sms;       // per time bin: SMs running at least one CTA (mean over the bin)
  std::vector<float> resident_ctas;  // per time bin: CTAs running (mean over the bin)

  int active_sms = 0;      // SMs that ran at least one CTA
  double utilization = 0;  // busy SM time / (rows × launch time)
  double waves = 0;        // CTAs / (rows × max_slots)

  double tail_share = 0;  // the x it was computed for
  int tail_sms = 0;       // ⌈x · active_sms⌉
  uint64_t tail_start = 0;
  double tail_fraction = 0;  // (t1 − tail_start) / (t1 − t0)
};

Occupancy build_occupancy(const Trace& t, int bins, double tail_share);

}  // namespace flashscope::viz
