#include "args.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace flashscope::cli {

Args::Args(int argc, char** argv, const std::set<std::string>& value_flags, const std::set<std::string>& bool_flags) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name) && !inline_value) {
      flags_.insert(name);
    } else if (value_flags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) {
          error_ = "--" + name + " needs a value";
          return;
        }
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      error_ = "unknown option --" + name;
      return;
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

long long Args::get_int(const std::string& name, long long fallback) {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0') {
    if (error_.empty()) error_ = "--" + name + " expects an integer, got '" + it->second + "'";
    return fallback;
  }
  return v;
}

long long Args::get_int_in(const std::string& name, long long fallback, long long lo, long long hi) {
  const long long v = get_int(name, fallback);
  if ((v < lo || v > hi) && error_.empty()) {
    error_ = "--" + name + " must be " + std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
             values_.at(name) + "'";
  }
  return v;
}

double Args::get_double(const std::string& name, double fallback) {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0') {
    if (error_.empty()) error_ = "--" + name + " expects a number, got '" + it->second + "'";
    return fallback;
  }
  return v;
}

double Args::get_double_in(const std::string& name, double fallback, double lo, bool lo_open, double hi,
                           bool hi_open) {
  const double v = get_double(name, fallback);
  if (!has(name) || !error_.empty()) return v;
  const bool above = lo_open ? v > lo : v >= lo;
  const bool below = hi_open ? v < hi : v <= hi;
  if (!(above && below && std::isfinite(v))) {
    std::ostringstream range;
    if (std::isinf(hi)) {
      range << (lo_open ? "> " : ">= ") << lo;
    } else {
      range << "in " << (lo_open ? '(' : '[') << lo << ", " << hi << (hi_open ? ')' : ']');
    }
    error_ = "--" + name + " must be " + range.str() + ", got '" + values_.at(name) + "'";
  }
  return v;
}

}  // namespace flashscope::cli
