// A request queue that feeds a BatchGenerator from any thread: what a server
// (flashscope-cli serve) or a game with many talking characters needs.
// Requests are token prompts; each runs in one of `parallel` sessions, and
// every running reply advances in the same batched step (continuous
// batching: a request submitted while others decode joins the next step,
// each reply finishes on its own and its session is free for the next
// request at once). Past `parallel`, requests wait in a bounded queue;
// past that, submit() refuses them.
//
//   auto q = flashscope::RequestQueue::create(model, {.parallel = 8, .max_queued = 32});
//   auto id = (*q)->submit(prompt_tokens, params,
//       [](const TokenEvent& e) { send(e.text); return true; },     // on the queue's thread
//       [](const Result<GenerateStats>& r) { close(r); });          // once, at the end
//   (*q)->cancel(*id);                                               // any thread, any time
//
// Each request starts from an empty session (no conversation is kept between
// requests); its reply follows Session::generate()'s rules, so a greedy
// request gives the tokens Session::generate() gives for the same prompt,
// whatever else runs beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "flashscope/engine.hpp"

namespace flashscope {

struct RequestQueueOptions {
  int parallel = 4;        // sessions decoded together (≥ 1)
  int max_queued = 16;     // requests that may wait for a session (≥ 0)
  int session_tokens = 0;  // each session's capacity (prompt + reply); 0: the model's context length
};

// Called once per request when it ends: its stats (stop_reason kCancelled
// for a cancelled one, also when it was cancelled before it started), or the
// error that stopped it.
using DoneCallback = std::function<void(const Result<GenerateStats>&)>;

struct RequestQueueStats {
  int queued = 0;           // waiting for a session
  int running = 0;          // in a session
  int parallel = 0;         // sessions
  int64_t submitted = 0;    // accepted by submit()
  int64_t rejected = 0;     // refused by submit() because the queue was full
  int64_t completed = 0;    // ended (any reason, errors included)
  int64_t cancelled = 0;    // ended by cancel()
  int64_t failed = 0;       // ended by an error
  int64_t prompt_tokens = 0;     // prefilled, over all requests
  int64_t generated_tokens = 0;  // sampled, over all requests
  int64_t steps = 0;        // batched steps run
  int kv_tokens = 0;        // tokens the sessions hold now
  int kv_pages = 0;         // the same in 64-token pages (the CUDA pool's page size)
};

class RequestQueue {
 public:
  // Starts the queue's thread, which runs every forward pass and every
  // callback. kInvalidArgument: no model, parallel < 1, max_queued < 0,
  // session_tokens < 0 or above the model's context length;
  // kOutOfMemory: the sessions could not be made.
  static Result<std::unique_ptr<RequestQueue>> create(const Model& model, const RequestQueueOptions& options = {});
  // Cancels what runs and waits, calls every request's on_done, stops the thread.
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Queues a reply to prompt_tokens; returns its id (1, 2, ...; never
  // reused). Thread-safe. on_token and on_done run on the queue's thread,
  // never after on_done; either may be empty. Refused, with nothing queued
  // and no callback called:
  //   kInvalidArgument  an empty prompt, one that leaves no room for a token
  //                     in a session (prompt_tokens.size() ≥ session_tokens()),
  //                     a token outside the vocabulary, malformed params
  //   kOutOfMemory      the queue is full (max_queued requests wait already):
  //                     try again later
  Result<uint64_t> submit(std::vector<int32_t> prompt_tokens, const GenerateParams& params, TokenCallback on_token,
                          DoneCallback on_done);

  // Stops request `id`: a waiting one never starts, a running one stops
  // after the token in progress; on_done follows with kCancelled. Frees its
  // session for the next request. Thread-safe. False when no request with
  // this id is waiting or running (finished, never submitted).
  bool cancel(uint64_t id);

  RequestQueueStats stats() const;  // thread-safe
  int session_tokens() const;       // each session's capacity
  const Model& model() const;

 private:
  struct Impl;
  explicit RequestQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashscope
