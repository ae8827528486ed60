// The library a template calls into: jinja2's filters and tests, the Python
// methods of str, list and dict that templates use, and the global functions
// transformers provides (range, namespace, dict, raise_exception,
// strftime_now). Each throws RenderError (value.hpp) on a bad argument, with
// jinja2's or Python's wording where it helps a reader find the cause.
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "chat_template/value.hpp"
#include "flashscope/chat_template.hpp"

namespace flashscope::chat_template {

struct CallArgs {
  std::vector<Value> args;
  Map kwargs;
};

// What a builtin may build: results larger than the limits are an error.
struct Budget {
  const ChatTemplateLimits& limits;
  void check_size(size_t n, const char* what) const;
};

// Whether a filter / test exists: the parser rejects unknown ones at load,
// as jinja2 does when it compiles a template.
bool is_filter(const std::string& name);
bool is_test(const std::string& name);
// Whether `name` is a global function, and the function as a value.
bool is_global_function(const std::string& name);

Value call_filter(const std::string& name, const Value& target, const CallArgs& call, const Budget& budget);
bool call_test(const std::string& name, const Value& target, const CallArgs& call);
// obj.name(args) for a str, list or dict `obj`.
Value call_method(const Value& obj, const std::string& name, const CallArgs& call, const Budget& budget);
Value call_global(const std::string& name, const CallArgs& call, const Budget& budget,
                  const std::function<std::tm()>& now);

// Python's iter(): a list's items, a dict's keys, a string's characters;
// Undefined is empty (jinja2's default Undefined); anything else an error.
List iterate(const Value& v);

}  // namespace flashscope::chat_template
