// A small command-line flag parser for flashscope-cli: `--name value`,
// `--name=value` and boolean `--flag`; everything not starting with "--" is
// positional. Unknown flags are an error the command reports with its usage.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace flashscope::cli {

class Args {
 public:
  // value_flags: flags that take a value; bool_flags: flags that do not.
  Args(int argc, char** argv, const std::set<std::string>& value_flags, const std::set<std::string>& bool_flags);

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  bool has(const std::string& name) const { return values_.count(name) > 0 || flags_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // Parses an integer / float flag; records an error on malformed input.
  long long get_int(const std::string& name, long long fallback);
  // get_int, and an error unless lo <= value <= hi (a value an int cannot
  // hold is refused, not truncated).
  long long get_int_in(const std::string& name, long long fallback, long long lo, long long hi);
  double get_double(const std::string& name, double fallback);
  // get_double, and an error naming the flag unless the value lies between
  // lo and hi (each bound open or closed; hi may be infinity, which is then
  // refused as a value). NaN is always refused.
  double get_double_in(const std::string& name, double fallback, double lo, bool lo_open, double hi, bool hi_open);
  // Records an error (the first one wins) for checks only the caller can make.
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
  std::string error_;
};

}  // namespace flashscope::cli
