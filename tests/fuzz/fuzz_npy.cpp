// The CLI's .npy reader on arbitrary bytes: what parses converts to floats
// with the element count its shape says.
#include <cstddef>
#include <cstdint>

#include "npy.hpp"

using namespace flashscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto a = cli::parse_npy(data, size);
  if (!a.ok()) return 0;
  auto f = cli::npy_as_float(a.value());
  (void)f;
  return 0;
}
