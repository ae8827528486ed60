// Numbers as a CUDA engineer reads them off a chart: durations with the
// right unit, and round tick positions for time and value axes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/numeric.hpp"
#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

// Blocks of `block` that cover `n` (tiles of a trace, cells of a view); 0 for
// an empty or invalid block: the library's (flashscope/numeric.hpp).
using flashscope::ceil_div;

// Trace ticks → microseconds (meta.timer_ticks_per_us; 1000 for ns).
double ticks_to_us(const TraceMeta& m, double ticks);

// "850 ns", "12.3 µs", "4.56 ms", "1.23 s" (three significant digits).
std::string format_us(double us);

// A unit suffix per decade: 1234 → "1.23 k", 2.5e12 → "2.50 T" (for FLOP counts, bytes).
std::string format_si(double v);

// Round tick values inside [lo, hi]: steps of 1, 2 or 5 × 10^k, chosen so
// there are at most max_ticks of them (and at least two when lo < hi).
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);

}  // namespace flashscope::viz
