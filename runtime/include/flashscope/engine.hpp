// Text generation on top of flashscope/model.hpp: sampling (sampling.hpp),
// a chat format (chat.hpp), a Session that holds one conversation's KV cache
// (session.hpp), and here a BatchGenerator that runs the replies of many
// sessions together (a game's characters). This header includes the others.
//
//   auto model = flashscope::Model::load(path);
//   auto session = flashscope::Session::create(*model);
//   auto format = flashscope::ChatFormat::for_model(*model);  // the model's chat template
//   auto turn = format.next_turn(session->tokens(), {{"user", "Hi!"}});
//   GenerateParams gp;                                   // greedy by default
//   auto stats = session->generate(turn->keep, turn->feed, gp, [](const TokenEvent& e) {
//     std::fputs(std::string(e.text).c_str(), stdout);
//     return true;                                       // false stops
//   });
//
// Multi-turn: each generate() appends to the same cache, so only the new
// prompt tokens are prefilled (ChatFormat::next_turn renders the whole
// conversation and says what the cache lacks). The last sampled token (often <|im_end|>) is
// not run through the model when generation stops; the session keeps it as
// "pending" and the next generate() feeds it first, so tokens() always
// reads as the whole conversation.
//
// Stopping: a reply ends at max_tokens, a stop token, a stop string, the
// callback's false, a full cache, or Session::cancel() from another thread;
// GenerateStats::stop_reason says which, and in every case the session
// holds what was generated and the next generate() continues from it.
//
// Sampling runs where the model runs: on CUDA the logits stay on the device
// and a decode step copies back one token id, not a row of logits (the same
// Rng draws pick the same tokens as sample() on the host).
//
// Many sessions at once (one model):
//   std::vector<BatchRequest> reqs = {{&npc_a, prompt_a, params_a, on_a}, {&npc_b, prompt_b, params_b, on_b}};
//   auto results = flashscope::generate_batch(reqs);   // each prefilled, then decoded together
// or, one token per frame, BatchGenerator::add() and step().
#pragma once

#include <memory>
#include <vector>

#include "flashscope/chat.hpp"
#include "flashscope/model.hpp"
#include "flashscope/sampling.hpp"
#include "flashscope/session.hpp"
#include "flashscope/status.hpp"

namespace flashscope {

// --- several sessions at once ------------------------------------------------------

// Replies of several sessions of one model, decoded together: each step
// feeds the last token of every running reply to the model in one batched
// forward pass (Model::forward_batch: the weights are read once for all of
// them) and samples the next token of each with its own params and Rng.
// Each reply follows Session::generate()'s rules exactly (stop tokens and
// strings, callback, max_tokens, a full cache, cancel()) and finishes on its
// own; greedy replies are the tokens Session::generate() would give (on
// CUDA up to bf16 rounding: a batch GEMM may sum in another order).
//
//   BatchGenerator batch;
//   for (Npc& npc : npcs) batch.add(npc.session, npc.prompt, npc.params, npc.on_token);
//   while (!batch.done()) batch.step();              // e.g. one step per frame
//   batch.result(0)->generated_tokens;
//
// The callbacks run on the thread that calls step(), one reply after
// another; Session::cancel() may come from any thread. A session must not
// be used elsewhere while its reply runs. Move-only.
class BatchGenerator {
 public:
  BatchGenerator();
  ~BatchGenerator();
  BatchGenerator(BatchGenerator&&) noexcept;
  BatchGenerator& operator=(BatchGenerator&&) noexcept;
  BatchGenerator(const BatchGenerator&) = delete;
  BatchGenerator& operator=(const BatchGenerator&) = delete;

  // Queues a reply of `session` to prompt_tokens (after its pending token),
  // as Session::generate() would run it; the prompt is prefilled by the
  // next step(). Returns the reply's id: 0, 1, ... in the order of add().
  // kInvalidArgument, with the session unchanged and nothing queued: the
  // session is empty (no model), already has a reply running here, or is
  // on another model than the replies already added; the params are
  // malformed; there is nothing to feed, or it does not fit the session's
  // remaining context.
  Result<int> add(Session& session, const std::vector<int32_t>& prompt_tokens, const GenerateParams& params,
                  TokenCallback on_token);

  // Advances every running reply by one token: prefills the replies added
  // since the last step (one forward pass each; each samples its first
  // token), then runs one batched decode step for every reply that goes on.
  // A reply whose prefill or sampling fails finishes with that error (its
  // session as Session::generate() leaves it after the same error) and the
  // others go on. When the batched step itself fails (a device error,
  // memory), every reply in it finishes with that error, the sessions keep
  // what they had generated, and step() returns the error too.
  Status step();

  bool done() const;     // no reply is queued or running
  int running() const;   // replies queued or running
  int size() const;      // replies added
  // Whether reply `id` has finished, and how: its stats, or the error that
  // stopped it. result() of a reply still running (or an unknown id) is
  // kInvalidArgument.
  bool finished(int id) const;
  Result<GenerateStats> result(int id) const;

  // Asks reply `id` to stop, as Session::cancel() on its session does: it
  // finishes with StopReason::kCancelled at its next check (after its
  // prefill, or after the token in progress). False for an unknown,
  // released or finished id. Same thread as step() (or its callbacks); from
  // another thread, call Session::cancel() on the reply's session.
  bool cancel(int id);
  // Frees what a finished reply holds (its prompt, logits, stats): a
  // generator that runs for days (a server) keeps only the replies in
  // flight. Afterwards finished(id) is true and result(id) is
  // kInvalidArgument; ids are never reused. False, with nothing freed, for
  // a reply still running or an unknown or already released id.
  bool release(int id);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One session's part of generate_batch(): what Session::generate() takes.
struct BatchRequest {
  Session* session = nullptr;
  std::vector<int32_t> prompt_tokens;
  GenerateParams params;
  TokenCallback on_token;
};

// Runs the requests' replies to the end together (BatchGenerator::add for
// each, then step() until done) and returns one result per request, in
// order: its stats, or the error that stopped it (a request add() refuses
// gets that error and never runs; the others do).
// kInvalidArgument, before anything runs: no requests, a null session, a
// session listed twice, or sessions of different models.
Result<std::vector<Result<GenerateStats>>> generate_batch(const std::vector<BatchRequest>& requests);

}  // namespace flashscope
