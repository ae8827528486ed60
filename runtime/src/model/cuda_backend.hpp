// The CUDA backend's extras beyond the backend pair of model_impl.hpp:
// sampling on the device from the logits a forward pass left there, and the
// counters that say how decode steps ran (CUDA graph or plain launches).
//
// Not public API yet: Session samples on the host from the logits row that
// Model::forward returns. Wiring cuda_sample_last into Session needs a
// public entry (e.g. a Model call that runs one step and samples) so that
// decode copies 4 bytes instead of a vocab-sized row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/engine.hpp"
#include "model/model_impl.hpp"

namespace flashscope::model {

// How a CUDA sequence's forward passes ran. Capture failures are not errors:
// the step runs with plain launches and the sequence stops trying graphs.
struct CudaForwardStats {
  uint64_t forwards = 0;                // cuda_forward calls that succeeded
  uint64_t decode_steps = 0;            // of those, one-token steps with logits (graph candidates)
  uint64_t graph_replays = 0;           // decode steps run by cudaGraphLaunch
  uint64_t graph_captures = 0;          // graphs instantiated (a new one after buffers move or the KV bucket grows)
  uint64_t graph_capture_failures = 0;  // captures that failed (the step ran plainly)
  uint64_t plain_decode_steps = 0;      // decode steps run with plain launches
  std::string last_capture_error;       // why the last capture failed, empty if none did
};

// One sequence's counters (zeros for a state of another backend).
CudaForwardStats cuda_stats(const Sequence::State& st);
// The sums over every CUDA sequence of the process since it started: for
// tests and diagnostics, which cannot reach a Sequence's state.
CudaForwardStats cuda_total_stats();

// Picks the next token from the last logits row of st's latest forward pass
// (kLast, or kAll's last row) with sample()'s rules and draws, on the device:
// the same Rng state gives the token sample() would give on those logits.
// Falls back to downloading the row and sample() when the device sampler
// cannot keep that many candidates (top_k 0 or > 1024 over a large
// vocabulary). kInvalidArgument when no logits are pending (each row can be
// sampled once: the device sampler works in place). Differs from sample()
// in one corner: a row of only non-finite logits consumes a draw.
Result<int32_t> cuda_sample_last(const Model::Impl& m, Sequence::State& st, const SamplingParams& params, Rng& rng,
                                 const std::vector<int32_t>& recent_tokens);

}  // namespace flashscope::model
