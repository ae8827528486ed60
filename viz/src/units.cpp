#include "viz/units.hpp"

#include <cmath>
#include <cstdio>

namespace flashscope::viz {

double ticks_to_us(const TraceMeta& m, double ticks) {
  return m.timer_ticks_per_us > 0 ? ticks / m.timer_ticks_per_us : ticks / 1000.0;
}

namespace {

std::string three_digits(double v, const char* unit) {
  char buf[48];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof buf, a >= 100 ? "%.0f %s" : a >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return buf;
}

}  // namespace

std::string format_us(double us) {
  const double a = std::fabs(us);
  if (a == 0.0) return "0";  // an axis origin: no unit to pick
  if (a < 1.0) return three_digits(us * 1000.0, "ns");
  if (a < 1000.0) return three_digits(us, "\xC2\xB5s");  // µs
  if (a < 1e6) return three_digits(us / 1000.0, "ms");
  return three_digits(us / 1e6, "s");
}

constexpr const char* kSiPrefixes[] = {"", "k", "M", "G", "T", "P"};

std::string format_si(double v) {
  double a = std::fabs(v);
  int u = 0;
  while (a >= 1000.0 && u < 5) {
    a /= 1000.0;
    ++u;
  }
  return three_digits(v < 0 ? -a : a, kSiPrefixes[u]);
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  std::vector<double> out;
  if (!(hi > lo) || max_ticks < 2 || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  const double raw = (hi - lo) / (max_ticks - 1);
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = decade * 10.0;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (decade * m >= raw) {
      step = decade * m;
      break;
    }
  }
  // The largest step that still gives two ticks, when the range is narrower than one step.
  for (double first = std::ceil(lo / step) * step; first + step > hi && step > decade * 1e-3;) {
    step /= 2.0;
    first = std::ceil(lo / step) * step;
  }
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double v = first; v <= hi + step * 1e-9 && static_cast<int>(out.size()) < max_ticks + 1; v += step) {
    out.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  while (static_cast<int>(out.size()) > max_ticks) out.pop_back();
  return out;
}

}  // namespace flashscope::viz
