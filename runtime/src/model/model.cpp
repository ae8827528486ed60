// Model: loading (config, weights, tokenizer from one GGUF), Sequence
// bookkeeping, and forward(): the checks every backend shares, then the
// backend's own forward.
#include <algorithm>
#include <new>
#include <string>
#include <utility>

#include "flashscope/untrusted.hpp"
#include "gguf/check_finite.hpp"
#include "model/internal.hpp"
#include "model/model_impl.hpp"

namespace flashscope {
namespace {

Status corrupt(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }

// The tokenizer from tokenizer.ggml.* keys. Only byte-level BPE ("gpt2")
// with the "smollm" pre-tokenizer is implemented; anything else would
// tokenize differently from how the model was trained, so it is refused.
Result<Tokenizer> load_tokenizer(const GgufFile& f, int vocab) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (model.value() != "gpt2") {
    return unsupported("tokenizer model " + printable(model.value()) +
                       " is not supported (supported: gpt2 byte-level BPE)");
  }
  std::string pre;
  if (f.has_key("tokenizer.ggml.pre")) {
    auto v = f.get_string("tokenizer.ggml.pre");  // a key of another type is named as such
    if (!v.ok()) return v.status();
    pre = v.value();
  }
  if (pre != "smollm") {
    return unsupported("pre-tokenizer " + (pre.empty() ? std::string("(none)") : printable(pre)) +
                       " (tokenizer.ggml.pre) is not supported (supported: smollm)");
  }
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if (static_cast<int64_t>(tokens.value().size()) != vocab) {
    return corrupt("tokenizer.ggml.tokens has " + std::to_string(tokens.value().size()) +
                   " entries but the model's vocabulary is " + std::to_string(vocab));
  }
  std::vector<int32_t> types;
  if (f.has_key("tokenizer.ggml.token_type")) {
    auto types64 = f.get_int_array("tokenizer.ggml.token_type");
    if (!types64.ok()) return types64.status();
    types.reserve(types64.value().size());
    for (size_t i = 0; i < types64.value().size(); ++i) {
      const int64_t t = types64.value()[i];
      if (t < 1 || t > 6) {  // checked before narrowing: 2^32 + 1 must not pass as 1
        return corrupt("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                       " is not a token type (1 normal .. 6 byte)");
      }
      types.push_back(static_cast<int32_t>(t));
    }
  }
  auto merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();

  SpecialTokens sp;
  auto id_of = [&](const char* key, int32_t* out) -> Status {
    if (!f.has_key(key)) return Status::ok_status();
    auto v = f.get_int(key);
    if (!v.ok()) return v.status();
    if (v.value() < 0 || v.value() >= vocab) {
      return corrupt(std::string(key) + " = " + std::to_string(v.value()) + " is outside the vocabulary");
    }
    *out = static_cast<int32_t>(v.value());
    return Status::ok_status();
  };
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.bos_token_id", &sp.bos_id));
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.eos_token_id", &sp.eos_id));
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.unknown_token_id", &sp.unk_id));
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.padding_token_id", &sp.pad_id));
  if (f.has_key("tokenizer.ggml.add_bos_token")) {
    auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    if (!add_bos.ok()) return add_bos.status();
    sp.add_bos = add_bos.value();
  }
  return Tokenizer::create(std::move(tokens).value(), std::move(types), std::move(merges).value(), sp);
}

std::vector<int32_t> find_stop_tokens(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  for (const char* piece : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"}) {
    const int32_t id = tok.token_id(piece);
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

uint64_t matrix_bytes(const model::Matrix& m) { return m.tensor != nullptr ? m.tensor->size : 0; }

}  // namespace

// --- Sequence -----------------------------------------------------------------

Sequence::Sequence() = default;
Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;

int Sequence::n_tokens() const { return state_ ? static_cast<int>(state_->tokens.size()) : 0; }
int Sequence::capacity() const { return state_ ? state_->capacity : 0; }

const std::vector<int32_t>& Sequence::tokens() const {
  static const std::vector<int32_t> kEmpty;
  return state_ ? state_->tokens : kEmpty;
}

void Sequence::clear() {
  if (state_) state_->tokens.clear();
}

Status Sequence::truncate(int n) {
  if (n < 0 || n > n_tokens()) {
    return invalid_argument("truncate(" + std::to_string(n) + "): the sequence holds " + std::to_string(n_tokens()) +
                            " tokens");
  }
  if (state_) state_->tokens.resize(static_cast<size_t>(n));  // shrinking never allocates
  return Status::ok_status();
}

uint64_t Sequence::cache_bytes() const { return state_ ? state_->cache_bytes() : 0; }

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
    return invalid_argument("ModelOptions.threads = " + std::to_string(options.threads) + " must be 0 (all cores) to " +
                            std::to_string(kMaxThreads));
  }
  if (options.device != Device::kCpu && options.device != Device::kCuda) {
    return invalid_argument("ModelOptions.device is not a known device (kCpu, kCuda)");
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
  }
  impl->stop_tokens = find_stop_tokens(impl->tokenizer);

  const model::Weights& w = impl->weights;
  uint64_t bytes = matrix_bytes(w.token_embd) + (impl->config.tied_embeddings ? 0 : matrix_bytes(w.output));
  for (const model::LayerWeights& L : w.layers) {
    for (const model::Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) bytes += matrix_bytes(*m);
  }
  impl->weight_bytes = bytes;
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

Device Model::device() const { return impl_ ? impl_->options.device : Device::kCpu; }
uint64_t Model::weight_bytes() const { return impl_ ? impl_->weight_bytes : 0; }

const std::vector<int32_t>& Model::stop_tokens() const {
  static const std::vector<int32_t> kEmpty;
  return impl_ ? impl_->stop_tokens : kEmpty;
}

Result<Sequence> Model::new_sequence(int max_tokens) const {
  if (!impl_) return invalid_argument("new_sequence: the model is not loaded");
  const int ctx = impl_->config.context_length;
  const int capacity = max_tokens <= 0 || max_tokens > ctx ? ctx : max_tokens;
  auto state = impl_->options.device == Device::kCuda ? model::cuda_new_state(*impl_, capacity)
                                                      : model::cpu_new_state(*impl_, capacity);
  if (!state.ok()) return state.status();
  Sequence seq;
  seq.state_ = std::move(state).value();
  return seq;
}

Status Model::forward(Sequence& seq, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                      LogitsMode mode, std::vector<float>* logits) const {
  if (!impl_) return invalid_argument("forward: the model is not loaded");
  if (mode != LogitsMode::kNone && logits == nullptr) return invalid_argument("forward: logits is null");
  return model::run_forward(*impl_, seq.state_.get(), tokens, positions, mode, logits);
}

Status Model::forward_batch(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& tokens,
                            std::vector<float>* logits) const {
  if (!impl_) return invalid_argument("forward_batch: the model is not loaded");
  auto states = model::check_batch(*impl_, seqs, tokens);
  if (!states.ok()) return states.status();
  const int n = static_cast<int>(tokens.size());
  if (impl_->options.device == Device::kCuda)
    return model::cuda_forward_batch(*impl_, states->data(), tokens.data(), n, logits);
  return model::cpu_forward_batch(*impl_, states->data(), tokens.data(), n, logits);
}

namespace model {

Status check_fit(const Sequence::State& st, size_t n) {
  const size_t cached = st.tokens.size();
  const size_t capacity = static_cast<size_t>(st.capacity);
  if (n <= capacity && cached + n <= capacity) return Status::ok_status();
  if (cached == 0) {
    return invalid_argument(std::to_string(n) + " tokens do not fit the context of " + std::to_string(capacity) +
                            " tokens");
  }
  return invalid_argument("the context is full: " + std::to_string(cached) + " of " + std::to_string(capacity) +
                          " tokens are used, " + std::to_string(capacity - std::min(cached, capacity)) +
                          " fit and " + std::to_string(n) + " were given");
}

Status run_forward(const Model::Impl& m, Sequence::State* state, const std::vector<int32_t>& tokens,
                   const std::vector<int32_t>& positions, LogitsMode mode, std::vector<float>* logits) {
  if (state == nullptr) return invalid_argument("forward: the sequence is empty (create it with Model::new_sequence)");
  Sequence::State& st = *state;
  if (st.owner != &m) return invalid_argument("forward: the sequence belongs to another model");
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  if (mode != LogitsMode::kNone && logits == nullptr && m.options.device != Device::kCuda) {
    return invalid_argument("forward: logits is null");
  }
  const int n = static_cast<int>(tokens.size());
  const int cached = static_cast<int>(st.tokens.size());
  FLASHSCOPE_RETURN_IF_ERROR(check_fit(st, tokens.size()));
  const int vocab = m.config.vocab;
  for (int i = 0; i < n; ++i) {
    if (tokens[static_cast<size_t>(i)] < 0 || tokens[static_cast<size_t>(i)] >= vocab) {
      return invalid_argument("forward: token " + std::to_string(i) + " has id " +
                              std::to_string(tokens[static_cast<size_t>(i)]) + ", outside the vocabulary of " +
                              std::to_string(vocab));
    }
  }
  std::vector<int32_t> default_positions;
  const int32_t* pos = positions.data();
  if (positions.empty()) {
    try {
      default_positions.resize(static_cast<size_t>(n));
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "forward: cannot allocate positions");
    }
    for (int i = 0; i < n; ++i) default_positions[static_cast<size_t>(i)] = cached + i;
    pos = default_positions.data();
  } else if (positions.size() != tokens.size()) {
    return invalid_argument("forward: " + std::to_string(positions.size()) + " positions for " + std::to_string(n) +
                            " tokens");
  } else {
    for (int i = 0; i < n; ++i) {
      if (positions[static_cast<size_t>(i)] < 0) {
        return invalid_argument("forward: position " + std::to_string(i) + " is negative");
      }
    }
  }
  if (m.options.device == Device::kCuda) return cuda_forward(m, st, tokens.data(), pos, n, mode, logits);
  return cpu_forward(m, st, tokens.data(), pos, n, mode, logits);
}

Result<std::vector<Sequence::State*>> check_batch(const Model::Impl& m, const std::vector<Sequence*>& seqs,
                                                  const std::vector<int32_t>& tokens) {
  if (seqs.empty()) return invalid_argument("forward_batch: no sequences");
  if (tokens.size() != seqs.size()) {
    return invalid_argument("forward_batch: " + std::to_string(tokens.size()) + " tokens for " +
                            std::to_string(seqs.size()) + " sequences (one token each)");
  }
  std::vector<Sequence::State*> states;
  try {
    states.reserve(seqs.size());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "forward_batch: cannot allocate the batch");
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::string which = "forward_batch: sequence " + std::to_string(i);
    if (seqs[i] == nullptr) return invalid_argument(which + " is null");
    Sequence::State* st = Internal::state(*seqs[i]);
    if (st == nullptr) return invalid_argument(which + " is empty (create it with Model::new_sequence)");
    if (st->owner != &m) return invalid_argument(which + " belongs to another model");
    if (std::find(states.begin(), states.end(), st) != states.end()) {
      return invalid_argument(which + " is listed twice (one token per sequence and step)");
    }
    if (tokens[i] < 0 || tokens[i] >= m.config.vocab) {
      return invalid_argument(which + ": token id " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                              std::to_string(m.config.vocab));
    }
    if (st->tokens.size() + 1 > static_cast<size_t>(st->capacity)) {
      return invalid_argument(which + ": the context is full (" + std::to_string(st->capacity) + " tokens)");
    }
    states.push_back(st);
  }
  return states;
}

}  // namespace model
}  // namespace flashscope
