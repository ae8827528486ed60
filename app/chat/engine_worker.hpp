// The engine's own thread: it owns the Model and the Session (one
// conversation's KV cache) and answers requests one at a time, so the UI
// thread never waits on a forward pass.
//
//   UI thread                          worker thread
//   submit(request) ──► queue ──────►  pop → sync the cache → Session::generate
//   snapshot(&s)   ◄── mutex-guarded ◄─ token callback appends text, counts tokens
//   stop()         ──► atomic id ────►  the token callback returns false
//
// Requests carry the whole conversation to answer (messages, system prompt
// first). The worker renders it with the model's chat template (ChatFormat:
// built-in ChatML when the template cannot be used, plain completion when
// the model has none) and keeps what its cache already holds, so a
// follow-up prefills only the new turn, while regenerate and "edit the last
// message" simply send a shorter or changed conversation: the cache is cut
// back where it diverges.
//
// Stop is not queued behind the running answer: stop() records the newest
// request id it cancels and the token callback compares against it, so a
// stop that races a request being picked up is never lost.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/attention_capture.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/model.hpp"
#include "flashscope/trace_records.hpp"

namespace flashscope::app {

struct EngineRequest {
  enum class Kind : uint8_t {
    kGenerate,  // answer `messages`
    kReset,     // forget the KV cache (new chat, loaded conversation)
    kLoadModel, // load `model_path` instead; the old model stays when it fails
    kCaptureAttention,  // trace the model's own attention again (set_attention_target)
  };
  Kind kind = Kind::kGenerate;
  uint64_t id = 0;  // > 0, increasing; the snapshot says which request its answer belongs to
  std::vector<ChatMessage> messages;
  GenerateParams params;
  std::string model_path;  // kLoadModel
};

enum class EngineState : uint8_t {
  kLoading,     // the model is being loaded
  kIdle,        // ready for a request
  kPrefilling,  // running the prompt through the model
  kGenerating,  // sampling tokens
  kFailed,      // the model could not be loaded (load_error says why)
};
const char* engine_state_name(EngineState s);

// What the UI reads each frame: a copy, so it can be drawn without a lock.
struct EngineSnapshot {
  EngineState state = EngineState::kLoading;
  std::string load_error;

  // The model, once loaded.
  std::string model_path;
  std::string model_name;  // the file name without .gguf, else general.name
  bool on_gpu = false;     // the model runs on the CUDA engine
  ModelConfig config;
  uint64_t weight_bytes = 0;
  uint64_t device_weight_bytes = 0;  // the weights' device memory on the CUDA engine
  WeightFormat weights = WeightFormat::kAuto;  // as loaded: kQuantized or kBf16
  uint64_t kv_bytes_per_token = 0;  // K and V of all layers, bf16
  std::string default_system_prompt;  // from the model's chat template
  SamplingParams sampling = engine_sampling_defaults();  // default_sampling: the library's with the model's on top
  ChatFormatKind chat_format = ChatFormatKind::kCompletion;  // how conversations become prompts
  std::string chat_format_notice;     // why the model's template is not used; empty when it is
  bool chat_format_fallback = false;  // a template could not be used (not just a model without one)
  int context_capacity = 0;           // tokens the session's cache holds
  uint64_t model_generation = 0;      // +1 each time a model is loaded (the cache starts empty)

  // A model switch (load_model): the file being loaded, empty when none;
  // why the last switch failed (the previous model still runs), empty when it did not.
  std::string switching_to;
  std::string switch_error;

  // The current or latest answer.
  uint64_t answer_id = 0;       // the request it answers; 0: none yet
  std::string answer_text;      // streamed so far (complete UTF-8 characters only)
  bool answer_done = false;     // finished, stopped or failed
  std::string answer_error;     // set when generate failed
  int answer_tokens = 0;        // tokens sampled so far
  int answer_prompt_tokens = 0; // tokens this answer prefills (after the reused prefix)
  int answer_reused_tokens = 0; // prefix kept from the cache
  double answer_live_tokens_per_s = 0.0;  // since the first token, while generating
  GenerateStats stats;          // valid when answer_done and no error

  int context_used = 0;  // tokens in the cache now
  uint64_t requests_done = 0;
  // The model's own attention over the conversation (attention_capture.hpp),
  // captured after each answer and when the traced layer or head changes:
  // the latest trace (null: none yet), a serial that grows with each, what
  // it shows, and why the latest attempt failed (empty when it did not).
  std::shared_ptr<const Trace> attention_trace;
  uint64_t attention_serial = 0;
  std::string attention_note;
  std::string attention_error;
  // The key position of the latest answer's first decode step (its rows from
  // there on are the answer's tokens, one step each; -1: no answer since the
  // cache was last reset).
  int attention_answer_first = -1;
  // The CUDA engine's decode steps of the traced head, each traced again
  // alone as its step ran (HeadCapture::decode_steps); null or empty on the
  // CPU, whose trace's rows are its decode steps' own numbers.
  std::shared_ptr<const std::vector<Trace>> attention_steps;
  // Every q-head of the traced layer in numbers (entropy, first-token,
  // previous-token and window mass), head order; empty before the first capture.
  std::vector<HeadSummary> attention_heads;
};

class EngineWorker {
 public:
  struct Options {
    std::string model_path;
    int threads = 0;  // CPU threads per forward pass; 0: the runtime's load-aware auto
    WeightFormat weights = WeightFormat::kAuto;  // how the GPU keeps the weights
    int context = 0;  // KV cache tokens; 0: the model's context length
    std::string chat_template_path;  // a Jinja template file instead of the model's; empty: the model's
  };

  EngineWorker() = default;
  ~EngineWorker();  // cancels, then joins the thread
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Starts the thread (call one start() once), which loads the model first
  // (state kLoading → kIdle or kFailed).
  void start(const Options& options);
  // Starts the thread on a model already loaded (tests: synthetic models),
  // with chat_template (Jinja source) instead of the model's when not empty.
  void start(Model model, int context = 0, std::string chat_template = {});

  // Queues a request. Never blocks on the engine.
  void submit(EngineRequest request);
  // Cancels the running answer and drops queued ones; the partial answer stays in the snapshot.
  void stop();
  // stop() then kReset.
  void reset(uint64_t id);
  // stop() then kLoadModel: the file is loaded on the worker thread while
  // the UI keeps drawing; until it is, the old model answers nothing more.
  void load_model(uint64_t id, std::string path);

  // The layer and q-head the model's own attention is captured for (the
  // dashboard's pickers); a change captures again now, without an answer.
  void set_attention_target(int layer, int head);

  void snapshot(EngineSnapshot* out) const;
  // True while a request is queued or running (a model switch included).
  bool busy() const;

 private:
  WeightFormat weights_ = WeightFormat::kAuto;  // set by start() before the thread runs
  void run(std::string path, Model preloaded, std::string template_path, std::string template_text);
  // Loads `path` (or takes `preloaded`) with its session and chat format and
  // makes it the worker's model; the error, with the old model kept, else "".
  std::string load(const std::string& path, Model preloaded, const std::string& template_path,
                   std::string template_text);
  void process(const EngineRequest& request);
  void generate(const EngineRequest& request);
  void capture_attention();

  std::thread thread_;
  mutable std::mutex mutex_;  // guards queue_, snap_, quit_
  std::condition_variable wake_;
  std::deque<EngineRequest> queue_;
  EngineSnapshot snap_;
  bool quit_ = false;
  uint64_t newest_submitted_ = 0;
  bool processing_ = false;  // a request taken from queue_ is being processed
  std::atomic<uint64_t> cancel_through_{0};  // requests with id ≤ this stop at their next token
  std::atomic<int> attention_layer_{0}, attention_head_{0};  // set_attention_target
  std::atomic<bool> attention_queued_{false};                // a kCaptureAttention request waits

  int threads_ = 0;  // set before the thread starts
  int context_ = 0;

  // Worker-thread only.
  Model model_;
  Session session_;
  ChatFormat format_;
};

}  // namespace flashscope::app
