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
#include "model/query_tap.hpp"

namespace flashscope {

namespace model {

// A weight matrix: rows [row0, row0 + q.rows) of a GGUF tensor [ne[1] rows,
// cols = ne[0]] viewed in its blocks; q.data points at row row0. A fused
// tensor (phi3's attn_qkv, ffn_up) is bound as several views of itself.
// `tensor` is kept for row lookups (embeddings: dequantize_rows(*tensor, row0 + r, ...)).
struct Matrix {
  const GgufTensor* tensor = nullptr;
  int64_t row0 = 0;
  cpu::QuantMatrix q;  // type, rows, cols, row_bytes, data
};

// One layer's tensors. Vectors are expanded to float at load (tiny); an
// empty vector is a piece the model's config does not have (ModelConfig:
// qkv_bias, qk_norm, post_norms).
struct LayerWeights {
  std::vector<float> attn_norm;      // [hidden]                    attn_norm.weight
  Matrix wq;                         // [n_heads·head_dim, hidden]  attn_q.weight (phi3: rows of attn_qkv)
  Matrix wk;                         // [n_kv_heads·head_dim, hidden]
  Matrix wv;                         // [n_kv_heads·head_dim, hidden]
  Matrix wo;                         // [hidden, n_heads·head_dim]  attn_output.weight
  std::vector<float> bq, bk, bv;     // [n_heads·head_dim], [n_kv_heads·head_dim] ×2: attn_q/k/v.bias
  std::vector<float> bo;             // [hidden] attn_output.bias (optional, llama only)
  std::vector<float> q_norm, k_norm; // [head_dim] attn_q_norm / attn_k_norm.weight, per head
  std::vector<float> post_attn_norm; // [hidden] post_attention_norm.weight (gemma3)
  std::vector<float> ffn_norm;       // [hidden]
  Matrix gate;                       // [ffn, hidden]  (phi3: rows [0, ffn) of ffn_up)
  Matrix up;                         // [ffn, hidden]  (phi3: rows [ffn, 2·ffn) of ffn_up)
  Matrix down;                       // [hidden, ffn]
  std::vector<float> post_ffn_norm;  // [hidden] post_ffw_norm.weight (gemma3)
};

struct Weights {
  Matrix token_embd;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [hidden]
  Matrix output;                   // [vocab, hidden]; token_embd when tied
  // [rope_dim / 2] rope_freqs.weight (Llama 3.x): pair i's frequency is
  // divided by rope_freqs[i]; empty when the file has none.
  std::vector<float> rope_freqs;
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
  SamplingDefaults sampling_defaults;
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
  // The query rows an attention capture armed (attention_capture.hpp); null
  // while none is armed, and then the forward does nothing for it.
  std::unique_ptr<model::QueryTap> q_tap;
};

namespace model {

// Reads the weights the config calls for out of `file` and checks each
// tensor's presence, type and shape against the config.
Result<Weights> bind_weights(const GgufFile& file, const ModelConfig& config);

}  // namespace model
}  // namespace flashscope
