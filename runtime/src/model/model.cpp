// Model: loading (config, weights, tokenizer from one GGUF) and what a
// loaded model tells (backends/forward.cpp has Sequence and forward()).
#include <algorithm>
#include <new>
#include <string>
#include <utility>

#include "backends/backend.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/untrusted.hpp"
#include "gguf/check_finite.hpp"
#include "model/internal.hpp"
#include "model/model_impl.hpp"
#include "tokenizer/gguf_tokenizer.hpp"

namespace flashscope {
namespace {

// The tokenizer from tokenizer.ggml.* keys (tokenizer/gguf_tokenizer.cpp);
// a model or pre-tokenizer it does not implement would tokenize differently
// from how the model was trained, so it is refused.
Result<Tokenizer> load_tokenizer(const GgufFile& f, int vocab) { return tokenizer::load_gguf_tokenizer(f, vocab); }

std::vector<int32_t> find_stop_tokens(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  for (const char* piece : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>"}) {
    const int32_t id = tok.token_id(piece);
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

uint64_t matrix_bytes(const model::Matrix& m) {
  return m.tensor != nullptr ? static_cast<uint64_t>(m.q.rows) * m.q.row_bytes : 0;  // a view's share of a fused tensor
}

uint64_t matrix_elems(const model::Matrix& m) {
  return m.tensor != nullptr ? static_cast<uint64_t>(m.q.rows) * static_cast<uint64_t>(m.q.cols) : 0;
}

}  // namespace

// --- Model --------------------------------------------------------------------

Model::Model() = default;
Model::Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Result<Model> Model::load(const std::string& path, const ModelOptions& options) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  return from_gguf(std::move(file).value(), options);
}

Result<Model> Model::from_gguf(GgufFile file, const ModelOptions& options) {
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return invalid_argument("ModelOptions.threads = " + std::to_string(options.threads) + " must be 0 (auto: the physical cores not busy elsewhere) to " +
                            std::to_string(kMaxThreads));
  }
  if (options.weights != WeightFormat::kQuantized && options.weights != WeightFormat::kBf16 &&
      options.weights != WeightFormat::kAuto) {
    return invalid_argument("ModelOptions.weights is not a known weight format (kQuantized, kBf16, kAuto)");
  }
  if (options.device != Device::kCpu && options.device != Device::kCuda) {
    return invalid_argument("ModelOptions.device is not a known device (kCpu, kCuda)");
  }
  if (options.kv_type != KvType::kBF16 && options.kv_type != KvType::kQ8_0 && options.kv_type != KvType::kQ4_0) {
    return invalid_argument("ModelOptions.kv_type is not a known KV cache type (kBF16, kQ8_0, kQ4_0)");
  }
  if (options.kv_type != KvType::kBF16 && options.device != Device::kCpu) {
    return unsupported(std::string("a ") + kv_type_name(options.kv_type) +
                       " KV cache runs on the CPU engine only; the CUDA engine keeps bf16 (--kv-type bf16)");
  }
  std::shared_ptr<Impl> impl;
  try {
    impl = std::make_shared<Impl>();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the model");
  }
  impl->file = std::move(file);
  impl->options = options;
  auto config = ModelConfig::from_gguf(impl->file);
  if (!config.ok()) return config.status();
  impl->config = config.value();
  if (!head_dim_supported(options.device, impl->config.head_dim)) {
    return unsupported("head_dim " + std::to_string(impl->config.head_dim) + " is not supported on " +
                       (options.device == Device::kCuda ? "CUDA" : "the CPU") + " (supported: " +
                       supported_head_dims_text(options.device) + ")");
  }
  if (options.kv_type != KvType::kBF16 && impl->config.head_dim % 32 != 0) {
    return unsupported(std::string("a ") + kv_type_name(options.kv_type) +
                       " KV cache needs head_dim a multiple of 32, this model's is " +
                       std::to_string(impl->config.head_dim) + " (--kv-type bf16)");
  }

  auto weights = model::bind_weights(impl->file, impl->config);
  if (!weights.ok()) return weights.status();
  FLASHSCOPE_RETURN_IF_ERROR(model::check_weights_finite(impl->file, options.check_weights));
  impl->weights = std::move(weights).value();

  auto tok = load_tokenizer(impl->file, impl->config.vocab);
  if (!tok.ok()) return tok.status();
  impl->tokenizer = std::move(tok).value();
  if (impl->file.has_key("tokenizer.chat_template")) {
    auto tmpl = impl->file.get_string("tokenizer.chat_template");
    if (!tmpl.ok()) return tmpl.status();
    impl->chat_template = tmpl.value();
    auto parsed = ChatTemplate::parse(impl->chat_template);
    if (parsed.ok()) {
      impl->parsed_chat_template = std::make_shared<const ChatTemplate>(std::move(parsed).value());
    } else {
      impl->chat_template_status = parsed.status();
    }
  }
  impl->stop_tokens = find_stop_tokens(impl->tokenizer);
  impl->sampling_defaults = flashscope::sampling_defaults(impl->file);

  const model::Weights& w = impl->weights;
  uint64_t bytes = matrix_bytes(w.token_embd) + (impl->config.tied_embeddings ? 0 : matrix_bytes(w.output));
  uint64_t elems = matrix_elems(w.token_embd) + (impl->config.tied_embeddings ? 0 : matrix_elems(w.output));
  for (const model::LayerWeights& L : w.layers) {
    for (const model::Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) {
      bytes += matrix_bytes(*m);
      elems += matrix_elems(*m);
    }
  }
  impl->weight_bytes = bytes;
  if (impl->options.weights == WeightFormat::kAuto) {
    impl->options.weights = elems < kAutoBf16MaxWeights ? WeightFormat::kBf16 : WeightFormat::kQuantized;
  }
  if (impl->options.device == Device::kCuda) {  // last: the file is fully checked before any device work
    auto cuda = model::cuda_load(*impl);
    if (!cuda.ok()) return cuda.status();
    impl->cuda = std::move(cuda).value();
  }
  return Model(std::move(impl));
}

const ModelConfig& Model::config() const {
  static const ModelConfig kEmpty;
  return impl_ ? impl_->config : kEmpty;
}

const Tokenizer& Model::tokenizer() const {
  static const Tokenizer kEmpty;
  return impl_ ? impl_->tokenizer : kEmpty;
}

const std::string& Model::chat_template() const {
  static const std::string kEmpty;
  return impl_ ? impl_->chat_template : kEmpty;
}

const ChatTemplate* Model::parsed_chat_template() const {
  return impl_ ? impl_->parsed_chat_template.get() : nullptr;
}

const Status& Model::chat_template_status() const {
  static const Status kOk;
  return impl_ ? impl_->chat_template_status : kOk;
}

Device Model::device() const { return impl_ ? impl_->options.device : Device::kCpu; }
uint64_t Model::weight_bytes() const { return impl_ ? impl_->weight_bytes : 0; }
uint64_t Model::device_weight_bytes() const { return impl_ ? model::cuda_weight_bytes(*impl_) : 0; }

WeightFormat Model::weight_format() const { return impl_ ? impl_->options.weights : WeightFormat::kAuto; }

const char* weight_format_name(WeightFormat f) {
  return f == WeightFormat::kBf16 ? "bf16" : f == WeightFormat::kAuto ? "auto" : "quantized";
}

const char* kv_type_name(KvType t) {
  return t == KvType::kQ8_0 ? "q8_0" : t == KvType::kQ4_0 ? "q4_0" : "bf16";
}

bool parse_kv_type(const std::string& text, KvType* out) {
  if (text == "bf16") {
    *out = KvType::kBF16;
  } else if (text == "q8_0") {
    *out = KvType::kQ8_0;
  } else if (text == "q4_0") {
    *out = KvType::kQ4_0;
  } else {
    return false;
  }
  return true;
}

uint64_t kv_bytes_per_token(const ModelConfig& c, KvType t) {
  const uint64_t elems = 2ull * static_cast<uint64_t>(c.n_layers) * static_cast<uint64_t>(c.n_kv_heads) *
                         static_cast<uint64_t>(c.head_dim);
  if (t == KvType::kQ8_0) return elems + elems / 32 * 2;  // 32 int8 and an fp16 scale per 32
  if (t == KvType::kQ4_0) return elems / 2 + elems / 32 * 2;  // 32 four-bit codes and an fp16 scale per 32
  return elems * 2;
}

bool parse_weight_format(const std::string& text, WeightFormat* out) {
  if (text == "quantized") {
    *out = WeightFormat::kQuantized;
  } else if (text == "bf16") {
    *out = WeightFormat::kBf16;
  } else if (text == "auto") {
    *out = WeightFormat::kAuto;
  } else {
    return false;
  }
  return true;
}

const SamplingDefaults& Model::sampling_defaults() const {
  static const SamplingDefaults kNone;
  return impl_ ? impl_->sampling_defaults : kNone;
}

const std::vector<int32_t>& Model::stop_tokens() const {
  static const std::vector<int32_t> kEmpty;
  return impl_ ? impl_->stop_tokens : kEmpty;
}

}  // namespace flashscope
