#include "chat_template/builtins.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "chat_template/json.hpp"
#include "chat_template/text.hpp"

namespace flashscope::chat_template {

void Budget::check_size(size_t n, const char* what) const {
  if (n > limits.max_output_bytes) {
    fail(std::string(what) + " would exceed the limit of " + std::to_string(limits.max_output_bytes) + " bytes");
  }
}

namespace {

// A parameter by position or by keyword, as Python binds them; null when
// the caller gave neither.
const Value* param(const CallArgs& call, size_t index, const char* name) {
  if (index < call.args.size()) return &call.args[index];
  return map_find(call.kwargs, name);
}

std::string string_param(const CallArgs& call, size_t index, const char* name, const char* fn,
                         const std::string& fallback = {}) {
  const Value* v = param(call, index, name);
  if (!v || v->kind == Kind::kNone) return fallback;
  if (!v->is_string()) fail(std::string(fn) + ": " + name + " must be a string, not " + type_name(*v));
  return v->s;
}

int64_t int_param(const CallArgs& call, size_t index, const char* name, const char* fn, int64_t fallback) {
  const Value* v = param(call, index, name);
  if (!v || v->kind == Kind::kNone) return fallback;
  if (v->kind == Kind::kInt) return v->i;
  if (v->kind == Kind::kBool) return v->b;
  fail(std::string(fn) + ": " + name + " must be an integer, not " + type_name(*v));
}

bool bool_param(const CallArgs& call, size_t index, const char* name, bool fallback) {
  const Value* v = param(call, index, name);
  return v ? truthy(*v) : fallback;
}

const std::string& need_string(const Value& v, const char* fn) {
  if (!v.is_string()) fail(std::string(fn) + ": expected a string, not " + type_name(v));
  return v.s;
}

Value string_list(const std::vector<std::string>& parts) {
  List out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::make_list(std::move(out));
}

// An attribute path ("function.name") of an item, as jinja2's
// make_attrgetter reads it: dict keys, list indices for digits.
Value get_attribute(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value next = Value::undefined(part);
    if (cur.is_mapping()) {
      if (const Value* v = map_find(*cur.map, part)) next = *v;
    } else if (cur.kind == Kind::kList && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t k = std::strtoull(part.c_str(), nullptr, 10);
      if (k < cur.list->size()) next = (*cur.list)[k];
    } else if (cur.is_undefined()) {
      fail("'" + cur.s + "' is undefined");
    }
    cur = std::move(next);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(text::length(v.s));
    case Kind::kList: return static_cast<int64_t>(v.list->size());
    case Kind::kMap:
    case Kind::kNamespace: return static_cast<int64_t>(v.map->size());
    default: fail("object of type '" + type_name(v) + "' has no len()");
  }
}

// str.splitlines() over the ASCII line boundaries.
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0, k = 0;
  while (k < s.size()) {
    const char c = s[k];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '\x1c' || c == '\x1d' || c == '\x1e') {
      lines.push_back(s.substr(start, k - start));
      k += (c == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ? 2 : 1;
      start = k;
    } else {
      ++k;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

Value to_int(const Value& v, const Value& fallback) {
  switch (v.kind) {
    case Kind::kInt: return v;
    case Kind::kBool: return Value::integer(v.b);
    case Kind::kFloat: return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : fallback;
    case Kind::kString: {
      const std::string s = text::strip(v.s, text::Side::kBoth);
      if (s.empty()) return fallback;
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (*end == '\0' && errno == 0) return Value::integer(i);
      const double d = std::strtod(s.c_str(), &end);  // jinja2 falls back to int(float(value))
      if (*end == '\0' && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
      return fallback;
    }
    default: return fallback;
  }
}

Value to_float(const Value& v, const Value& fallback) {
  switch (v.kind) {
    case Kind::kInt: return Value::real(static_cast<double>(v.i));
    case Kind::kBool: return Value::real(v.b ? 1.0 : 0.0);
    case Kind::kFloat: return v;
    case Kind::kString: {
      const std::string s = text::strip(v.s, text::Side::kBoth);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0') return Value::real(d);
      return fallback;
    }
    default: return fallback;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python's str.title(): a letter after a non-letter starts a word.
std::string python_title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    if (upper || lower) {
      if (!prev_letter && lower) c = static_cast<char>(c - 'a' + 'A');
      if (prev_letter && upper) c = static_cast<char>(c - 'A' + 'a');
      prev_letter = true;
    } else {
      prev_letter = static_cast<unsigned char>(c) >= 0x80 && prev_letter;
    }
  }
  return out;
}

// select / reject / selectattr / rejectattr: items whose test (or truth)
// is `keep`. `first_test_arg` is where the test name sits in the arguments.
Value filter_items(const Value& target, const CallArgs& call, size_t first_test_arg, bool by_attribute, bool keep) {
  std::string attribute;
  if (by_attribute) {
    if (call.args.empty() || !call.args[0].is_string()) fail("selectattr/rejectattr: the attribute must be a string");
    attribute = call.args[0].s;
  }
  std::string test;
  CallArgs test_args;
  if (call.args.size() > first_test_arg) {
    test = need_string(call.args[first_test_arg], "select: the test name");
    if (!is_test(test)) fail("no test named '" + test + "'");
    test_args.args.assign(call.args.begin() + static_cast<std::ptrdiff_t>(first_test_arg) + 1, call.args.end());
  }
  List out;
  for (const Value& item : iterate(target)) {
    const Value subject = by_attribute ? get_attribute(item, attribute) : item;
    const bool pass = test.empty() ? truthy(subject) : call_test(test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

const std::set<std::string> kFilters = {
    "abs",   "capitalize", "count",  "d",       "default",   "dictsort",   "e",         "escape", "first",  "float",
    "indent", "int",       "items",  "join",    "last",      "length",    "list",   "lower",  "map",
    "max",   "min",        "reject", "rejectattr", "replace", "reverse",  "safe",   "select", "selectattr",
    "sort",  "string",     "sum",    "title",   "tojson",    "trim",      "unique", "upper",  "wordcount"};

const std::set<std::string> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq",     "equalto", "escaped", "even",     "false",
    "float",   "ge",       "gt",      "in",          "integer", "iterable", "le",    "lower",    "lt",
    "mapping", "ne",       "none",    "number",      "odd",    "sameas",  "sequence", "string", "true",
    "undefined", "upper",  "==",      "!=",          "<",      "<=",      ">",       ">="};

}  // namespace

bool is_filter(const std::string& name) { return kFilters.count(name) > 0; }
bool is_test(const std::string& name) { return kTests.count(name) > 0; }
bool is_global_function(const std::string& name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList: return *v.list;
    case Kind::kMap: {
      List keys;
      for (const auto& e : *v.map) keys.push_back(Value::string(e.first));
      return keys;
    }
    case Kind::kString: {
      List chars;
      const auto cps = text::decode(v.s);
      for (size_t k = 0; k < cps.size(); ++k) chars.push_back(Value::string(text::encode(cps, k, k + 1)));
      return chars;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

namespace {

// The filters with more than a line to them, each as jinja2 defines it;
// call_filter below dispatches by name.

Value filter_default(const Value& v, const CallArgs& call) {
  const Value* fallback = param(call, 0, "default_value");
  const bool boolean = bool_param(call, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return fallback ? *fallback : Value::string("");
  return v;
}

Value filter_trim(const Value& v, const CallArgs& call) {
  const Value* chars = param(call, 0, "chars");
  if (chars && chars->is_string()) return Value::string(text::strip_chars(to_str(v), chars->s, text::Side::kBoth));
  return Value::string(text::strip(to_str(v), text::Side::kBoth));
}

Value filter_replace(const Value& v, const CallArgs& call, const Budget& budget) {
  const std::string from = string_param(call, 0, "old", "replace");
  const std::string to = string_param(call, 1, "new", "replace");
  std::string out = text::replace(to_str(v), from, to, int_param(call, 2, "count", "replace", -1));
  budget.check_size(out.size(), "replace");
  return Value::string(std::move(out));
}

Value filter_tojson(const Value& v, const CallArgs& call, const Budget& budget) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonOptions o;
  o.ensure_ascii = bool_param(call, 0, "ensure_ascii", false);
  if (const Value* indent = param(call, 1, "indent"); indent && indent->kind != Kind::kNone) {
    o.indent_set = true;
    if (indent->is_string()) o.indent = indent->s;
    else o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(indent->i, 64))), ' ');
  }
  if (const Value* seps = param(call, 2, "separators"); seps && seps->kind != Kind::kNone) {
    if (seps->kind != Kind::kList || seps->list->size() != 2 || !(*seps->list)[0].is_string() ||
        !(*seps->list)[1].is_string()) {
      fail("tojson: separators must be a pair of strings");
    }
    o.separators_set = true;
    o.item_separator = (*seps->list)[0].s;
    o.key_separator = (*seps->list)[1].s;
  }
  o.sort_keys = bool_param(call, 3, "sort_keys", false);
  std::string out = to_json(v, o);
  budget.check_size(out.size(), "tojson");
  return Value::string(std::move(out));
}

Value filter_join(const Value& v, const CallArgs& call, const Budget& budget) {
  const std::string sep = string_param(call, 0, "d", "join");
  const Value* attribute = param(call, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute && attribute->is_string() ? get_attribute(item, attribute->s) : item);
    budget.check_size(out.size(), "join");
  }
  return Value::string(std::move(out));
}

Value filter_reverse(const Value& v) {
  if (v.is_string()) {
    auto cps = text::decode(v.s);
    std::reverse(cps.begin(), cps.end());
    return Value::string(text::encode(cps, 0, cps.size()));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

// items: a mapping's (key, value) pairs.
Value filter_mapping_items(const Value& v) {
  if (v.is_undefined()) return Value::make_list({});
  if (!v.is_mapping()) fail("items: expected a mapping, not " + type_name(v));
  List out;
  for (const auto& [key, value] : *v.map) out.push_back(Value::make_tuple({Value::string(key), value}));
  return Value::make_list(std::move(out));
}

Value filter_dictsort(const Value& v, const CallArgs& call) {
  if (!v.is_mapping()) fail("dictsort: expected a mapping, not " + type_name(v));
  const bool case_sensitive = bool_param(call, 0, "case_sensitive", false);
  const std::string by = string_param(call, 1, "by", "dictsort", "key");
  if (by != "key" && by != "value") fail("dictsort: 'by' must be 'key' or 'value'");
  const bool reverse = bool_param(call, 2, "reverse", false);
  List out;
  for (const auto& [key, value] : *v.map) out.push_back(Value::make_tuple({Value::string(key), value}));
  auto key = [&](const Value& item) {
    Value k = (*item.list)[by == "key" ? 0 : 1];
    if (!case_sensitive && k.is_string()) k.s = text::lower(k.s);
    return k;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    return reverse ? less_than(key(b), key(a)) : less_than(key(a), key(b));
  });
  return Value::make_list(std::move(out));
}

Value filter_abs(const Value& v) {
  if (v.kind == Kind::kInt) return Value::integer(v.i < 0 ? -v.i : v.i);
  if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
  if (v.kind == Kind::kBool) return Value::integer(v.b);
  fail("bad operand type for abs(): '" + type_name(v) + "'");
}

Value filter_indent(const Value& v, const CallArgs& call, const Budget& budget) {
  if (v.is_undefined()) fail("'" + v.s + "' is undefined");
  if (!v.is_string()) fail("indent: expected a string, not " + type_name(v));  // jinja2 appends "\n" to it
  const Value* width = param(call, 0, "width");
  std::string indentation = width && width->is_string() ? width->s
                            : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                              width && width->kind == Kind::kInt ? width->i : 4, 0, 256)),
                                          ' ');
  const bool first = bool_param(call, 1, "first", false);
  const bool blank = bool_param(call, 2, "blank", false);
  const std::vector<std::string> lines = split_lines(to_str(v) + "\n");
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) out += "\n";
    if (k && (blank || !lines[k].empty())) out += indentation;
    out += lines[k];
  }
  if (first) out = indentation + out;
  budget.check_size(out.size(), "indent");
  return Value::string(std::move(out));
}

// jinja2 counts the matches of \w+: runs of letters, digits and '_'
// (every non-ASCII byte counted as a letter here).
Value filter_wordcount(const Value& v) {
  int64_t words = 0;
  bool in_word = false;
  for (char ch : to_str(v)) {
    const auto c = static_cast<unsigned char>(ch);
    const bool word_char = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

// map(attribute=..., default=...) or map("filter", args...).
Value filter_map(const Value& v, const CallArgs& call, const Budget& budget) {
  List out;
  if (const Value* attribute = map_find(call.kwargs, "attribute")) {
    const Value* fallback = map_find(call.kwargs, "default");
    for (const Value& item : iterate(v)) {
      Value got = get_attribute(item, need_string(*attribute, "map: attribute"));
      out.push_back(got.is_undefined() && fallback ? *fallback : got);
    }
    return Value::make_list(std::move(out));
  }
  if (call.args.empty()) fail("map: expected a filter name or attribute=");
  const std::string filter = need_string(call.args[0], "map: the filter name");
  if (!is_filter(filter) || filter == "map") fail("map: no filter named '" + filter + "'");
  CallArgs rest;
  rest.args.assign(call.args.begin() + 1, call.args.end());
  rest.kwargs = call.kwargs;
  for (const Value& item : iterate(v)) out.push_back(call_filter(filter, item, rest, budget));
  return Value::make_list(std::move(out));
}

Value filter_unique(const Value& v) {
  List out;
  for (const Value& item : iterate(v)) {
    if (std::none_of(out.begin(), out.end(), [&](const Value& seen) { return equals(seen, item); })) {
      out.push_back(item);
    }
  }
  return Value::make_list(std::move(out));
}

// sort, min and max: one key (the attribute, lowercased unless
// case_sensitive) and one comparison.
Value filter_ordered(const std::string& name, const Value& v, const CallArgs& call) {
  const bool reverse = name == "sort" && bool_param(call, 0, "reverse", false);
  const bool case_sensitive = bool_param(call, name == "sort" ? 1 : 0, "case_sensitive", false);
  const Value* attribute = param(call, name == "sort" ? 2 : 1, "attribute");
  List items = iterate(v);
  auto key = [&](const Value& item) {
    Value k = attribute && attribute->is_string() ? get_attribute(item, attribute->s) : item;
    if (!case_sensitive && k.is_string()) k.s = text::lower(k.s);
    return k;
  };
  auto cmp = [&](const Value& a, const Value& b) { return less_than(key(a), key(b)); };
  if (name == "sort") {
    std::stable_sort(items.begin(), items.end(), cmp);
    if (reverse) std::reverse(items.begin(), items.end());  // ties keep order reversed; rare in templates
    return Value::make_list(std::move(items));
  }
  if (items.empty()) return Value::undefined(name);
  return name == "min" ? *std::min_element(items.begin(), items.end(), cmp)
                       : *std::max_element(items.begin(), items.end(), cmp);
}

Value filter_sum(const Value& v, const CallArgs& call) {
  const Value* attribute = param(call, 0, "attribute");
  const Value* start = param(call, 1, "start");
  int64_t isum = start && start->kind == Kind::kInt ? start->i : 0;
  double fsum = start && start->kind == Kind::kFloat ? start->f : 0.0;
  bool is_float = start && start->kind == Kind::kFloat;
  for (const Value& item : iterate(v)) {
    const Value x = attribute && attribute->is_string() ? get_attribute(item, attribute->s) : item;
    if (x.kind == Kind::kFloat) {
      is_float = true;
      fsum += x.f;
    } else if (x.kind == Kind::kInt || x.kind == Kind::kBool) {
      if (__builtin_add_overflow(isum, x.kind == Kind::kInt ? x.i : x.b, &isum)) fail("sum: integer overflow");
    } else {
      fail("sum: unsupported operand type '" + type_name(x) + "'");
    }
  }
  return is_float ? Value::real(fsum + static_cast<double>(isum)) : Value::integer(isum);
}

}  // namespace

Value call_filter(const std::string& name, const Value& v, const CallArgs& call, const Budget& budget) {
  if (name == "length" || name == "count") return Value::integer(length_of(v));
  if (name == "default" || name == "d") return filter_default(v, call);
  if (name == "trim") return filter_trim(v, call);
  if (name == "upper") return Value::string(text::upper(to_str(v)));
  if (name == "lower") return Value::string(text::lower(to_str(v)));
  if (name == "title") return Value::string(text::title(to_str(v)));
  if (name == "capitalize") return Value::string(text::capitalize(to_str(v)));
  if (name == "string") return Value::string(to_str(v));
  if (name == "safe") return v;
  if (name == "e" || name == "escape") return Value::string(html_escape(to_str(v)));
  if (name == "replace") return filter_replace(v, call, budget);
  if (name == "tojson") return filter_tojson(v, call, budget);
  if (name == "join") return filter_join(v, call, budget);
  if (name == "first") {
    const List items = iterate(v);
    return items.empty() ? Value::undefined("first") : items.front();
  }
  if (name == "last") {
    const List items = iterate(v);
    return items.empty() ? Value::undefined("last") : items.back();
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "reverse") return filter_reverse(v);
  if (name == "items") return filter_mapping_items(v);
  if (name == "dictsort") return filter_dictsort(v, call);
  if (name == "int") {
    const Value* fallback = param(call, 0, "default");
    return to_int(v, fallback ? *fallback : Value::integer(0));
  }
  if (name == "float") {
    const Value* fallback = param(call, 0, "default");
    return to_float(v, fallback ? *fallback : Value::real(0.0));
  }
  if (name == "abs") return filter_abs(v);
  if (name == "indent") return filter_indent(v, call, budget);
  if (name == "wordcount") return filter_wordcount(v);
  if (name == "select") return filter_items(v, call, 0, false, true);
  if (name == "reject") return filter_items(v, call, 0, false, false);
  if (name == "selectattr") return filter_items(v, call, 1, true, true);
  if (name == "rejectattr") return filter_items(v, call, 1, true, false);
  if (name == "map") return filter_map(v, call, budget);
  if (name == "unique") return filter_unique(v);
  if (name == "sort" || name == "min" || name == "max") return filter_ordered(name, v, call);
  if (name == "sum") return filter_sum(v, call);
  fail("no filter named '" + name + "'");
}

bool call_test(const std::string& name, const Value& v, const CallArgs& call) {
  const Value* arg = param(call, 0, "other");
  auto need_arg = [&]() -> const Value& {
    if (!arg) fail("test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::kNone;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == Kind::kMap;  // a namespace is not a dict
  if (name == "iterable") {
    return v.kind == Kind::kList || v.kind == Kind::kMap || v.is_string() || v.is_undefined();
  }
  if (name == "sequence") return v.kind == Kind::kList || v.kind == Kind::kMap || v.is_string() || v.is_undefined();
  if (name == "callable") return v.kind == Kind::kMacro || v.kind == Kind::kBuiltin;
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && text::lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && text::upper(v.s) == v.s;
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind == Kind::kFloat && name != "divisibleby") {  // Python: value % 2 == 1 (or 0)
      const double m = v.f - 2.0 * std::floor(v.f / 2.0);
      return name == "odd" ? m == 1.0 : m == 0.0;
    }
    if (v.kind != Kind::kInt && v.kind != Kind::kBool) fail("test '" + name + "' needs a number");
    const int64_t x = v.kind == Kind::kInt ? v.i : v.b;
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    const Value& d = need_arg();
    if (d.kind != Kind::kInt || d.i == 0) fail("divisibleby: needs a non-zero integer");
    return x % d.i == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, need_arg());
  if (name == "ne" || name == "!=") return !equals(v, need_arg());
  if (name == "lt" || name == "<") return less_than(v, need_arg());
  if (name == "le" || name == "<=") return !less_than(need_arg(), v);
  if (name == "gt" || name == ">") return less_than(need_arg(), v);
  if (name == "ge" || name == ">=") return !less_than(v, need_arg());
  if (name == "sameas") {
    const Value& o = need_arg();
    return v.kind == o.kind && (v.kind == Kind::kNone || v.kind == Kind::kUndefined ||
                                (v.kind == Kind::kBool && v.b == o.b) ||
                                ((v.kind == Kind::kList) && v.list == o.list) || (v.is_mapping() && v.map == o.map));
  }
  if (name == "in") {
    const Value& container = need_arg();
    if (container.is_string()) return v.is_string() && container.s.find(v.s) != std::string::npos;
    for (const Value& item : iterate(container)) {
      if (equals(item, v)) return true;
    }
    return false;
  }
  fail("no test named '" + name + "'");
}

Value call_method(const Value& obj, const std::string& name, const CallArgs& call, const Budget& budget) {
  if (obj.is_string()) {
    const std::string& s = obj.s;
    if (name == "startswith" || name == "endswith") {
      const Value* affix = param(call, 0, "prefix");
      if (!affix) fail(name + "() takes at least 1 argument");
      const List options = affix->kind == Kind::kList ? *affix->list : List{*affix};
      for (const Value& o : options) {
        const std::string& a = need_string(o, name.c_str());
        if (name == "startswith" ? s.compare(0, a.size(), a) == 0
                                 : (s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0)) {
          return Value::boolean(true);
        }
      }
      return Value::boolean(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const text::Side side = name == "strip" ? text::Side::kBoth : name == "lstrip" ? text::Side::kLeft : text::Side::kRight;
      const Value* chars = param(call, 0, "chars");
      if (chars && chars->is_string()) return Value::string(text::strip_chars(s, chars->s, side));
      return Value::string(text::strip(s, side));
    }
    if (name == "split") {
      const Value* sep = param(call, 0, "sep");
      const int64_t max_split = int_param(call, 1, "maxsplit", "split", -1);
      if (!sep || sep->kind == Kind::kNone) return string_list(text::split_whitespace(s, max_split));
      const std::string& separator = need_string(*sep, "split");
      if (separator.empty()) fail("split: empty separator");
      return string_list(text::split(s, separator, max_split));
    }
    if (name == "upper") return Value::string(text::upper(s));
    if (name == "lower") return Value::string(text::lower(s));
    if (name == "title") return Value::string(python_title(s));
    if (name == "capitalize") return Value::string(text::capitalize(s));
    if (name == "replace") {
      const std::string from = string_param(call, 0, "old", "replace");
      const std::string to = string_param(call, 1, "new", "replace");
      std::string out = text::replace(s, from, to, int_param(call, 2, "count", "replace", -1));
      budget.check_size(out.size(), "replace");
      return Value::string(std::move(out));
    }
    if (name == "find" || name == "count") {
      const std::string sub = string_param(call, 0, "sub", name.c_str());
      if (name == "find") {
        const size_t at = s.find(sub);
        return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(text::length(s.substr(0, at))));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::length(s)) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : iterate(call.args.empty() ? Value::undefined() : call.args[0])) {
        if (!first) out += s;
        first = false;
        out += need_string(item, "join");
        budget.check_size(out.size(), "join");
      }
      return Value::string(std::move(out));
    }
  } else if (obj.kind == Kind::kMap) {
    if (name == "items") return call_filter("items", obj, {}, budget);
    if (name == "keys") return Value::make_list(iterate(obj));
    if (name == "values") {
      List out;
      for (const auto& e : *obj.map) out.push_back(e.second);
      return Value::make_list(std::move(out));
    }
    if (name == "get") {
      const Value* key = param(call, 0, "key");
      if (!key) fail("get() takes at least 1 argument");
      if (key->is_string()) {
        if (const Value* found = map_find(*obj.map, key->s)) return *found;
      }
      const Value* fallback = param(call, 1, "default");
      return fallback ? *fallback : Value::none();
    }
  }
  fail("'" + type_name(obj) + "' object has no method '" + name + "' here (the sandbox keeps lists and dicts "
       "unchanged)");
}

Value call_global(const std::string& name, const CallArgs& call, const Budget& budget,
                  const std::function<std::tm()>& now) {
  if (name == "raise_exception") {
    const Value* message = param(call, 0, "message");
    throw RenderError{invalid_argument("raise_exception: " + (message ? to_str(*message) : std::string()))};
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    auto num = [&](size_t k) {
      if (k >= call.args.size() || (call.args[k].kind != Kind::kInt && call.args[k].kind != Kind::kBool)) {
        fail("range() takes integer arguments");
      }
      return call.args[k].kind == Kind::kInt ? call.args[k].i : static_cast<int64_t>(call.args[k].b);
    };
    if (call.args.size() == 1) {
      stop = num(0);
    } else {
      start = num(0);
      stop = num(1);
      if (call.args.size() > 2) step = num(2);
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    budget.check_size(count > 0 ? static_cast<size_t>(count) : 0, "range()");
    List out;
    for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step) out.push_back(Value::integer(x));
    return Value::make_list(std::move(out));
  }
  if (name == "namespace" || name == "dict") {
    Map entries;
    if (!call.args.empty()) {
      if (call.args.size() > 1 || !call.args[0].is_mapping()) fail(name + "() takes a mapping or keyword arguments");
      entries = *call.args[0].map;
    }
    for (const auto& [key, value] : call.kwargs) {
      bool replaced = false;
      for (auto& e : entries) {
        if (e.first == key) {
          e.second = value;
          replaced = true;
        }
      }
      if (!replaced) entries.emplace_back(key, value);
    }
    return name == "dict" ? Value::make_map(std::move(entries)) : Value::make_namespace(std::move(entries));
  }
  if (name == "strftime_now") {
    const std::string format = string_param(call, 0, "format", "strftime_now");
    std::tm tm{};
    if (now) {
      tm = now();
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    if (format.empty()) return Value::string("");
    for (size_t cap = 64 + format.size() * 4; cap <= (1u << 16); cap *= 4) {
      std::string buf(cap, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
      if (n > 0) {
        buf.resize(n);
        return Value::string(std::move(buf));
      }
    }
    return Value::string("");  // every conversion was empty (e.g. "%p" in some locales)
  }
  fail("'" + name + "' is not callable");
}

}  // namespace flashscope::chat_template
