// The trace reader on arbitrary bytes: a trace that parses is valid, and
// serializing it gives a file that parses to the same records.
#include <cstddef>
#include <cstdint>

#include "flashscope/trace.hpp"

using namespace flashscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = parse_trace(data, size);
  if (!t.ok()) return 0;
  if (!validate_trace(t.value()).ok()) __builtin_trap();
  auto bytes = serialize_trace(t.value());
  if (!bytes.ok()) __builtin_trap();
  auto again = parse_trace(bytes->data(), bytes->size());
  if (!again.ok()) __builtin_trap();
  if (again->ctas.size() != t->ctas.size() || again->spans.size() != t->spans.size()) __builtin_trap();
  return 0;
}
