#include "chat_template/lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "chat_template/text.hpp"

namespace flashscope::chat_template {
namespace {

// jinja2's lexer on a normalized source; positions are byte offsets into it.
class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;  // jinja2: the last match ended a line (or nothing came before)
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (tag == std::string::npos) {
        push_text(std::move(text), pos);
        break;
      }
      const char type = src_[tag + 1];  // '%', '{' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text = text::strip(text, text::Side::kRight);
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: drop the spaces between the line's start and the tag.
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            text::strip(std::string_view(text).substr(l_pos), text::Side::kLeft).empty()) {
          text.resize(l_pos);
        }
      }
      push_text(std::move(text), pos);
      size_t after = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (type == '#') {
        const size_t end = src_.find("#}", after);
        if (end == std::string::npos) return error(tag, "unterminated comment: '{#' without '#}'");
        after = finish_tag(end, end + 2, /*trim_newline=*/true);
      } else {
        auto end = lex_tag(after, type == '%');
        if (!end.ok()) return end.status();
        after = end.value();
      }
      line_starting = after > 0 && src_[after - 1] == '\n';
      pos = after;
    }
    Token end;
    end.kind = TokenKind::kEnd;
    position(src_.size(), &end);
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '%' || src_[k + 1] == '{' || src_[k + 1] == '#')) return k;
    }
    return std::string::npos;
  }

  void position(size_t offset, Token* t) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    t->line = static_cast<int>(line);
    t->column = static_cast<int>(offset - line_starts_[line - 1] + 1);
  }

  Status error(size_t offset, const std::string& what) const {
    Token t;
    position(offset, &t);
    return invalid_argument("chat template " + std::to_string(t.line) + ":" + std::to_string(t.column) + ": " + what);
  }

  void push(TokenKind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    position(offset, &t);
    tokens_.push_back(std::move(t));
  }

  void push_text(std::string text, size_t offset) {
    if (!text.empty()) push(TokenKind::kText, std::move(text), offset);
  }

  // The tag's closing delimiter spans [close, close_end); returns where the
  // text after it starts: after all whitespace for `-`, after one newline
  // for trim_blocks (blocks and comments), right after it otherwise.
  size_t finish_tag(size_t close, size_t close_end, bool trim_newline) const {
    const char sign = close > 0 ? src_[close - 1] : '\0';
    size_t after = close_end;
    if (sign == '-') {
      const std::string rest = text::strip(std::string_view(src_).substr(after), text::Side::kLeft);
      return src_.size() - rest.size();
    }
    if (sign != '+' && trim_newline && after < src_.size() && src_[after] == '\n') ++after;
    return after;
  }

  // Tokens from `pos` up to the closing `%}` or `}}` (outside brackets).
  Result<size_t> lex_tag(size_t pos, bool block) {
    const size_t open = pos;
    push(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", pos);
    std::vector<char> brackets;
    const char closer = block ? '%' : '}';
    while (true) {
      while (pos < src_.size() && std::strchr(" \t\n\r\f\v", src_[pos]) && src_[pos] != '\0') ++pos;
      if (pos >= src_.size()) return error(open, block ? "unterminated '{%' tag" : "unterminated '{{' expression");
      const char c = src_[pos];
      const char next = pos + 1 < src_.size() ? src_[pos + 1] : '\0';
      const char next2 = pos + 2 < src_.size() ? src_[pos + 2] : '\0';
      if (brackets.empty()) {
        size_t close = std::string::npos;
        if (c == closer && next == '}') close = pos;
        else if ((c == '-' || (c == '+' && block)) && next == closer && next2 == '}') close = pos + 1;
        if (close != std::string::npos) {
          push(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", pos);
          return finish_tag(close, close + 2, block);
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        push(TokenKind::kName, src_.substr(pos, e - pos), pos);
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (c == '\'' || c == '"') {
        auto end = lex_string(pos);
        if (!end.ok()) return end.status();
        pos = end.value();
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
        const char* op = nullptr;
        for (const char* candidate : kOps) {
          if (src_.compare(pos, std::strlen(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (!op) return error(pos, std::string("unexpected character '") + c + "'");
        if (*op == '(' || *op == '[' || *op == '{') {
          brackets.push_back(*op == '(' ? ')' : *op == '[' ? ']' : '}');
        } else if (*op == ')' || *op == ']' || *op == '}') {
          if (brackets.empty() || brackets.back() != *op) return error(pos, std::string("unexpected '") + op + "'");
          brackets.pop_back();
        }
        push(TokenKind::kOperator, op, pos);
        pos += std::strlen(op);
      }
    }
  }

  size_t lex_number(size_t pos) {
    const size_t start = pos;
    auto digits = [&] {
      while (pos < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos])) ||
                                   (src_[pos] == '_' && pos + 1 < src_.size() &&
                                    std::isdigit(static_cast<unsigned char>(src_[pos + 1]))))) {
        ++pos;
      }
    };
    digits();
    bool is_float = false;
    if (pos + 1 < src_.size() && src_[pos] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos + 1]))) {
      is_float = true;
      ++pos;
      digits();
    }
    if (pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
      size_t e = pos + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        pos = e;
        digits();
      }
    }
    std::string text;
    for (size_t k = start; k < pos; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    push(is_float ? TokenKind::kFloat : TokenKind::kInteger, std::move(text), start);
    return pos;
  }

  // A quoted string with Python's escapes (jinja2 decodes them with
  // "unicode-escape"): \n \t \r \\ \' \" \a \b \f \v, octal, \xHH, \uXXXX,
  // \UXXXXXXXX; an unknown escape keeps its backslash.
  Result<size_t> lex_string(size_t pos) {
    const size_t start = pos;
    const char quote = src_[pos++];
    std::string value;
    while (true) {
      if (pos >= src_.size()) return error(start, "unterminated string");
      const char c = src_[pos];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++pos;
        continue;
      }
      if (pos + 1 >= src_.size()) return error(start, "unterminated string");
      const char e = src_[pos + 1];
      pos += 2;
      auto hex = [&](int n) -> long {
        if (pos + static_cast<size_t>(n) > src_.size()) return -1;
        long v = 0;
        for (int k = 0; k < n; ++k) {
          const char h = src_[pos + static_cast<size_t>(k)];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return -1;
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        pos += static_cast<size_t>(n);
        return v;
      };
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const long cp = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (cp < 0 || cp > 0x10ffff) return error(pos, std::string("malformed \\") + e + " escape in a string");
          text::append_utf8(value, static_cast<uint32_t>(cp));
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[pos++] - '0');
            }
            text::append_utf8(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    push(TokenKind::kString, std::move(value), start);
    return pos + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// "\r\n" and "\r" become "\n"; one trailing newline is dropped.
std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) { return Lexer(normalize(source)).run(); }

}  // namespace flashscope::chat_template
