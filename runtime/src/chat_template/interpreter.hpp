// The interpreter: walks a Program's statements with a stack of scopes and
// appends to the output. Scoping follows jinja2: the template's top level is
// one scope; each for-loop iteration and each macro call gets its own, so a
// `set` inside a loop is gone after the iteration (namespace() objects are
// how templates carry values out); if-blocks share their enclosing scope.
#pragma once

#include <ctime>
#include <functional>
#include <string>

#include "chat_template/ast.hpp"

namespace flashscope::chat_template {

// Renders `program` with the given global variables. RenderError (thrown by
// the interpreter, carrying the line:column where it happened) comes back
// as its Status with "chat template L:C: " in front.
Result<std::string> render_program(const Program& program, Map globals, const std::function<std::tm()>& now);

}  // namespace flashscope::chat_template
