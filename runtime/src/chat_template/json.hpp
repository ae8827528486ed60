// The `tojson` filter: Python's json.dumps as transformers binds it
// (ensure_ascii=False by default, key order kept), byte for byte:
// separators ", " and ": " (or "," and ": " with an indent), floats as
// Python's repr, NaN/Infinity as Python writes them, and only ", \, the
// control characters (\n \r \t \b \f, others as \u00XX) escaped — plus
// everything past ASCII as \uXXXX (surrogate pairs) when ensure_ascii.
#pragma once

#include <string>

#include "chat_template/value.hpp"

namespace flashscope::chat_template {

struct JsonOptions {
  bool ensure_ascii = false;
  bool indent_set = false;  // indent=None when false
  std::string indent;       // indent=4 is four spaces; a string is used as is
  bool separators_set = false;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};

// Throws RenderError for what json.dumps cannot write (Undefined, a macro).
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace flashscope::chat_template
