// GgufFile on arbitrary bytes: after a successful parse every accessor, on
// every key, and dequantization and the NaN/inf check of every tensor must
// stay inside the file (GgufFile's header promises bounds-safe accessors).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashscope/gguf.hpp"

using namespace flashscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::from_memory(data, size);
  if (!file.ok()) return 0;
  const GgufFile& f = file.value();
  for (const GgufKeyInfo& k : f.keys()) {
    (void)f.key_info(k.key);
    (void)f.get_int(k.key);
    (void)f.get_float(k.key);
    (void)f.get_bool(k.key);
    (void)f.get_string(k.key);
    (void)f.get_string_array(k.key);
    (void)f.get_int_array(k.key);
    (void)f.get_float_array(k.key);
    (void)f.format_value(k.key, 4);
  }
  std::vector<float> row;
  for (const GgufTensor& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    (void)t.n_elements();
    (void)t.n_rows();
    (void)t.row_size();
    (void)check_tensor_finite(t);
    // The first and the last row, when a row is small enough to expand here.
    if (!ggml_type_can_dequantize(t.type) || t.ne[0] <= 0 || t.ne[0] > (1 << 16) || t.n_rows() <= 0) continue;
    row.resize(static_cast<size_t>(t.ne[0]));
    (void)dequantize_rows(t, 0, 1, row.data());
    (void)dequantize_rows(t, t.n_rows() - 1, 1, row.data());
    (void)dequantize_rows(t, t.n_rows(), 1, row.data());  // out of range: an error, not a read
  }
  return 0;
}
