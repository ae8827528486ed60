// The lexer: template source to tokens, with jinja2's whitespace rules as
// transformers configures them.
//
//   - Newlines are normalized to "\n" and one trailing newline of the
//     source is dropped (keep_trailing_newline=False).
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
//     `-#}` strip all whitespace after it.
//   - trim_blocks: the first newline after a block or comment tag is removed.
//   - lstrip_blocks: spaces and tabs between the start of a line and a block
//     or comment tag are removed (`{%+` keeps them).
//
// Text between tags becomes one kText token; inside `{% %}` and `{{ }}` the
// expression tokens follow, bracketed by kBlockBegin/kBlockEnd or
// kVariableBegin/kVariableEnd. Comments produce nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope::chat_template {

enum class TokenKind : uint8_t {
  kText,
  kBlockBegin,
  kBlockEnd,
  kVariableBegin,
  kVariableEnd,
  kName,
  kString,   // text: the unescaped value
  kInteger,  // text: the digits (underscores removed)
  kFloat,
  kOperator,  // text: "+", "//", "==", "(", ...
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int line = 1;
  int column = 1;
};

// kInvalidArgument for an unterminated tag, comment or string, or a character
// no token starts with, naming its line:column.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace flashscope::chat_template
