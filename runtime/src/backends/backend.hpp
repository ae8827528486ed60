// The backends' entry points and the front door every call goes through.
//
// Model::forward validates the call (the same checks for every backend,
// backends/forward.cpp) and hands it to the backend the model was loaded
// for. A backend provides new_state, forward and forward_batch, and its own
// subclass of Sequence::State (model/model_impl.hpp). The CPU backend is
// backends/cpu/forward_cpu.cpp; the CUDA backend (backends/cuda/) adds a
// load step that puts the weights on the device (Model::Impl::cuda), and a
// state that holds device buffers and pages of the model's shared KV page
// pool.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flashscope/model.hpp"
#include "flashscope/status.hpp"
#include "model/model_impl.hpp"

namespace flashscope::model {

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

// The CUDA backend (backends/cuda/: forward_cuda.cpp; cuda_backend.hpp has its extras:
// device sampling and stats). cuda_load runs last in Model::from_gguf, on a
// fully checked Impl: it uploads every matrix, in its GGUF blocks or as bf16
// (ModelOptions::weights). kUnsupported in a build without CUDA or on a
// machine without a device.
Result<std::shared_ptr<CudaModel>> cuda_load(const Model::Impl& m);
// What of a config the CUDA backend runs: kUnsupported naming the first
// family feature it cannot (architecture, rope factors, biases, windows).
// cuda_load calls it first.
Status cuda_check_config(const ModelConfig& c);
// The device bytes of a loaded CUDA model's weights (0 without one).
uint64_t cuda_weight_bytes(const Model::Impl& m);
Result<std::unique_ptr<Sequence::State>> cuda_new_state(const Model::Impl& m, int capacity);
// As cpu_forward. Also accepts logits == nullptr with kLast / kAll: the
// logits then stay on the device for cuda_sample_last (no copy).
Status cuda_forward(const Model::Impl& m, Sequence::State& st, const int32_t* tokens, const int32_t* positions,
                    int n, LogitsMode mode, std::vector<float>* logits);
// As cpu_forward_batch (cuda_backend.hpp has the variant that samples on
// the device); rows agree with the solo forward within bf16 rounding.
Status cuda_forward_batch(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                          std::vector<float>* logits);

}  // namespace flashscope::model
