// Private side of flashscope/model.hpp: the loaded weights (views into the
// mapped GGUF) and what every sequence state has. The backends' entry points
// are in backends/backend.hpp; each backend derives its own Sequence::State.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/quant_matmul.hpp"
#include "flashscope/chat_template.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/tokenizer.hpp"

namespace flashscope {

namespace model {

// A weight matrix: a GGUF tensor [rows = ne[1], cols = ne[0]] viewed in its
// blocks. `tensor` is kept for row lookups (embeddings).
struct Matrix {
  const GgufTensor* tensor = nullptr;
  cpu::QuantMatrix q;  // type, rows, cols, row_bytes, data
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden], expanded to float at load (tiny)
  Matrix wq;                     // [n_heads·head_dim, hidden]
  Matrix wk;                     // [n_kv_heads·head_dim, hidden]
  Matrix wv;                     // [n_kv_heads·head_dim, hidden]
  Matrix wo;                     // [hidden, n_heads·head_dim]
  std::vector<float> ffn_norm;   // [hidden]
  Matrix gate;                   // [ffn, hidden]
  Matrix up;                     // [ffn, hidden]
  Matrix down;                   // [hidden, ffn]
};

struct Weights {
  Matrix token_embd;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [hidden]
  Matrix output;                   // [vocab, hidden]; token_embd when tied
};

// The CUDA backend's device side of a model: weights in bf16 on the device,
// the cuBLAS handle (forward_cuda.cpp). Opaque here.
struct CudaModel;

}  // namespace model

struct Model::Impl {
  GgufFile file;  // owns the mapping every Matrix points into
  ModelConfig config;
  ModelOptions options;
  Tokenizer tokenizer;
  std::string chat_template;
  std::shared_ptr<const ChatTemplate> parsed_chat_template;  // null when absent or not parsed
  Status chat_template_status;
  std::vector<int32_t> stop_tokens;
  model::Weights weights;
  uint64_t weight_bytes = 0;
  std::shared_ptr<model::CudaModel> cuda;  // Device::kCuda only
};

// What every backend's sequence state has; backends derive from it.
struct Sequence::State {
  virtual ~State() = default;
  virtual uint64_t cache_bytes() const = 0;

  const Model::Impl* owner = nullptr;  // forward() refuses a sequence of another model
  int capacity = 0;
  std::vector<int32_t> tokens;  // reserved to capacity at creation: appending never allocates
};

namespace model {

// Reads the weights the config calls for out of `file` and checks each
// tensor's presence, type and shape against the config.
Result<Weights> bind_weights(const GgufFile& file, const ModelConfig& config);

}  // namespace model
}  // namespace flashscope
