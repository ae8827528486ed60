// Private side of flashscope/model.hpp: the loaded weights (views into the
// mapped GGUF), the per-sequence state, and the backend entry points.
//
// Backends: Model::forward validates the call (the same checks for every
// backend) and hands it to the backend the model was loaded for. A backend
// provides new_state, forward and forward_batch, and its own subclass of
// Sequence::State. The CPU backend is forward_cpu.cpp; the CUDA backend
// (forward_cuda*.cpp, cuda_model.hpp) adds a load step that puts the
// weights on the device (Impl::cuda), and a state that holds device buffers
// and pages of the model's shared KV page pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/quant_matmul.hpp"
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

// Model::forward's checks and dispatch, for callers inside the library: the
// same, except that logits may be null with kLast / kAll on CUDA (they then
// stay on the device for cuda_sample_last).
Status run_forward(const Model::Impl& m, Sequence::State* st, const std::vector<int32_t>& tokens,
                   const std::vector<int32_t>& positions, LogitsMode mode, std::vector<float>* logits);
// forward()'s room check: kInvalidArgument saying how many tokens fit.
Status check_fit(const Sequence::State& st, size_t n);
// Model::forward_batch's checks (see model.hpp); the sequences' states in order.
Result<std::vector<Sequence::State*>> check_batch(const Model::Impl& m, const std::vector<Sequence*>& seqs,
                                                  const std::vector<int32_t>& tokens);

// The CPU backend.
Result<std::unique_ptr<Sequence::State>> cpu_new_state(const Model::Impl& m, int capacity);
// tokens/positions [n], already validated: ids in range, positions ≥ 0,
// st.tokens.size() + n ≤ st.capacity. Leaves st unchanged on error.
Status cpu_forward(const Model::Impl& m, Sequence::State& st, const int32_t* tokens, const int32_t* positions,
                   int n, LogitsMode mode, std::vector<float>* logits);
// One decode step of n sequences, already checked (check_batch): tokens[i]
// is appended to states[i]; logits [n, vocab] (null: none). Each row's
// numbers are the solo forward's, bit for bit. All or nothing.
Status cpu_forward_batch(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                         std::vector<float>* logits);

// The CUDA backend (forward_cuda.cpp; model/cuda_backend.hpp has its extras:
// device sampling and stats). cuda_load runs last in Model::from_gguf, on a
// fully checked Impl: it dequantizes every matrix to bf16 and uploads it.
// kUnsupported in a build without CUDA or on a machine without a device.
Result<std::shared_ptr<CudaModel>> cuda_load(const Model::Impl& m);
Result<std::unique_ptr<Sequence::State>> cuda_new_state(const Model::Impl& m, int capacity);
// As cpu_forward. Also accepts logits == nullptr with kLast / kAll: the
// logits then stay on the device for cuda_sample_last (no copy).
Status cuda_forward(const Model::Impl& m, Sequence::State& st, const int32_t* tokens, const int32_t* positions,
                    int n, LogitsMode mode, std::vector<float>* logits);
// As cpu_forward_batch (cuda_backend.hpp has the variant that samples on
// the device); rows agree with the solo forward within bf16 rounding.
Status cuda_forward_batch(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                          std::vector<float>* logits);

}  // namespace model
}  // namespace flashscope
