// One query row's online softmax across the KV tiles, from the trace's
// softmax_state records: the running max m, the running sum l (relative to
// m), the rescale factor exp(m_old − m) applied to l and O, and what the
// final normalization does with them (O / l, LSE = m + ln l).
//
// Derived per tile, so a chart can say what each tile contributed:
//   share_t = tile_sum_t · exp(m_t − m_final) / l_final
// the row's final probability mass on tile t (shares sum to 1), and the
// recurrence check l_t = rescale_t · l_{t−1} + tile_sum_t, whose worst
// relative error says whether the probes recorded a consistent state.
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

struct SoftmaxStep {
  int kv_tile = 0;
  float m = 0, l = 0, rescale = 0, tile_max = 0, tile_sum = 0;
  uint32_t keys = 0;
  bool max_rose = false;  // m grew on this tile (rescale < 1 after the first visible tile)
  double share = 0;       // final probability mass on this tile
};

struct SoftmaxSeries {
  uint32_t row = 0;
  bool valid = false;              // records exist and the row saw at least one key
  std::vector<SoftmaxStep> steps;  // ascending kv_tile
  float m_final = 0, l_final = 0;
  double inv_l = 0, lse = 0;        // the epilogue's 1/l and the row's log-sum-exp
  int max_rises = 0;                // tiles after the first where m rose (each rescales O)
  double max_recurrence_error = 0;  // max |l_t − (rescale_t·l_{t−1} + tile_sum_t)| / l_t
};

// Rows of the traced head with softmax records, ascending.
std::vector<uint32_t> softmax_rows(const Trace& t);

SoftmaxSeries build_softmax_series(const Trace& t, uint32_t row);

}  // namespace flashscope::viz
