// The parsed template: statements (Node) holding expressions (Expr). Every
// node keeps its line:column so a render error can say where it happened.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat_template/value.hpp"
#include "flashscope/chat_template.hpp"

namespace flashscope::chat_template::ast {

struct Pos {
  int line = 0;
  int column = 0;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // args: the items; tuple for (a, b)
  kDict,     // kwargs: key expression in args[2k], value in args[2k + 1]
  kAttr,     // args[0].name
  kIndex,    // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]], a null arg where omitted
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs)
  kTest,     // args[0] is [not] name(args[1..]); negated
  kUnary,    // name ("-", "+", "not") args[0]
  kBinary,   // args[0] name args[1]: + - * / // % ** ~ and or
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
  kCondition,  // args[0] if args[1] else args[2] (args[2] null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  Pos pos;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  bool tuple = false;
};

struct Node;
using Body = std::vector<Node>;

struct Macro {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default value, or null
  Body body;
};

enum class NodeKind : uint8_t {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches: (condition, body); a final null condition is the else
  kFor,       // for targets in expr [if filter]: body [else else_body]
  kSet,       // set targets[0] = expr, or set targets[0].attr = expr
  kSetBlock,  // {% set targets[0] %}body{% endset %}
  kMacro,     // macro
  kBreak,
  kContinue,
  kBlock,     // body as is ({% generation %})
};

struct Node {
  NodeKind kind = NodeKind::kText;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::unique_ptr<Macro> macro;
};

}  // namespace flashscope::chat_template::ast

namespace flashscope::chat_template {

// What ChatTemplate holds: the parsed body and the limits it renders under.
struct Program {
  ast::Body body;
  ChatTemplateLimits limits;
};

}  // namespace flashscope::chat_template
