#include "chat_template/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace flashscope::chat_template {

Value Value::make_list(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::make_tuple(List items) {
  Value v = make_list(std::move(items));
  v.tuple = true;
  return v;
}

Value Value::make_map(Map entries) {
  Value v;
  v.kind = Kind::kMap;
  v.map = std::make_shared<Map>(std::move(entries));
  return v;
}

Value Value::make_namespace(Map entries) {
  Value v = make_map(std::move(entries));
  v.kind = Kind::kNamespace;
  return v;
}

void fail(std::string message) { throw RenderError{invalid_argument(std::move(message))}; }

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0.0;
    case Kind::kString: return !v.s.empty();
    case Kind::kList: return !v.list->empty();
    case Kind::kMap: return !v.map->empty();
    case Kind::kNamespace:
    case Kind::kMacro:
    case Kind::kBuiltin: return true;
  }
  return false;
}

namespace {

double number_of(const Value& v) {
  if (v.kind == Kind::kFloat) return v.f;
  if (v.kind == Kind::kBool) return v.b ? 1.0 : 0.0;
  return static_cast<double>(v.i);
}

int64_t int_of(const Value& v) { return v.kind == Kind::kBool ? (v.b ? 1 : 0) : v.i; }

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) return int_of(a) == int_of(b);
    return number_of(a) == number_of(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.s == b.s;
    case Kind::kList: {
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    }
    case Kind::kMap: {
      if (a.map->size() != b.map->size()) return false;
      for (const auto& [key, value] : *a.map) {
        const Value* other = map_find(*b.map, key);
        if (!other || !equals(value, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return a.map == b.map;
    case Kind::kMacro: return a.macro == b.macro;
    case Kind::kBuiltin: return a.s == b.s;
    default: return false;
  }
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  // The shortest digits that round-trip (what Python's repr picks), laid out
  // as Python does: positional for 1e-4 <= |x| < 1e16, else d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_at = sci.find('e');
  std::string mantissa = sci.substr(0, e_at);
  const int exponent = std::atoi(sci.c_str() + e_at + 1);
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent >= -5 + 1 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return sign + out + exp_buf;
}

namespace {

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kString: return string_repr(v.s);
    case Kind::kList: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Kind::kMap: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : *v.map) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(key) + ": " + repr(value);
      }
      return out + "}";
    }
    case Kind::kNamespace: return "<Namespace " + repr(Value::make_map(*v.map)) + ">";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.b ? "True" : "False";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return float_repr(v.f);
    case Kind::kString: return v.s;
    case Kind::kMacro: return "<Macro>";
    case Kind::kBuiltin: return "<built-in function " + v.s + ">";
    default: return repr(v);
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return v.s.empty() ? "undefined" : "undefined ('" + v.s + "')";
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kMap: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kMacro: return "macro";
    case Kind::kBuiltin: return "function";
  }
  return "?";
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.kind == Kind::kFloat ? a.f : static_cast<double>(a.kind == Kind::kBool ? a.b : a.i);
    const double y = b.kind == Kind::kFloat ? b.f : static_cast<double>(b.kind == Kind::kBool ? b.b : b.i);
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      return (a.kind == Kind::kBool ? a.b : a.i) < (b.kind == Kind::kBool ? b.b : b.i);
    }
    return x < y;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.kind == Kind::kList && b.kind == Kind::kList) {
    return std::lexicographical_compare(a.list->begin(), a.list->end(), b.list->begin(), b.list->end(), less_than);
  }
  fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

const Value* map_find(const Map& map, std::string_view key) {
  for (const auto& entry : map) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

}  // namespace flashscope::chat_template
