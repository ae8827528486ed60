// The tests' name for the runtime's GGUF writer (runtime/src/gguf/gguf_builder.hpp),
// so there is one copy of it: flashscope::testing::GgufBuilder.
#pragma once

#include "gguf/gguf_builder.hpp"

namespace flashscope::testing {

using GgufBuilder = model::GgufBuilder;

}  // namespace flashscope::testing
