// Model::from_gguf on arbitrary bytes: the config from the metadata, the
// tensor table bound against it, the tokenizer and the NaN/inf check. A file
// that loads must have a config that validates and a tokenizer that encodes.
#include <cstddef>
#include <cstdint>

#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"

using namespace flashscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::from_memory(data, size);
  if (!file.ok()) return 0;
  (void)ModelConfig::from_gguf(file.value());
  ModelOptions options;
  options.check_weights = WeightCheck::kAlways;
  auto model = Model::from_gguf(std::move(file).value(), options);
  if (!model.ok()) return 0;
  if (!model->config().validate().ok()) __builtin_trap();
  const Tokenizer& tok = model->tokenizer();
  const auto ids = tok.encode("Hello <|im_start|> world\n\xff", true);
  (void)tok.decode(ids);
  return 0;
}
