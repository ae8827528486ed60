// ModelConfig from GGUF metadata, and the tensor table checked against it.
//
// Every number comes from the file's "{arch}.*" keys (llama.cpp's names);
// nothing about a particular model is assumed. Optional keys and their
// defaults follow llama.cpp: head_count_kv = head_count, key_length = hidden
// / head_count, rope.dimension_count = head_dim, rope.freq_base = 10000,
// vocab_size = the tokenizer's token count. What each family adds follows
// llama.cpp's loader (src/llama-model.cpp) and its converter
// (convert_hf_to_gguf.py), which is what decides what a GGUF means:
//   llama   Q/K rows permuted by the converter → RoPE on adjacent pairs;
//           Llama 3.x's rope scaling is the rope_freqs.weight tensor; Q/K/V/O
//           biases optional.
//   qwen2   attn_q/k/v.bias required; NeoX RoPE (rotate halves).
//   qwen3   attn_q_norm/attn_k_norm required; NeoX RoPE.
//   gemma3  the converter already adds Gemma's 1 to every *norm.weight
//           (RMSNorm's (1 + w)), so norms are plain RMSNorm here; embeddings
//           × √hidden; NeoX RoPE; attention.sliding_window W with
//           set_swa_pattern(6): layers 5, 11, 17, ... global, the others a
//           window of W keys with RoPE base rope.freq_base_swa (else 10000)
//           and no rope scaling; softmax scale 1/√head_dim (llama.cpp takes
//           query_pre_attn_scalar = head_dim, which the file does not carry;
//           the 62-layer 27B uses 1/√(hidden / heads)).
//   phi3    attn_qkv.weight [hidden, q + 2·kv] (or separate Q/K/V) and
//           ffn_up.weight [hidden, 2·ffn] (gate rows first, then up), bound
//           as row views; NeoX RoPE. attention.sliding_window is ignored,
//           as llama.cpp does (it disables Phi-3's window); LongRoPE files
//           (rope_factors_long/short) are refused.
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
// type the matrix products accept; out views rows [row0, row0 + view_rows)
// (view_rows 0: all of them).
Status bind_matrix(const GgufFile& file, const std::string& name, int64_t rows, int64_t cols, const char* what,
                   model::Matrix* out, int64_t row0 = 0, int64_t view_rows = 0) {
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
                       "Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
  }
  out->tensor = t;
  out->row0 = row0;
  out->q.type = t->type;
  out->q.rows = view_rows > 0 ? view_rows : rows;
  out->q.cols = cols;
  out->q.row_bytes = t->row_size();
  out->q.data = t->data + static_cast<uint64_t>(row0) * out->q.row_bytes;
  return Status::ok_status();
}

// A vector (norm weight, bias) [dim], expanded to float; `missing` is the
// error's explanation when the tensor is absent.
Status bind_vector(const GgufFile& file, const std::string& name, int64_t dim, const char* what,
                   std::vector<float>* out, const std::string& missing = "") {
  const GgufTensor* t = file.find_tensor(name);
  if (t == nullptr) return corrupt("tensor '" + name + "' is missing" + missing);
  if (t->n_dims != 1 || t->ne[0] != dim) {
    return corrupt("tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(dim) +
                   "] (" + what + ")");
  }
  if (t->type != GgmlType::kF32 && t->type != GgmlType::kF16 && t->type != GgmlType::kBF16) {
    const char* type = ggml_type_name(t->type);
    return unsupported("vector tensor '" + name + "' has type " + (type ? type : "?") +
                       " (supported: F32, F16, BF16)");
  }
  try {
    out->assign(static_cast<size_t>(dim), 0.0f);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "cannot allocate norm weights"};
  }
  return dequantize_rows(*t, 0, 1, out->data());
}

Status read_float(const GgufFile& f, const std::string& key, float* out) {
  auto v = f.get_float(key);
  if (!v.ok()) return v.status();
  *out = static_cast<float>(v.value());
  return Status::ok_status();
}

struct ArchName {
  Architecture arch;
  const char* name;
};
constexpr ArchName kArchNames[] = {{Architecture::kLlama, "llama"},
                                   {Architecture::kQwen2, "qwen2"},
                                   {Architecture::kQwen3, "qwen3"},
                                   {Architecture::kGemma3, "gemma3"},
                                   {Architecture::kPhi3, "phi3"}};

// gemma3's layer pattern (llama.cpp set_swa_pattern(6)): every sixth layer is global.
constexpr int kGemma3SwaPattern = 6;
constexpr float kGemma3SwaRopeBase = 10000.0f;

std::string head_dims_list() {
  std::string s;
  for (int d : {32, 64, 80, 96, 128, 256})
    if (supported_head_dim(d)) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

}  // namespace

const char* architecture_name(Architecture arch) {
  for (const ArchName& a : kArchNames)
    if (a.arch == arch) return a.name;
  return "?";
}

const char* supported_architectures() { return "llama, qwen2, qwen3, gemma3, phi3"; }

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch.ok()) return arch.status();
  c.architecture = arch.value();
  bool known = false;
  for (const ArchName& a : kArchNames) {
    if (c.architecture == a.name) {
      c.arch = a.arch;
      known = true;
    }
  }
  if (!known) {
    return unsupported("model architecture " + printable(c.architecture) + " is not supported (supported: " +
                       supported_architectures() + ")");
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
  if (f.has_key(p + "rope.freq_base")) FLASHSCOPE_RETURN_IF_ERROR(read_float(f, p + "rope.freq_base", &c.rope_base));
  FLASHSCOPE_RETURN_IF_ERROR(read_float(f, p + "attention.layer_norm_rms_epsilon", &c.rms_eps));
  if (f.has_key(p + "rope.scaling.type")) {
    auto type = f.get_string(p + "rope.scaling.type");
    if (!type.ok()) return type.status();
    if (type.value() == "linear") {
      float factor = 0.0f;
      FLASHSCOPE_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.factor", &factor));
      if (!(factor > 0.0f) || !std::isfinite(factor)) {
        return corrupt(p + "rope.scaling.factor " + std::to_string(factor) + " must be positive and finite");
      }
      c.rope_scale = 1.0f / factor;
    } else if (type.value() != "none" && !type.value().empty()) {
      return unsupported("rope scaling " + printable(type.value()) + " (" + p +
                         "rope.scaling.type) is not supported (supported: none, linear, and Llama 3's "
                         "rope_freqs.weight factors)");
    }
  }
  c.rope_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;

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

  // Family features (see the top of this file).
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  switch (c.arch) {
    case Architecture::kLlama:
      c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
      break;
    case Architecture::kQwen2:
      c.rope_style = RopeStyle::kHalves;
      c.qkv_bias = true;
      break;
    case Architecture::kQwen3:
      c.rope_style = RopeStyle::kHalves;
      c.qk_norm = true;
      break;
    case Architecture::kGemma3:
      c.rope_style = RopeStyle::kHalves;
      c.qk_norm = true;
      c.post_norms = true;
      c.ffn_activation = FfnActivation::kGeluTanh;
      c.embed_scale = std::sqrt(static_cast<float>(c.hidden));
      if (c.n_layers == 62) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden / c.n_heads));
      if (f.has_key(p + "attention.sliding_window")) {
        auto w = f.get_int(p + "attention.sliding_window");
        if (!w.ok()) return w.status();
        if (w.value() < 0 || w.value() > (1 << 30)) {
          return corrupt(p + "attention.sliding_window = " + std::to_string(w.value()) + " is not a valid window");
        }
        c.sliding_window = static_cast<int>(w.value());
      }
      break;
    case Architecture::kPhi3:
      c.rope_style = RopeStyle::kHalves;
      if (f.find_tensor("rope_factors_long.weight") != nullptr || f.find_tensor("rope_factors_short.weight") != nullptr) {
        return unsupported("phi3 LongRoPE (rope_factors_long/short.weight) is not supported");
      }
      break;
  }

  // Each layer has at least 6 tensors: a block_count the file cannot cover
  // is refused before it sizes the layer table.
  if (static_cast<uint64_t>(c.n_layers) > f.tensors().size() / 6) {
    return corrupt(p + "block_count " + std::to_string(c.n_layers) + " needs at least " +
                   std::to_string(6 * static_cast<uint64_t>(c.n_layers)) + " tensors (6 per layer), but the file has " +
                   std::to_string(f.tensors().size()));
  }
  try {
    c.layers.resize(static_cast<size_t>(c.n_layers));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the layer table");
  }
  float swa_base = kGemma3SwaRopeBase;
  if (f.has_key(p + "rope.freq_base_swa")) FLASHSCOPE_RETURN_IF_ERROR(read_float(f, p + "rope.freq_base_swa", &swa_base));
  for (size_t l = 0; l < c.layers.size(); ++l) {
    LayerConfig& L = c.layers[l];
    L.rope_base = c.rope_base;
    L.rope_scale = c.rope_scale;
    const bool swa = c.sliding_window > 0 && (l + 1) % kGemma3SwaPattern != 0;
    if (swa) {
      L.window = c.sliding_window;
      L.rope_base = swa_base;
      L.rope_scale = 1.0f;
    }
  }

  FLASHSCOPE_RETURN_IF_ERROR(c.validate());
  return c;
}

LayerConfig ModelConfig::layer(int l) const {
  if (l >= 0 && static_cast<size_t>(l) < layers.size()) return layers[static_cast<size_t>(l)];
  LayerConfig L;
  L.rope_base = rope_base;
  L.rope_scale = rope_scale;
  return L;
}

Status ModelConfig::validate() const {
  bool known = false;
  for (const ArchName& a : kArchNames) known = known || (architecture == a.name && arch == a.arch);
  if (!known) {
    return unsupported("model architecture " + printable(architecture) + " is not supported (supported: " +
                       supported_architectures() + ")");
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
    return unsupported("head_dim " + std::to_string(head_dim) + " is not supported by the attention kernels (" +
                       head_dims_list() + ")");
  }
  if (rope_dim > head_dim || rope_dim % 2 != 0) {
    return corrupt("model config: rope dimension_count " + std::to_string(rope_dim) +
                   " must be even and at most head_dim " + std::to_string(head_dim));
  }
  if (!(rope_base > 0.0f) || !std::isfinite(rope_base)) {
    return corrupt("model config: rope freq_base " + std::to_string(rope_base) + " must be positive and finite");
  }
  if (!(rope_scale > 0.0f) || !std::isfinite(rope_scale)) {
    return corrupt("model config: rope scale " + std::to_string(rope_scale) + " must be positive and finite");
  }
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps)) {
    return corrupt("model config: layer_norm_rms_epsilon " + std::to_string(rms_eps) + " must be positive and finite");
  }
  if (!(embed_scale > 0.0f) || !std::isfinite(embed_scale) || !(attn_scale >= 0.0f) || !std::isfinite(attn_scale)) {
    return corrupt("model config: embedding and attention scales must be finite and positive");
  }
  if (sliding_window < 0) return corrupt("model config: sliding_window must not be negative");
  // A window as long as the context never binds; one longer is a file that
  // contradicts itself (llama.cpp would silently attend to everything).
  if (sliding_window > context_length) {
    return corrupt(architecture + ".attention.sliding_window " + std::to_string(sliding_window) +
                   " is larger than " + architecture + ".context_length " + std::to_string(context_length));
  }
  if (!layers.empty() && layers.size() != static_cast<size_t>(n_layers)) {
    return corrupt("model config: " + std::to_string(layers.size()) + " layer entries for " +
                   std::to_string(n_layers) + " layers");
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerConfig& L = layers[l];
    if (L.window < 0 || L.window > context_length || !(L.rope_base > 0.0f) || !std::isfinite(L.rope_base) ||
        !(L.rope_scale > 0.0f) || !std::isfinite(L.rope_scale)) {
      return corrupt("model config: layer " + std::to_string(l) + " has window " + std::to_string(L.window) +
                     ", rope base " + std::to_string(L.rope_base) + " (window in [0, context], base positive)");
    }
  }
  return Status::ok_status();
}

namespace model {

Result<Weights> bind_weights(const GgufFile& file, const ModelConfig& c) {
  Weights w;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const std::string arch = c.architecture;
  FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, "token_embd.weight", c.vocab, c.hidden, "hidden × vocab", &w.token_embd));
  if (!ggml_type_can_dequantize(w.token_embd.q.type)) {
    return unsupported(std::string("tensor 'token_embd.weight' has type ") + ggml_type_name(w.token_embd.q.type) +
                       ", whose rows cannot be looked up (dequantized)");
  }
  // Each layer binds at least 6 tensors (phi3's fused ones; 9 otherwise): a
  // block_count the file's tensors cannot cover is refused before it sizes
  // the layer table (2^23 layers asked 3 GB of a 52 KB file).
  constexpr uint64_t kTensorsPerLayer = 6;
  if (static_cast<uint64_t>(c.n_layers) > file.tensors().size() / kTensorsPerLayer) {
    return corrupt(c.architecture + ".block_count " + std::to_string(c.n_layers) + " needs at least " +
                   std::to_string(kTensorsPerLayer * static_cast<uint64_t>(c.n_layers)) +
                   " tensors (6 per layer), but the file has " + std::to_string(file.tensors().size()));
  }
  try {
    w.layers.resize(static_cast<size_t>(c.n_layers));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate the layer table");
  }
  const std::string needs_qk_norm = " (" + arch + " normalizes Q and K per head)";
  const std::string needs_post = " (" + arch + " normalizes each block's output)";
  const std::string needs_bias = " (" + arch + " has Q, K and V biases)";
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    if (c.qkv_bias) {
      FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "attn_q.bias", q_dim, "heads·head_dim", &L.bq, needs_bias));
      FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "attn_k.bias", kv_dim, "kv_heads·head_dim", &L.bk, needs_bias));
      FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "attn_v.bias", kv_dim, "kv_heads·head_dim", &L.bv, needs_bias));
    } else {
      for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
        if (file.find_tensor(b + bias) != nullptr) {
          return unsupported("tensor '" + b + bias + "': " + arch + " models have no Q/K/V biases" +
                             (c.arch == Architecture::kLlama ? " (or all three from layer 0 on)" : ""));
        }
      }
    }
    if (file.find_tensor(b + "attn_output.bias") != nullptr) {
      if (c.arch != Architecture::kLlama) {
        return unsupported("tensor '" + b + "attn_output.bias': " + arch + " models have no output bias");
      }
      FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "attn_output.bias", c.hidden, "hidden", &L.bo));
    }
    FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "attn_norm.weight", c.hidden, "hidden", &L.attn_norm));
    if (c.arch == Architecture::kPhi3 && file.find_tensor(b + "attn_qkv.weight") != nullptr) {
      const std::string qkv = b + "attn_qkv.weight";
      const int64_t rows = q_dim + 2 * kv_dim;
      const char* what = "hidden × (heads + 2·kv_heads)·head_dim";
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, qkv, rows, c.hidden, what, &L.wq, 0, q_dim));
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, qkv, rows, c.hidden, what, &L.wk, q_dim, kv_dim));
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, qkv, rows, c.hidden, what, &L.wv, q_dim + kv_dim, kv_dim));
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_matrix(file, b + "attn_q.weight", q_dim, c.hidden, "hidden × heads·head_dim", &L.wq));
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_matrix(file, b + "attn_k.weight", kv_dim, c.hidden, "hidden × kv_heads·head_dim", &L.wk));
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_matrix(file, b + "attn_v.weight", kv_dim, c.hidden, "hidden × kv_heads·head_dim", &L.wv));
    }
    FLASHSCOPE_RETURN_IF_ERROR(
        bind_matrix(file, b + "attn_output.weight", c.hidden, q_dim, "heads·head_dim × hidden", &L.wo));
    if (c.qk_norm) {
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_vector(file, b + "attn_q_norm.weight", c.head_dim, "head_dim", &L.q_norm, needs_qk_norm));
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_vector(file, b + "attn_k_norm.weight", c.head_dim, "head_dim", &L.k_norm, needs_qk_norm));
    }
    if (c.post_norms) {
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_vector(file, b + "post_attention_norm.weight", c.hidden, "hidden", &L.post_attn_norm, needs_post));
      FLASHSCOPE_RETURN_IF_ERROR(
          bind_vector(file, b + "post_ffw_norm.weight", c.hidden, "hidden", &L.post_ffn_norm, needs_post));
    }
    FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, b + "ffn_norm.weight", c.hidden, "hidden", &L.ffn_norm));
    if (c.arch == Architecture::kPhi3) {
      const std::string up = b + "ffn_up.weight";
      const int64_t ffn = c.ffn;
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, up, 2 * ffn, c.hidden, "hidden × 2·ffn (gate, up)", &L.gate, 0, ffn));
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, up, 2 * ffn, c.hidden, "hidden × 2·ffn (gate, up)", &L.up, ffn, ffn));
    } else {
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "ffn_gate.weight", c.ffn, c.hidden, "hidden × ffn", &L.gate));
      FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "ffn_up.weight", c.ffn, c.hidden, "hidden × ffn", &L.up));
    }
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, b + "ffn_down.weight", c.hidden, c.ffn, "ffn × hidden", &L.down));
  }
  FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, "output_norm.weight", c.hidden, "hidden", &w.output_norm));
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(bind_matrix(file, "output.weight", c.vocab, c.hidden, "hidden × vocab", &w.output));
  }
  if (c.rope_freq_factors) {
    FLASHSCOPE_RETURN_IF_ERROR(bind_vector(file, "rope_freqs.weight", c.rope_dim / 2, "rope dimension_count / 2",
                                           &w.rope_freqs));
    for (size_t i = 0; i < w.rope_freqs.size(); ++i) {
      if (!(w.rope_freqs[i] > 0.0f) || !std::isfinite(w.rope_freqs[i])) {
        return corrupt("tensor 'rope_freqs.weight'[" + std::to_string(i) + "] = " + std::to_string(w.rope_freqs[i]) +
                       " is not a positive frequency factor");
      }
    }
  }
  return w;
}

}  // namespace model
}  // namespace flashscope
