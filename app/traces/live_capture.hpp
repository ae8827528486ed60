// Captures for the chat: after each answer (and once when the model has
// loaded) a trace of a prefill with the model's attention shape, run on a
// thread of its own so the UI never waits on it. One capture at a time; a
// request made while one runs waits, and a newer request replaces it (only
// the latest answer matters).
//
// The inputs are synthetic (synthetic_problem.hpp), so the trace shows the
// model's shape — heads, GQA ratio, head_dim, the conversation's length —
// and the kernels' behaviour on it, not the model's own attention (the
// engine worker captures that after each answer; these stand in before the
// first answer and where that capture fails). The note of every result says so.
#pragma once

#include <future>
#include <optional>
#include <string>

#include "flashscope/model.hpp"
#include "traces/capture.hpp"

namespace flashscope::app {

struct LiveCaptureJob {
  CaptureRequest request;
  std::string provenance;  // "live · after answer 3"
  std::string note;        // what the inputs are
};

struct LiveCaptureResult {
  CaptureOutcome outcome;
  std::string provenance, note;
};

// The prefill a chat capture traces: the model's heads and head_dim, a
// causal prefill of the conversation's length clamped to [min_len, max_len]
// (a handful of tokens makes a one-tile grid; thousands take the CPU
// seconds), and the words that say all of this.
LiveCaptureJob chat_capture_job(const ModelConfig& config, const std::string& model_name, int conversation_tokens,
                                int head, const std::string& provenance);

class LiveCapture {
 public:
  LiveCapture() = default;
  ~LiveCapture();  // waits for a running capture
  LiveCapture(const LiveCapture&) = delete;
  LiveCapture& operator=(const LiveCapture&) = delete;

  void request(LiveCaptureJob job);
  // Once per frame: true (and *out set) when a capture has finished; starts the waiting request.
  bool poll(LiveCaptureResult* out);
  bool busy() const { return running_.valid() || pending_.has_value(); }

 private:
  void launch(LiveCaptureJob job);

  std::future<LiveCaptureResult> running_;
  std::optional<LiveCaptureJob> pending_;
};

}  // namespace flashscope::app
