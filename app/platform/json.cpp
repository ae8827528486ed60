#include "platform/json.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace flashscope::app {

JsonValue JsonValue::of(bool b) {
  JsonValue v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}
JsonValue JsonValue::of(double d) {
  JsonValue v;
  v.kind = Kind::kNumber;
  v.number = d;
  return v;
}
JsonValue JsonValue::of(std::string s) {
  JsonValue v;
  v.kind = Kind::kString;
  v.string = std::move(s);
  return v;
}
JsonValue JsonValue::make_array() {
  JsonValue v;
  v.kind = Kind::kArray;
  return v;
}
JsonValue JsonValue::make_object() {
  JsonValue v;
  v.kind = Kind::kObject;
  return v;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind != Kind::kObject) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}
std::string JsonValue::get_string(const std::string& key, const std::string& fallback) const {
  const JsonValue* v = find(key);
  return v && v->is_string() ? v->string : fallback;
}
double JsonValue::get_number(const std::string& key, double fallback) const {
  const JsonValue* v = find(key);
  return v && v->is_number() ? v->number : fallback;
}
bool JsonValue::get_bool(const std::string& key, bool fallback) const {
  const JsonValue* v = find(key);
  return v && v->kind == Kind::kBool ? v->boolean : fallback;
}

namespace {

constexpr int kMaxDepth = 64;

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}

  bool parse(JsonValue* out, std::string* error) {
    skip_ws();
    bool ok = value(out, 0);
    if (ok) {
      skip_ws();
      if (pos_ != s_.size()) ok = fail("unexpected text after the value");
    }
    if (!ok && error) *error = error_ + " at byte " + std::to_string(pos_);
    return ok;
  }

 private:
  bool fail(const char* what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool literal(const char* lit) {
    size_t i = 0;
    while (lit[i]) {
      if (pos_ + i >= s_.size() || s_[pos_ + i] != lit[i]) return fail("invalid literal");
      ++i;
    }
    pos_ += i;
    return true;
  }
  bool hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      *v <<= 4;
      if (c >= '0' && c <= '9') *v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') *v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') *v |= static_cast<uint32_t>(c - 'A' + 10);
      else return fail("bad hex digit in \\u escape");
    }
    return true;
  }
  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool string(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) return fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // high surrogate: a low one must follow
            uint32_t lo = 0;
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') return fail("lone surrogate");
            pos_ += 2;
            if (!hex4(&lo)) return false;
            if (lo < 0xDC00 || lo >= 0xE000) return fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return fail("lone surrogate");
          }
          append_utf8(cp, out);
          break;
        }
        default: return fail("unknown escape");
      }
    }
  }
  bool number(double* out) {
    const size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > d;
    };
    if (!digits()) return fail("invalid number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return fail("invalid number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("invalid number");
    }
    *out = std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
    return true;
  }
  bool value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) return fail("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') {
      *out = JsonValue::make_object();
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      while (true) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a key");
        std::string key;
        if (!string(&key)) return false;
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
        ++pos_;
        JsonValue member;
        if (!value(&member, depth + 1)) return false;
        out->object[key] = std::move(member);
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return true;
        }
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      *out = JsonValue::make_array();
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      while (true) {
        JsonValue element;
        if (!value(&element, depth + 1)) return false;
        out->array.push_back(std::move(element));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return true;
        }
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      *out = JsonValue::of(std::string());
      return string(&out->string);
    }
    if (c == 't') {
      *out = JsonValue::of(true);
      return literal("true");
    }
    if (c == 'f') {
      *out = JsonValue::of(false);
      return literal("false");
    }
    if (c == 'n') {
      *out = JsonValue();
      return literal("null");
    }
    *out = JsonValue::of(0.0);
    return number(&out->number);
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

void write_number(double d, std::string* out) {
  if (!std::isfinite(d)) {  // JSON has no inf/nan
    *out += "null";
    return;
  }
  char buf[32];
  if (d == std::floor(d) && std::fabs(d) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", d);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", d);
  }
  *out += buf;
}

void write_value(const JsonValue& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent) * 2, ' ');
  const std::string pad_in(static_cast<size_t>(indent + 1) * 2, ' ');
  switch (v.kind) {
    case JsonValue::Kind::kNull: *out += "null"; break;
    case JsonValue::Kind::kBool: *out += v.boolean ? "true" : "false"; break;
    case JsonValue::Kind::kNumber: write_number(v.number, out); break;
    case JsonValue::Kind::kString: *out += json_quote(v.string); break;
    case JsonValue::Kind::kArray:
      if (v.array.empty()) {
        *out += "[]";
        break;
      }
      *out += "[\n";
      for (size_t i = 0; i < v.array.size(); ++i) {
        *out += pad_in;
        write_value(v.array[i], indent + 1, out);
        *out += i + 1 < v.array.size() ? ",\n" : "\n";
      }
      *out += pad + "]";
      break;
    case JsonValue::Kind::kObject: {
      if (v.object.empty()) {
        *out += "{}";
        break;
      }
      *out += "{\n";
      size_t i = 0;
      for (const auto& [key, member] : v.object) {
        *out += pad_in + json_quote(key) + ": ";
        write_value(member, indent + 1, out);
        *out += ++i < v.object.size() ? ",\n" : "\n";
      }
      *out += pad + "}";
      break;
    }
  }
}

}  // namespace

bool json_parse(const std::string& text, JsonValue* out, std::string* error) {
  return Reader(text).parse(out, error);
}

std::string json_write(const JsonValue& value) {
  std::string out;
  write_value(value, 0, &out);
  out += '\n';
  return out;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // UTF-8 bytes pass through
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace flashscope::app
