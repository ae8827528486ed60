// The parser: tokens to a Program, by recursive descent with jinja2's
// grammar and operator precedence (loosest first):
//   x if c else y;  or;  and;  not;  comparisons and in / not in (chained);
//   + -;  ~;  * / // %;  **;  unary - +;  then primary with its postfix
//   (.attr, [index], [a:b:c], (call)) and its filters (|f) and tests (is t).
// Statements: if/elif/else, for (targets, loop filter, else), set (name,
// ns.attr, block), macro, break/continue, generation. Others are
// kUnsupported naming the tag; grammar errors are kInvalidArgument; both
// say line:column.
#pragma once

#include <string_view>
#include <vector>

#include "chat_template/ast.hpp"
#include "chat_template/lexer.hpp"
#include "flashscope/chat_template.hpp"

namespace flashscope::chat_template {

Result<Program> parse_program(std::vector<Token> tokens, const ChatTemplateLimits& limits);

}  // namespace flashscope::chat_template
