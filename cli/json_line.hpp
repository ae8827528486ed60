// The --json output of the CLI's commands: one compact object per line, its
// keys in the order written, so bench/compare_torch.py (which reads stdout
// line by line) and a person reading the line both see the fields in order.
#pragma once

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace flashscope::cli {

using JsonLine = nlohmann::ordered_json;

// x to `digits` decimals, the precision the text output shows: a JSON number
// carries a measurement's meaningful digits, not the float's noise.
inline double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

// Prints the object on its own line. Text from outside (a model's name, a
// device's) that is not valid UTF-8 is replaced, not thrown on.
inline void print_json_line(const JsonLine& line) {
  std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace flashscope::cli
