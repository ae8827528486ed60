// The CUDA backend's extras beyond the backend functions of backends/backend.hpp:
// sampling on the device from the logits a forward pass left there (what
// Session and BatchGenerator use through engine/next_token.hpp, so a decode
// step copies back a token id, not a row of logits), and the counters that
// say how decode steps ran (CUDA graph or plain launches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "flashscope/sampling.hpp"

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
  // Batched decode steps (cuda_total_stats only; a sequence counts the steps it was in):
  uint64_t batch_steps = 0;             // batched steps (one forward of several sequences)
  uint64_t batch_rows = 0;              // sequences over all batched steps
  uint64_t batch_graph_replays = 0;     // batched steps run by cudaGraphLaunch
  uint64_t batch_graph_captures = 0;    // batched-step graphs instantiated
  // Sampling from logits left on the device (cuda_total_stats only):
  uint64_t device_sampled_tokens = 0;   // by the device sampler: one token id copied back
  uint64_t host_sampled_tokens = 0;     // the row downloaded and sample() run on the host (top_k 0 or > 1024)
  // Steps enqueued (plainly or into a graph) with the fused few-token GEMMs (cuda_total_stats only):
  uint64_t fused_step_enqueues = 0;
  // Of those, steps with Gemma's post-norms folded into the next GEMM's staging (no add_rms_norm launches):
  uint64_t norm_fused_enqueues = 0;
  // Of those, steps whose QKV GEMMs ran rope_append themselves (kRopeHeads: no rope_append launches):
  uint64_t rope_fused_enqueues = 0;
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
                                 const std::vector<int32_t>& recent_tokens, size_t generated);

// How one sequence of a batched step picks its next token.
struct SampleInput {
  const SamplingParams* params = nullptr;
  Rng* rng = nullptr;
  const std::vector<int32_t>* recent = nullptr;  // the penalties' window source
  size_t generated = 0;                          // its last `generated` are the reply's own
};

// cuda_forward_batch, then every row sampled on the device (the batched
// sampler: one launch, each row over one or more CTAs; sample_row's rules
// and draws) in the same pass over the stream, one wait at the end: next[i]
// for states[i].
// The logits never leave the device. All or nothing: on any error no
// sequence has moved.
Status cuda_forward_batch_sample(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                                 const SampleInput* sampling, int32_t* next);

}  // namespace flashscope::model
