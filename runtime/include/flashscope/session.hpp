// One conversation: a Session holds its KV cache and generates replies into
// it (GenerateParams, the token callback, why a reply stopped, its timing).
// See engine.hpp for the whole flow and for several sessions at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/model.hpp"
#include "flashscope/sampling.hpp"
#include "flashscope/status.hpp"

namespace flashscope {

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

  // Keeps the first `keep` tokens of tokens(), then generate(prompt_tokens)
  // (a chat turn: ChatFormat::next_turn's keep and feed). The checks come
  // first: an error before the prefill leaves the session unchanged.
  Result<GenerateStats> generate(int keep, const std::vector<int32_t>& prompt_tokens, const GenerateParams& params,
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
  friend struct model::Internal;  // generate() and BatchGenerator share its loop (engine/reply.hpp)

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

}  // namespace flashscope
