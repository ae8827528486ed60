#include "chat_template/parser.hpp"

#include <cerrno>
#include <cstdlib>
#include <set>

#include "chat_template/builtins.hpp"

namespace flashscope::chat_template {
namespace {

using ast::Body;
using ast::Expr;
using ast::ExprKind;
using ast::ExprPtr;
using ast::Node;
using ast::NodeKind;

// Thrown inside the parser only; parse_program turns it into its Status.
struct ParseError {
  Status status;
};

// Tags jinja2 has that this interpreter does not run.
const std::set<std::string> kUnsupportedTags = {"include", "import", "from", "extends", "block", "call", "filter",
                                                "raw", "with", "autoescape", "do", "trans", "pluralize"};
// Tags that only continue or close a statement.
const std::set<std::string> kClosingTags = {"elif", "else", "endif", "endfor", "endset", "endmacro",
                                            "endgeneration", "endraw", "endblock", "endcall", "endfilter"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ChatTemplateLimits& limits) : toks_(std::move(tokens)), limits_(limits) {}

  Body parse_template() { return parse_body({}, nullptr, toks_.front()); }

 private:
  // --- tokens ---------------------------------------------------------
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  static std::string where(const Token& t) { return std::to_string(t.line) + ":" + std::to_string(t.column); }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText: return "text";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kVariableBegin: return "'{{'";
      case TokenKind::kVariableEnd: return "'}}'";
      case TokenKind::kString: return "a string";
      case TokenKind::kEnd: return "the end of the template";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] static void syntax_error(const Token& at, const std::string& what) {
    throw ParseError{invalid_argument("chat template " + where(at) + ": " + what)};
  }
  [[noreturn]] static void unsupported_error(const Token& at, const std::string& what) {
    throw ParseError{unsupported("chat template " + where(at) + ": " + what)};
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) syntax_error(cur(), std::string("expected '") + op + "', found " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) syntax_error(cur(), "expected a name, found " + describe(cur()));
    std::string name = cur().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) syntax_error(cur(), "expected '%}', found " + describe(cur()));
    advance();
  }
  static ast::Pos pos_of(const Token& t) { return {t.line, t.column}; }

  // Bounds the recursion of both grammar levels, so a template of nested
  // brackets or blocks cannot overflow the stack.
  struct DepthGuard {
    DepthGuard(Parser* p, const Token& at) : parser(p) {
      if (++parser->depth_ > parser->limits_.max_depth) {
        syntax_error(at, "nesting deeper than the limit of " + std::to_string(parser->limits_.max_depth));
      }
    }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };

  // --- statements -----------------------------------------------------
  // Nodes up to one of `end_tags` (whose name is consumed and stored in
  // *ended_by; the rest of that tag is the caller's) or the template's end.
  Body parse_body(const std::set<std::string>& end_tags, std::string* ended_by, const Token& opener) {
    DepthGuard guard(this, opener);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEnd) {
        if (!end_tags.empty()) {
          syntax_error(opener, "'" + opener.text + "' is never closed (expected '" + *end_tags.rbegin() + "')");
        }
        return body;
      }
      if (t.kind == TokenKind::kText) {
        Node n;
        n.kind = NodeKind::kText;
        n.pos = pos_of(t);
        n.text = t.text;
        body.push_back(std::move(n));
        advance();
        continue;
      }
      if (t.kind == TokenKind::kVariableBegin) {
        advance();
        Node n;
        n.kind = NodeKind::kOutput;
        n.pos = pos_of(cur());
        n.expr = parse_expr();
        if (cur().kind != TokenKind::kVariableEnd) syntax_error(cur(), "expected '}}', found " + describe(cur()));
        advance();
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind != TokenKind::kBlockBegin) syntax_error(t, "unexpected " + describe(t));
      advance();
      const Token& tag = cur();
      if (tag.kind != TokenKind::kName) syntax_error(tag, "expected a tag name, found " + describe(tag));
      if (end_tags.count(tag.text)) {
        *ended_by = tag.text;
        advance();
        return body;
      }
      if (kClosingTags.count(tag.text)) {
        syntax_error(tag, "unexpected '" + tag.text + "'" +
                              (end_tags.empty() ? std::string() : " (expected '" + *end_tags.rbegin() + "')"));
      }
      body.push_back(parse_statement());
    }
  }

  Node parse_statement() {
    const Token tag = cur();
    advance();
    Node n;
    n.pos = pos_of(tag);
    const std::string& name = tag.text;
    if (name == "if") {
      n.kind = NodeKind::kIf;
      ExprPtr cond = parse_expr();
      expect_block_end();
      while (true) {
        std::string ended;
        Body body = parse_body({"elif", "else", "endif"}, &ended, tag);
        n.branches.emplace_back(std::move(cond), std::move(body));
        if (ended == "elif") {
          cond = parse_expr();
          expect_block_end();
        } else if (ended == "else") {
          expect_block_end();
          std::string end;
          Body else_body = parse_body({"endif"}, &end, tag);
          n.branches.emplace_back(nullptr, std::move(else_body));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (name == "for") {
      n.kind = NodeKind::kFor;
      n.targets.push_back(expect_name());
      while (accept_op(",")) n.targets.push_back(expect_name());
      if (!accept_name("in")) syntax_error(cur(), "expected 'in' in a for loop, found " + describe(cur()));
      n.expr = parse_expr(/*with_condition=*/false);
      if (accept_name("if")) n.filter = parse_expr();
      if (is_name("recursive")) unsupported_error(cur(), "recursive for loops are not supported");
      expect_block_end();
      ++loop_depth_;
      std::string ended;
      n.body = parse_body({"else", "endfor"}, &ended, tag);
      --loop_depth_;
      if (ended == "else") {
        expect_block_end();
        n.else_body = parse_body({"endfor"}, &ended, tag);
      }
      expect_block_end();
    } else if (name == "set") {
      n.targets.push_back(expect_name());
      if (accept_op(".")) {
        n.attr = expect_name();
      } else {
        while (accept_op(",")) n.targets.push_back(expect_name());
      }
      if (accept_op("=")) {
        n.kind = NodeKind::kSet;
        n.expr = parse_expr();
        if (is_op(",")) n.expr = parse_tuple_rest(std::move(n.expr));
        expect_block_end();
      } else {
        if (is_op("|")) unsupported_error(cur(), "a filter on a block set is not supported");
        if (n.targets.size() != 1 || !n.attr.empty()) syntax_error(cur(), "a block set takes one plain name");
        expect_block_end();
        n.kind = NodeKind::kSetBlock;
        std::string ended;
        n.body = parse_body({"endset"}, &ended, tag);
        expect_block_end();
      }
    } else if (name == "macro") {
      n.kind = NodeKind::kMacro;
      n.macro = std::make_unique<ast::Macro>();
      n.macro->name = expect_name();
      expect_op("(");
      while (!accept_op(")")) {
        std::string param = expect_name();
        ExprPtr fallback;
        if (accept_op("=")) fallback = parse_expr();
        n.macro->params.emplace_back(std::move(param), std::move(fallback));
        if (!is_op(")")) expect_op(",");
      }
      expect_block_end();
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;  // a loop around the definition is not one around the body
      std::string ended;
      n.macro->body = parse_body({"endmacro"}, &ended, tag);
      loop_depth_ = saved_loops;
      if (cur().kind == TokenKind::kName) advance();  // {% endmacro name %}
      expect_block_end();
    } else if (name == "generation") {
      // transformers' AssistantTracker marks the assistant's text here;
      // rendering is the body unchanged.
      n.kind = NodeKind::kBlock;
      expect_block_end();
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;  // jinja2 runs the body as a call block: no break out of it
      std::string ended;
      n.body = parse_body({"endgeneration"}, &ended, tag);
      loop_depth_ = saved_loops;
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) syntax_error(tag, "'" + name + "' outside a for loop");
      n.kind = name == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      expect_block_end();
    } else if (kUnsupportedTags.count(name)) {
      unsupported_error(tag, "unsupported tag '" + name + "'");
    } else {
      unsupported_error(tag, "unknown tag '" + name + "'");
    }
    return n;
  }

  // --- expressions ----------------------------------------------------
  ExprPtr make(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos_of(at);
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Token& at) {
    ExprPtr e = make(ExprKind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_expr(bool with_condition = true) {
    const Token start = cur();
    DepthGuard guard(this, start);
    ExprPtr e = parse_or();
    while (with_condition && accept_name("if")) {
      ExprPtr c = make(ExprKind::kCondition, start);
      ExprPtr cond = parse_or();
      ExprPtr other = accept_name("else") ? parse_expr() : nullptr;
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  // `a, b, c` after its first item: a tuple.
  ExprPtr parse_tuple_rest(ExprPtr first) {
    ExprPtr list = make(ExprKind::kList, cur());
    list->tuple = true;
    list->pos = first->pos;
    list->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().kind == TokenKind::kBlockEnd || cur().kind == TokenKind::kVariableEnd || is_op(")")) break;
      list->args.push_back(parse_expr());
    }
    return list;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token t = cur();
      advance();
      e = binary("or", std::move(e), parse_and(), t);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token t = cur();
      advance();
      e = binary("and", std::move(e), parse_not(), t);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token t = cur();
      DepthGuard guard(this, t);
      advance();
      ExprPtr e = make(ExprKind::kUnary, t);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token start = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, start);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = cur();
      advance();
      e = binary(t.text, std::move(e), parse_concat(), t);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token t = cur();
      advance();
      e = binary("~", std::move(e), parse_math2(), t);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = cur();
      advance();
      e = binary(t.text, std::move(e), parse_pow(), t);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (is_op("**")) {
      const Token t = cur();
      advance();
      e = binary("**", std::move(e), parse_unary(), t);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    const Token t = cur();
    DepthGuard guard(this, t);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      advance();
      e = make(ExprKind::kUnary, t);
      e->name = t.text;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, const Token& at) {
    ExprPtr e = make(ExprKind::kLiteral, at);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token t = cur();
    switch (t.kind) {
      case TokenKind::kName: {
        advance();
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t);
        ExprPtr e = make(ExprKind::kName, t);
        e->name = t.text;
        return e;
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {  // adjacent literals join, as in Python
          s += cur().text;
          advance();
        }
        return literal(Value::string(std::move(s)), t);
      }
      case TokenKind::kInteger: {
        advance();
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) unsupported_error(t, "integer " + t.text + " does not fit in 64 bits");
        return literal(Value::integer(v), t);
      }
      case TokenKind::kFloat: {
        advance();
        return literal(Value::real(std::strtod(t.text.c_str(), nullptr)), t);
      }
      case TokenKind::kOperator: {
        if (t.text == "(") {
          advance();
          if (accept_op(")")) {
            ExprPtr empty = make(ExprKind::kList, t);
            empty->tuple = true;
            return empty;
          }
          ExprPtr e = parse_expr();
          if (is_op(",")) e = parse_tuple_rest(std::move(e));
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          ExprPtr e = make(ExprKind::kList, t);
          while (!accept_op("]")) {
            e->args.push_back(parse_expr());
            if (!is_op("]")) expect_op(",");
          }
          return e;
        }
        if (t.text == "{") {
          advance();
          ExprPtr e = make(ExprKind::kDict, t);
          while (!accept_op("}")) {
            e->args.push_back(parse_expr());
            expect_op(":");
            e->args.push_back(parse_expr());
            if (!is_op("}")) expect_op(",");
          }
          return e;
        }
        break;
      }
      default: break;
    }
    syntax_error(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token t = cur();
      if (accept_op(".")) {
        if (cur().kind == TokenKind::kInteger) {
          ExprPtr idx = make(ExprKind::kIndex, t);
          idx->args.push_back(std::move(e));
          idx->args.push_back(parse_primary());
          e = std::move(idx);
        } else {
          ExprPtr attr = make(ExprKind::kAttr, t);
          attr->name = expect_name();
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Token t = cur();
    expect_op("[");
    ExprPtr start = is_op(":") ? nullptr : parse_expr();
    if (!accept_op(":")) {
      expect_op("]");
      ExprPtr e = make(ExprKind::kIndex, t);
      e->args.push_back(std::move(target));
      e->args.push_back(std::move(start));
      return e;
    }
    ExprPtr e = make(ExprKind::kSlice, t);
    ExprPtr stop = is_op(":") || is_op("]") ? nullptr : parse_expr();
    ExprPtr step;
    if (accept_op(":") && !is_op("]")) step = parse_expr();
    expect_op("]");
    e->args.push_back(std::move(target));
    e->args.push_back(std::move(start));
    e->args.push_back(std::move(stop));
    e->args.push_back(std::move(step));
    return e;
  }

  // `(a, b, key=c)` into e->args (after what is already there) and e->kwargs.
  void parse_arguments(Expr* e) {
    expect_op("(");
    while (!accept_op(")")) {
      if (is_op("*") || is_op("**")) unsupported_error(cur(), "unpacking arguments with * or ** is not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        e->kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e->kwargs.empty()) syntax_error(cur(), "a positional argument after a keyword argument");
        e->args.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = make(ExprKind::kCall, cur());
    e->pos = callee->pos;
    e->args.push_back(std::move(callee));
    parse_arguments(e.get());
    return e;
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      const Token t = cur();
      if (accept_op("|")) {
        ExprPtr f = make(ExprKind::kFilter, t);
        const Token name_token = cur();
        f->name = expect_name();
        while (accept_op(".")) f->name += "." + expect_name();
        if (!is_filter(f->name)) unsupported_error(name_token, "unsupported filter '" + f->name + "'");
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_arguments(f.get());
        e = std::move(f);
      } else if (accept_name("is")) {
        ExprPtr test = make(ExprKind::kTest, t);
        test->negated = accept_name("not");
        const Token name_token = cur();
        test->name = expect_name();
        if (!is_test(test->name)) unsupported_error(name_token, "unsupported test '" + test->name + "'");
        test->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_arguments(test.get());
        } else if ((cur().kind == TokenKind::kName && cur().text != "else" && cur().text != "or" &&
                    cur().text != "and" && cur().text != "if" && cur().text != "is") ||
                   cur().kind == TokenKind::kString || cur().kind == TokenKind::kInteger ||
                   cur().kind == TokenKind::kFloat || is_op("[") || is_op("{")) {
          // `x is divisibleby 3`: one argument without parentheses.
          test->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(test);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  const ChatTemplateLimits& limits_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Program> parse_program(std::vector<Token> tokens, const ChatTemplateLimits& limits) {
  try {
    Parser parser(std::move(tokens), limits);
    Program program;
    program.body = parser.parse_template();
    program.limits = limits;
    return program;
  } catch (const ParseError& e) {
    return e.status;
  }
}

}  // namespace flashscope::chat_template
