// The interpreter's value: what Python gives a jinja2 template (None, bool,
// int, float, str, list, dict) plus what jinja2 adds (Undefined, namespace
// objects, macros, global functions). Python's rules for truth, equality,
// str() and repr() live here, since the output must match byte for byte.
//
// Lists and maps are shared and never changed after they are built
// (transformers renders in jinja2's ImmutableSandboxedEnvironment, where
// list.append and dict.update are refused); only a namespace's map changes,
// through `set ns.attr = ...`, and every copy of it sees the change.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope::chat_template {

namespace ast {
struct Macro;
}

struct Value;
using List = std::vector<Value>;
using Map = std::vector<std::pair<std::string, Value>>;  // insertion order, as a Python dict

enum class Kind : uint8_t {
  kUndefined,  // s: the name that was looked up, for error messages
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kMap,
  kNamespace,  // map, shared and mutable
  kMacro,      // macro
  kBuiltin,    // s: the global function's name (range, namespace, raise_exception, strftime_now)
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<const List> list;
  std::shared_ptr<Map> map;
  const ast::Macro* macro = nullptr;
  bool tuple = false;  // a kList that Python holds as a tuple: repr() writes (a, b)

  static Value undefined(std::string name = {}) { Value v; v.s = std::move(name); return v; }
  static Value none() { Value v; v.kind = Kind::kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value real(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value make_list(List items);
  static Value make_tuple(List items);
  static Value make_map(Map entries);
  static Value make_namespace(Map entries);
  static Value builtin(std::string name) { Value v; v.kind = Kind::kBuiltin; v.s = std::move(name); return v; }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_mapping() const { return kind == Kind::kMap || kind == Kind::kNamespace; }
};

// An error while rendering: the Status to return and, where known, the
// template position. Thrown inside the interpreter only; ChatTemplate::render
// catches it, so none leaves the library.
struct RenderError {
  Status status;
  int line = 0;
  int column = 0;
};
[[noreturn]] void fail(std::string message);

// Python's bool(x): None, False, 0, 0.0, "", [], {} and Undefined are false.
bool truthy(const Value& v);
// Python's ==: 1 == 1.0 == True; lists and dicts element-wise; Undefined
// equals only Undefined (jinja2's Undefined.__eq__).
bool equals(const Value& a, const Value& b);
// Python's str(x) as jinja2 prints it ({{ x }}): Undefined is "", None is
// "None", True is "True", 1.0 is "1.0", lists and dicts as their repr.
std::string to_str(const Value& v);
// Python's repr(x): strings quoted ('a', "it's").
std::string repr(const Value& v);
// Python's repr of a float ("1.0", "0.1", "1e+16", "inf").
std::string float_repr(double x);
// A Python type name for error messages ("int", "str", "dict", "undefined").
std::string type_name(const Value& v);

// Python's < for numbers, strings and lists; an error for other types.
bool less_than(const Value& a, const Value& b);

const Value* map_find(const Map& map, std::string_view key);

}  // namespace flashscope::chat_template
