// The engine's model calls (next_token.hpp): forward passes that keep their
// last logits where the sampler runs, and the samplers of both backends.
#include "engine/next_token.hpp"

#include <algorithm>
#include <cstddef>
#include <new>
#include <string>

#include "backends/backend.hpp"
#include "model/internal.hpp"

namespace flashscope::model {
namespace {

bool on_cuda(const Model::Impl& m) { return m.options.device == Device::kCuda; }

}  // namespace

Status forward_for_next(const Model& model, Sequence& seq, const std::vector<int32_t>& tokens,
                        std::vector<float>* host) {
  const Model::Impl* m = Internal::impl(model);
  if (m == nullptr) return invalid_argument("forward: the model is not loaded");
  return run_forward(*m, Internal::state(seq), tokens, {}, LogitsMode::kLast, on_cuda(*m) ? nullptr : host);
}

Result<int32_t> sample_next(const Model& model, Sequence& seq, const std::vector<float>& host,
                            const SamplingParams& params, Rng& rng, const std::vector<int32_t>& recent,
                            size_t generated) {
  const Model::Impl* m = Internal::impl(model);
  if (m == nullptr) return invalid_argument("sample: the model is not loaded");
  if (on_cuda(*m)) {
    Sequence::State* st = Internal::state(seq);
    if (st == nullptr) return invalid_argument("sample: the sequence is empty");
    return cuda_sample_last(*m, *st, params, rng, recent, generated);
  }
  if (host.empty()) return invalid_argument("sample: no logits");
  return sample(host, params, rng, recent, generated);
}

Status decode_batch_and_sample(const Model& model, const std::vector<Sequence*>& seqs,
                               const std::vector<int32_t>& tokens, const std::vector<SampleInput>& sampling,
                               std::vector<int32_t>* next, std::vector<float>* host, bool* forwarded) {
  *forwarded = false;
  const Model::Impl* m = Internal::impl(model);
  if (m == nullptr) return invalid_argument("forward_batch: the model is not loaded");
  auto states = check_batch(*m, seqs, tokens);
  if (!states.ok()) return states.status();
  const size_t n = seqs.size();
  if (sampling.size() != n) {
    return invalid_argument("forward_batch: " + std::to_string(sampling.size()) + " sampling rows for " +
                            std::to_string(n) + " sequences");
  }
  for (const SampleInput& s : sampling) {
    if (s.params == nullptr || s.rng == nullptr) return invalid_argument("forward_batch: a row has no params or Rng");
  }
  try {
    next->assign(n, -1);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "forward_batch: cannot allocate the tokens");
  }
  static const std::vector<int32_t> kNoRecent;
  auto recent = [&](size_t i) -> const std::vector<int32_t>& {
    return sampling[i].recent != nullptr ? *sampling[i].recent : kNoRecent;
  };

  if (on_cuda(*m)) {
    if (n == 1) {  // the sequence's own decode step (and graph); bit-equal to Session::generate's
      FLASHSCOPE_RETURN_IF_ERROR(forward_for_next(model, *seqs[0], tokens, nullptr));
      *forwarded = true;
      auto id = cuda_sample_last(*m, *states->front(), *sampling[0].params, *sampling[0].rng, recent(0),
                                 sampling[0].generated);
      if (!id.ok()) return id.status();
      (*next)[0] = id.value();
      return Status::ok_status();
    }
    FLASHSCOPE_RETURN_IF_ERROR(cuda_forward_batch_sample(*m, states->data(), tokens.data(), static_cast<int>(n),
                                                         sampling.data(), next->data()));
    *forwarded = true;
    return Status::ok_status();
  }

  if (host == nullptr) return invalid_argument("internal: no host logits for a CPU batch");
  FLASHSCOPE_RETURN_IF_ERROR(cpu_forward_batch(*m, states->data(), tokens.data(), static_cast<int>(n), host));
  *forwarded = true;
  const size_t V = static_cast<size_t>(m->config.vocab);
  std::vector<float> row;
  try {
    row.resize(V);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "forward_batch: cannot allocate a logits row");
  }
  for (size_t i = 0; i < n; ++i) {
    std::copy(host->begin() + static_cast<std::ptrdiff_t>(i * V), host->begin() + static_cast<std::ptrdiff_t>((i + 1) * V),
              row.begin());
    (*next)[i] = sample(row, *sampling[i].params, *sampling[i].rng, recent(i), sampling[i].generated);
  }
  return Status::ok_status();
}

}  // namespace flashscope::model
