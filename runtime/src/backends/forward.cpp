// Sequence bookkeeping and Model's forward passes: the checks every backend
// shares, then the backend the model was loaded for (backends/backend.hpp).
#include <algorithm>
#include <new>
#include <string>
#include <utility>

#include "backends/backend.hpp"
#include "model/internal.hpp"
#include "model/model_impl.hpp"

namespace flashscope {

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
