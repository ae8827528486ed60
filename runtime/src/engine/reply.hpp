// One reply of a session: Session::generate()'s loop cut where it calls the
// model, so that Session::generate() runs one reply alone and
// BatchGenerator runs many with one batched forward pass per step, and both
// follow the same rules, token for token:
//
//   begin(prompt)   the cancel flag cleared; params checked; feed =
//                   [pending] + prompt, checked to fit (errors: session unchanged)
//   prefill()       forward(feed), last logits kept for the sampler; pending cleared
//   while wants_token():            (max_tokens not reached; cancel() → kCancelled)
//     id = sample()                 (or a batched step's token for this reply)
//     accept(id)    id pending; stop token, stop string, callback's false,
//                   cancel(), max_tokens or a full cache → false (stop, id stays pending)
//     decode()      forward([id]) (or the batched step) → decoded(): pending cleared
//   finish()        stats; held-back text to the callback
//
// The sampled token that ends a reply is never run through the model; the
// session keeps it pending and feeds it first next time. Cancellation is
// checked on both sides of a forward pass, so a cancel() waits for at most
// one forward pass or one callback.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "engine/stop_strings.hpp"
#include "flashscope/session.hpp"

namespace flashscope::model {

// generate()'s checks of its params (kInvalidArgument naming the field).
Status check_generate_params(const GenerateParams& p);

class Reply {
 public:
  // params and on_token are copied (a batch keeps them past the caller's call).
  Reply(Session& session, const GenerateParams& params, TokenCallback on_token);

  Status begin(const std::vector<int32_t>& prompt_tokens);
  Status prefill();
  bool wants_token();
  Result<int32_t> sample();
  bool accept(int32_t id);
  Status decode();
  void decoded();
  GenerateStats finish();

  // What a batched step needs of this reply.
  Session& session() { return session_; }
  int32_t token() const { return token_; }  // the accepted token to feed next
  SampleInput sample_input() {
    return SampleInput{&params_.sampling, &rng_, &recent_, static_cast<size_t>(stats_.generated_tokens)};
  }

 private:
  using Clock = std::chrono::steady_clock;
  void stop(StopReason reason);

  Session& session_;
  GenerateParams params_;
  TokenCallback on_token_;
  std::vector<int32_t> feed_;    // pending + prompt, for prefill()
  std::vector<int32_t> recent_;  // the penalties' window: the conversation so far, this reply's tokens last
  std::vector<float> logits_;    // the last logits on the host (CPU models)
  GenerateStats stats_;
  Rng rng_;
  StreamDecoder decoder_;
  StopStringMatcher stop_strings_;
  Clock::time_point t0_, decode_t0_;
  int index_ = 0;         // tokens sampled so far (the next TokenEvent's index)
  int decode_steps_ = 0;
  int32_t token_ = -1;
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace flashscope::model
