// Text generation on top of flashscope/model.hpp: sampling, a chat format,
// a Session that holds one conversation's KV cache, and a BatchGenerator
// that runs the replies of many sessions together (a game's characters).
//
//   auto model = flashscope::Model::load(path);
//   auto session = flashscope::Session::create(*model);
//   std::string prompt = flashscope::format_chatml({{"user", "Hi!"}}, true);
//   auto ids = model->tokenizer().encode(prompt, /*parse_special=*/true);
//   GenerateParams gp;                                   // greedy by default
//   auto stats = session->generate(ids, gp, [](const TokenEvent& e) {
//     std::fputs(std::string(e.text).c_str(), stdout);
//     return true;                                       // false stops
//   });
//
// Multi-turn: each generate() appends to the same cache, so only the new
// prompt tokens are prefilled. The last sampled token (often <|im_end|>) is
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

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/model.hpp"
#include "flashscope/status.hpp"

namespace flashscope {

// --- sampling ------------------------------------------------------------------

struct SamplingParams {
  // ≤ 0: greedy (argmax; every other field but repetition_penalty is ignored).
  float temperature = 0.0f;
  int top_k = 0;            // keep the k most likely tokens; ≤ 0: all
  float top_p = 1.0f;       // keep the smallest set with probability ≥ top_p; ≥ 1: all
  float min_p = 0.0f;       // drop tokens below min_p × the top probability; ≤ 0: none
  float repetition_penalty = 1.0f;  // > 1 discourages tokens among the recent ones (CTRL / HF rule)
  int repeat_last_n = 64;   // how many recent tokens the penalty looks at; < 0: all
  uint64_t seed = 0;
};

// A small, portable PRNG (splitmix64-seeded xoshiro256**): the same seed
// gives the same samples on every platform and compiler.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 bits

 private:
  uint64_t s_[4];
};

// Picks the next token from `logits` [vocab]. The steps, in order:
//   1. repetition penalty on the last repeat_last_n of recent_tokens: a
//      positive logit is divided by the penalty, a negative one multiplied;
//   2. temperature ≤ 0 → the argmax (the lowest id on ties);
//   3. logits / temperature, top_k, softmax, top_p (nucleus), min_p;
//   4. one draw from what is left, renormalized.
// Non-finite logits are treated as -inf; if every logit is -inf the argmax
// rule returns 0. logits must be non-empty.
int32_t sample(const std::vector<float>& logits, const SamplingParams& params, Rng& rng,
               const std::vector<int32_t>& recent_tokens);

// --- chat formatting --------------------------------------------------------------

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// SmolLM2's default system prompt (its template's, no final period).
inline constexpr const char* kSmolLMDefaultSystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

// ChatML as SmolLM2's template renders it: each message as
// "<|im_start|>{role}\n{content}<|im_end|>\n"; when the first message is not
// a system message, a system message with default_system comes first (none
// when default_system is empty); add_generation_prompt appends
// "<|im_start|>assistant\n". Encode the result with parse_special = true.
std::string format_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& default_system = kSmolLMDefaultSystemPrompt);

// format_chatml's text as token ids, with the framing encoded with special
// tokens and every message's content without (parse_special = false), so
// text a user typed can never become a control token such as <|im_end|>.
std::vector<int32_t> encode_chatml(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt,
                                   const std::string& default_system = kSmolLMDefaultSystemPrompt);

// The text that continues a ChatML conversation held in a Session after the
// assistant's reply: closes the reply when it did not end with <|im_end|>
// (reply_closed false), then the next user message and the generation prompt.
std::string chatml_next_turn(const std::string& user_content, bool reply_closed);

// The default system prompt written into a ChatML Jinja template (the text
// between "<|im_start|>system\n" and "<|im_end|>" in a string literal), or
// an empty string when the template has none.
std::string default_system_prompt_from_template(const std::string& chat_template);

// --- generation -------------------------------------------------------------------

struct GenerateParams {
  int max_tokens = 256;  // tokens to sample at most (stop tokens count)
  SamplingParams sampling;
  // Sampling one of these ends the reply; it is not passed to the callback.
  // Empty: the model's stop_tokens().
  std::vector<int32_t> stop_tokens;
  // The reply ends when its text contains one of these (non-empty, valid
  // UTF-8). The stop string and anything after it are not passed to the
  // callback; text that could be the start of one is held back until it
  // cannot (so the callback may see a token with empty text, and the held
  // text with a later token). The tokens that spelled it stay in the
  // session, like a stop token.
  std::vector<std::string> stop_strings;
};

// One generated token as the callback sees it. text is the complete UTF-8
// text this token finishes (may be empty while a character spans tokens;
// control tokens have none), valid during the callback only. After the last
// token, held-back bytes (an incomplete character) arrive once more with
// token = -1.
struct TokenEvent {
  int32_t token;
  std::string_view text;
  int index;  // 0 for the first generated token
};

// Returns false to stop generating.
using TokenCallback = std::function<bool(const TokenEvent&)>;

enum class StopReason : uint8_t {
  kMaxTokens,    // max_tokens reached
  kStopToken,    // a stop token was sampled
  kCallback,     // the callback returned false
  kContextFull,  // the cache has no room for another token
  kStopString,   // the text contains one of GenerateParams::stop_strings
  kCancelled,    // Session::cancel() was called during generate()
};
const char* stop_reason_name(StopReason r);

struct GenerateStats {
  int prompt_tokens = 0;     // tokens prefilled by this call (the pending token included)
  int generated_tokens = 0;  // tokens sampled (a final stop token included)
  double prefill_ms = 0.0;   // the prompt's forward pass
  double ttft_ms = 0.0;      // from the call to the first sampled token
  double decode_ms = 0.0;    // the one-token forward passes after the first token
  double prefill_tokens_per_s = 0.0;
  double decode_tokens_per_s = 0.0;  // forward passes per second of decode
  StopReason stop_reason = StopReason::kMaxTokens;
  int32_t stop_token = -1;   // the stop token sampled, for kStopToken
  int stop_string = -1;      // index into GenerateParams::stop_strings, for kStopString
};

struct SessionOptions {
  int max_tokens = 0;  // cache capacity; 0: the model's context length
};

class Session {
 public:
  // A session on `model` (shared, not copied) with an empty cache.
  static Result<Session> create(const Model& model, const SessionOptions& options = {});

  Session() = default;  // empty; exists for Result<Session>

  // Feeds prompt_tokens (after any pending token) and samples up to
  // max_tokens tokens, calling on_token for each (may be empty).
  // Errors: kInvalidArgument when there is nothing to feed, or it does not
  // fit the remaining context (the session is unchanged then), or the
  // params are malformed; errors from the model's forward pass pass through.
  Result<GenerateStats> generate(const std::vector<int32_t>& prompt_tokens, const GenerateParams& params,
                                 const TokenCallback& on_token);

  // Asks the generate() running on another thread (or in its own callback)
  // to stop: it returns after the token in progress (the prefill, a decode
  // step, or the callback) with StopReason::kCancelled. What was generated
  // stays in the session as after any other stop, so the next generate()
  // continues the conversation. Thread-safe and lock-free. Every generate()
  // starts uncancelled: a cancel() while none runs is forgotten.
  void cancel() { cancel_.requested.store(true, std::memory_order_relaxed); }

  // The conversation so far: cached tokens, then the pending token if any.
  std::vector<int32_t> tokens() const;
  int n_tokens() const;  // tokens().size()
  int capacity() const;
  // Forgets the conversation (cache and pending token).
  void reset();
  // Keeps the first n tokens of tokens() (edit, regenerate).
  Status truncate(int n);

  const Model& model() const { return model_; }

 private:
  friend struct model::Internal;  // generate() and BatchGenerator share its loop (model/reply.hpp)

  // std::atomic neither copies nor moves, and Result<Session> moves the
  // session; the flag's value moves with it (moving a session while another
  // thread cancels it is a race, as for any other member).
  struct CancelFlag {
    std::atomic<bool> requested{false};
    CancelFlag() = default;
    CancelFlag(CancelFlag&& o) noexcept : requested(o.requested.load()) {}
    CancelFlag& operator=(CancelFlag&& o) noexcept {
      requested.store(o.requested.load());
      return *this;
    }
  };

  Model model_;
  Sequence seq_;
  int32_t pending_ = -1;  // sampled but not yet run through the model
  CancelFlag cancel_;
};

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
