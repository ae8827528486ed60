// How the engine (Session, BatchGenerator) runs the model to pick tokens,
// wherever the model is: on CUDA the last logits stay on the device and the
// device sampler copies back one token id per sequence; on the CPU they come
// back as floats and sample() picks from them. Either way the same Rng
// draws pick the same token from the same logits (cuda_backend.hpp, for the
// one corner where the device sampler differs).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "flashscope/model.hpp"
#include "flashscope/sampling.hpp"

namespace flashscope::model {

// Runs `tokens` (a prompt, or the one token to decode) through seq and keeps
// the last token's logits where sample_next reads them: on the device for a
// CUDA model (nothing copied), in *host for a CPU model. Model::forward's
// checks and errors; seq is unchanged on error.
Status forward_for_next(const Model& model, Sequence& seq, const std::vector<int32_t>& tokens,
                        std::vector<float>* host);

// The next token from those logits, by sample()'s rules and draws (the
// last `generated` of recent are the reply's own).
Result<int32_t> sample_next(const Model& model, Sequence& seq, const std::vector<float>& host,
                            const SamplingParams& params, Rng& rng, const std::vector<int32_t>& recent,
                            size_t generated);

// One batched decode step (Model::forward_batch's checks and semantics),
// then the next token of each sequence: (*next)[i] for seqs[i], sampled
// with sampling[i]. On CUDA the logits never leave the device (a batch of
// one takes the sequence's own decode path, its CUDA graph included).
// *forwarded says whether the sequences took their tokens: an error with
// *forwarded true came from the sampling after the step.
Status decode_batch_and_sample(const Model& model, const std::vector<Sequence*>& seqs,
                               const std::vector<int32_t>& tokens, const std::vector<SampleInput>& sampling,
                               std::vector<int32_t>* next, std::vector<float>* host, bool* forwarded);

}  // namespace flashscope::model
