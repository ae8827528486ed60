#include "chat_template/json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat_template/text.hpp"

namespace flashscope::chat_template {
namespace {

void append_hex4(std::string& out, uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", u & 0xffffu);
  out += buf;
}

void write_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  if (!ensure_ascii) {
    for (char ch : s) {
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
          if (c < 0x20) append_hex4(out, c);
          else out += ch;
      }
    }
  } else {
    for (uint32_t cp : text::decode(s)) {
      if (cp == '"') out += "\\\"";
      else if (cp == '\\') out += "\\\\";
      else if (cp == '\n') out += "\\n";
      else if (cp == '\r') out += "\\r";
      else if (cp == '\t') out += "\\t";
      else if (cp == '\b') out += "\\b";
      else if (cp == '\f') out += "\\f";
      else if (cp < 0x20 || (cp > 0x7f && cp < 0x10000)) append_hex4(out, cp);
      else if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        append_hex4(out, 0xd800 + (v >> 10));
        append_hex4(out, 0xdc00 + (v & 0x3ff));
      } else {
        out += static_cast<char>(cp);
      }
    }
  }
  out += '"';
}

class Writer {
 public:
  explicit Writer(const JsonOptions& o) : o_(o) {
    item_sep_ = o.separators_set ? o.item_separator : (o.indent_set ? "," : ", ");
    key_sep_ = o.separators_set ? o.key_separator : ": ";
  }

  void write(const Value& v, int level) {
    switch (v.kind) {
      case Kind::kNone: out += "null"; return;
      case Kind::kBool: out += v.b ? "true" : "false"; return;
      case Kind::kInt: out += std::to_string(v.i); return;
      case Kind::kFloat:
        if (std::isnan(v.f)) out += "NaN";
        else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
        else out += float_repr(v.f);
        return;
      case Kind::kString: write_string(out, v.s, o_.ensure_ascii); return;
      case Kind::kList: {
        if (v.list->empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k) out += item_sep_;
          newline(level + 1);
          write((*v.list)[k], level + 1);
        }
        newline(level);
        out += ']';
        return;
      }
      case Kind::kMap: {
        if (v.map->empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<std::string, Value>*> entries;
        for (const auto& e : *v.map) entries.push_back(&e);
        if (o_.sort_keys) {
          std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
        }
        out += '{';
        for (size_t k = 0; k < entries.size(); ++k) {
          if (k) out += item_sep_;
          newline(level + 1);
          write_string(out, entries[k]->first, o_.ensure_ascii);
          out += key_sep_;
          write(entries[k]->second, level + 1);
        }
        newline(level);
        out += '}';
        return;
      }
      default: fail("tojson: Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

  std::string out;

 private:
  void newline(int level) {
    if (!o_.indent_set) return;
    out += '\n';
    for (int k = 0; k < level; ++k) out += o_.indent;
  }

  const JsonOptions& o_;
  std::string item_sep_, key_sep_;
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  Writer w(options);
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace flashscope::chat_template
