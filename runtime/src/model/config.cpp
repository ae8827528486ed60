// ModelConfig from GGUF metadata, and the tensor table checked against it.
//
// Every number comes from the file's "{arch}.*" keys (llama.cpp's names);
// nothing about SmolLM2 is assumed. Optional keys and their defaults follow
// llama.cpp: head_count_kv = head_count, key_length = hidden / head_count,
// rope.dimension_count = head_dim, rope.freq_base = 10000, vocab_size = the
// tokenizer's token count.
#include <cmath>
#include <new>
#include <string>

#include "backends/cpu/quant_matmul.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/untrusted.hpp"
#include "model/model_impl.hpp"

namespace flashscope {
namespace {

Status corrupt(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }

// A required positive integer key that fits an int.
Status read_dim(const GgufFile& f, const std::string& key, int* out) {
  auto v = f.get_int(key);
  if (!v.ok()) return v.status();
  if (v.value() <= 0 || v.value() > (1 << 30)) {
    return corrupt("metadata '" + key + "' = " + std::to_string(v.value()) + " is not a valid size");
  }
  *out = static_cast<int>(v.value());
  return Status::ok_status();
}

Status read_optional_dim(const GgufFile& f, const std::string& key, int* out) {
  if (!f.has_key(key)) return Status::ok_status();
  return read_dim(f, key, out);
}

std::string shape_string(const GgufTensor& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

// The tensor `name`, checked to be a matrix [rows, cols] (ne[0] = cols) of a
// type the matrix products accept.
Status bind_matrix(const GgufFile& file, const std::string& name, int64_t rows, int64_t cols, const char* what,
                   model::Matrix* out) {
  const GgufTensor* t = file.find_tensor(name);
  if (t == nullptr) return corrupt("tensor '" + name + "' is missing");
  if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
    return corrupt("tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(cols) +
                   ", " + std::to_string(rows) + "] (" + what + ")");
  }
  if (!cpu::matmul_supports(t->type)) {
    const char* type = ggml_type_name(t->type);
    return unsupported("tensor '" + name + "' has type " +
                       (type ? type : std::to_string(static_cast<uint32_t>(t->type))) +
                       ", which the engine cannot multiply (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
                       "Q8_0, Q4_K, Q6_K)");
  }
  out->tensor = t;
  out->q.type = t->type;
  out->q.rows = rows;
  out->q.cols = cols;
  out->q.row_bytes = t->row_size();
  out->q.data = t->data;
  return Status::ok_status();
}

// A norm weight [dim], expanded to float.
Status bind_vector(const GgufFile& file, const std::string& name, int64_t dim, std::vector<float>* out) {
  const GgufTensor* t = file.find_tensor(name);
  if (t == nullptr) return corrupt("tensor '" + name + "' is missing");
  if (t->n_dims != 1 || t->ne[0] != dim) {
    return corrupt("tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(dim) +
                   "] (hidden)");
  }
  if (t->type != GgmlType::kF32 && t->type != GgmlType::kF16 && t->type != GgmlType::kBF16) {
    const char* type = ggml_type_name(t->type);
    return unsupported("norm tensor '" + name + "' has type " + (type ? type : "?") +
                       " (supported: F32, F16, BF16)");
  }
  try {
    out->assign(static_cast<size_t>(dim), 0.0f);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "cannot allocate norm weights"};
  }
  return dequantize_rows(*t, 0, 1, out->data());
}

}  // namespace

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch.ok()) return arch.status();
  c.architecture = arch.value();
  if (c.architecture != "llama") {
    return unsupported("model architecture " + printable(c.architecture) + " is not supported (supported: llama)");
  }
  if (f.has_key("general.name")) {
    auto name = f.get_string("general.name");
    if (name.ok()) c.name = name.value();
  }
  const std::string p = c.architecture + ".";

  FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "block_count", &c.n_layers));
  FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "embedding_length", &c.hidden));
  FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "attention.head_count", &c.n_heads));
  c.n_kv_heads = c.n_heads;
  FLASHSCOPE_RETURN_IF_ERROR(read_optional_dim(f, p + "attention.head_count_kv", &c.n_kv_heads));
  FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "feed_forward_length", &c.ffn));
  FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "context_length", &c.context_length));

  if (f.has_key(p + "attention.key_length")) {
    FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "attention.key_length", &c.head_dim));
  } else {
    if (c.hidden % c.n_heads != 0) {
      return corrupt(p + "embedding_length " + std::to_string(c.hidden) + " is not a multiple of " + p +
                     "attention.head_count " + std::to_string(c.n_heads));
    }
    c.head_dim = c.hidden / c.n_heads;
  }
  if (f.has_key(p + "attention.value_length")) {
    int value_length = 0;
    FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "attention.value_length", &value_length));
    if (value_length != c.head_dim) {
      return unsupported(p + "attention.value_length " + std::to_string(value_length) + " differs from key_length " +
                         std::to_string(c.head_dim) + " (only equal K and V head sizes are supported)");
    }
  }
  c.rope_dim = c.head_dim;
  FLASHSCOPE_RETURN_IF_ERROR(read_optional_dim(f, p + "rope.dimension_count", &c.rope_dim));
  if (f.has_key(p + "rope.freq_base")) {
    auto base = f.get_float(p + "rope.freq_base");
    if (!base.ok()) return base.status();
    c.rope_base = static_cast<float>(base.value());
  }
  {
    auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
    if (!eps.ok()) return eps.status();
    c.rms_eps = static_cast<float>(eps.value());
  }
  if (f.has_key(p + "rope.scaling.type")) {
    auto type = f.get_string(p + "rope.scaling.type");
    if (!type.ok()) return type.status();
    if (type.value() != "none" && !type.value().empty()) {
      return unsupported("rope scaling " + printable(type.value()) + " (" + p + "rope.scaling.type) is not supported");
    }
  }
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    return unsupported("tensor 'rope_freqs.weight' (Llama 3.1-style rope scaling) is not supported");
  }

  if (f.has_key(p + "vocab_size")) {
    FLASHSCOPE_RETURN_IF_ERROR(read_dim(f, p + "vocab_size", &c.vocab));
  } else {
    auto tokens = f.key_info("tokenizer.ggml.tokens");
    if (!tokens.ok()) {
      return corrupt("neither " + p + "vocab_size nor tokenizer.ggml.tokens is present: the vocabulary size is unknown");
    }
    if (tokens.value().count == 0 || tokens.value().count > (1u << 30)) {
      return corrupt("tokenizer.ggml.tokens has " + std::to_string(tokens.value().count) + " entries");
    }
    c.vocab = static_cast<int>(tokens.value().count);
  }
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;

  FLASHSCOPE_RETURN_IF_ERROR(c.validate());
  return c;
}

Status ModelConfig::validate() const {
  if (architecture != "llama") {
    return unsupported("model architecture " + printable(architecture) + " is not supported (supported: llama)");
  }
  const struct {
    const char* name;
    int value;
  } dims[] = {{"n_layers", n_layers}, {"hidden", hidden},   {"n_heads", n_heads},
              {"n_kv_heads", n_kv_heads}, {"head_dim", head_dim}, {"ffn", ffn},
              {"vocab", vocab},       {"context_length", context_length}, {"rope_dim", rope_dim}};
  for (const auto& d : dims) {
    if (d.value <= 0) return corrupt(std::string("model config: ") + d.name + " = " + std::to_string(d.value) + " must be positive");
  }
  if (n_heads % n_kv_heads != 0) {
    return corrupt("model config: head_count " + std::to_string(n_heads) + " is not a multiple of head_count_kv " +
                   std::to_string(n_kv_heads));
  }
  if (!supported_head_dim(head_dim)) {
    return unsupported("head_dim " + std::to_string(head_dim) + " is not supported by the attention kernels (64, 128)");
  }
  if (rope_dim > head_dim || rope_dim % 2 != 0) {
    return corrupt("model config: rope dimension_count " + std::to_string(rope_dim) +
                   " must be even and at most head_dim " + std::to_string(head_dim));
  }
  if (!(rope_base > 0.0f) || !std::isfinite(rope_base)) {
    return corrupt("model config: rope freq_base " + std::to_string(rope_base) + " must be positive and finite");
  }
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps)) {
    return corrupt("model config: layer_norm_rms_epsilon " + std::to_string(rms_eps) + " must be positive and finite");
  }
  return Status::ok_status();
}

namespace model {

Result<Weights> bind_weights(const GgufFile& file, const ModelConfig& c) {
  Weights w;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, "token_embd.weight", c.vocab, c.hidden, "hidden × vocab", &w.token_embd));
  if (!ggml_type_can_dequantize(w.token_embd.q.type)) {
    return unsupported(std::string("tensor 'token_embd.weight' has type ") + ggml_type_name(w.token_embd.q.type) +
                       ", whose rows cannot be looked up (dequantized)");
  }
  // Each layer binds 9 tensors: a block_count the file's tensors cannot
  // cover is refused before it sizes the layer table (2^23 layers asked
  // 3 GB of a 52 KB file).
  constexpr uint64_t kTensorsPerLayer = 9;
  if (static_cast<uint64_t>(c.n_layers) > file.tensors().size() / kTensorsPerLayer) {
    return corrupt(c.architecture + ".block_count " + std::to_string(c.n_layers) + " needs at least " +
                   std::to_string(kTensorsPerLayer * static_cast<uint64_t>(c.n_layers)) +
                   " tensors (9 per layer), but the file has " + std::to_string(file.tensors().size()));
  }
  try {
    w.layers.resize(static_cast<size_t>(c.n_layers));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the layer table");
  }
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"}) {
      if (file.find_tensor(b + bias) != nullptr) {
        return unsupported("tensor '" + b + bias + "': attention biases are not supported by the llama engine");
      }
    }
    FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "attn_norm.weight", c.hidden, &L.attn_norm));
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "attn_q.weight", q_dim, c.hidden, "hidden × heads·head_dim", &L.wq));
    FLASHSCOPE_RETURN_IF_ERROR(
        bind_matrix(file, b + "attn_k.weight", kv_dim, c.hidden, "hidden × kv_heads·head_dim", &L.wk));
    FLASHSCOPE_RETURN_IF_ERROR(
        bind_matrix(file, b + "attn_v.weight", kv_dim, c.hidden, "hidden × kv_heads·head_dim", &L.wv));
    FLASHSCOPE_RETURN_IF_ERROR(
        bind_matrix(file, b + "attn_output.weight", c.hidden, q_dim, "heads·head_dim × hidden", &L.wo));
    FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "ffn_norm.weight", c.hidden, &L.ffn_norm));
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "ffn_gate.weight", c.ffn, c.hidden, "hidden × ffn", &L.gate));
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "ffn_up.weight", c.ffn, c.hidden, "hidden × ffn", &L.up));
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "ffn_down.weight", c.hidden, c.ffn, "ffn × hidden", &L.down));
  }
  FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, "output_norm.weight", c.hidden, &w.output_norm));
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, "output.weight", c.vocab, c.hidden, "hidden × vocab", &w.output));
  }
  return w;
}

}  // namespace model
}  // namespace flashscope
