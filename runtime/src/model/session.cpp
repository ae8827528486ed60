// Session: one conversation's cache and the generate loop.
//
//   feed = [pending] + prompt          one forward pass (prefill), last logits
//   loop:
//     cancelled → stop (the last token fed is in the cache, nothing pending)
//     id = sample(logits, recent tokens)
//     stop token → stop (kept pending, not shown)
//     text = stop-string filter(UTF-8 decoder(id))
//     a stop string matched → callback(id, text before it), stop
//     callback(id, text) → false: stop
//     cancelled, max_tokens or a full cache → stop (id kept pending)
//     forward([id]) → logits           (decode)
// The sampled token that ends the loop is never run through the model
// (nobody needs its logits); it is kept pending and fed first next time.
// Cancellation is checked on both sides of the forward pass, so a cancel()
// waits for at most one forward pass or one callback.
#include <algorithm>
#include <chrono>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/engine.hpp"
#include "model/stop_strings.hpp"

namespace flashscope {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Status check_params(const GenerateParams& p) {
  const SamplingParams& s = p.sampling;
  if (p.max_tokens < 0) return invalid_argument("generate: max_tokens must be >= 0");
  if (!(s.top_p > 0.0f)) return invalid_argument("generate: top_p must be > 0 (1 disables it)");
  if (s.min_p < 0.0f || s.min_p > 1.0f) return invalid_argument("generate: min_p must be in [0, 1]");
  if (!(s.repetition_penalty > 0.0f)) return invalid_argument("generate: repetition_penalty must be > 0 (1 disables it)");
  return check_stop_strings(p.stop_strings);
}

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kCallback: return "callback";
    case StopReason::kContextFull: return "context_full";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kCancelled: return "cancelled";
  }
  return "?";
}

Result<Session> Session::create(const Model& model, const SessionOptions& options) {
  if (!model.loaded()) return invalid_argument("Session::create: the model is not loaded");
  auto seq = model.new_sequence(options.max_tokens);
  if (!seq.ok()) return seq.status();
  Session s;
  s.model_ = model;
  s.seq_ = std::move(seq).value();
  return s;
}

std::vector<int32_t> Session::tokens() const {
  std::vector<int32_t> t = seq_.tokens();
  if (pending_ >= 0) t.push_back(pending_);
  return t;
}

int Session::n_tokens() const { return seq_.n_tokens() + (pending_ >= 0 ? 1 : 0); }
int Session::capacity() const { return seq_.capacity(); }

void Session::reset() {
  seq_.clear();
  pending_ = -1;
}

Status Session::truncate(int n) {
  if (n < 0 || n > n_tokens()) {
    return invalid_argument("truncate(" + std::to_string(n) + "): the session holds " + std::to_string(n_tokens()) +
                            " tokens");
  }
  if (n <= seq_.n_tokens()) {
    pending_ = -1;
    return seq_.truncate(n);
  }
  return Status::ok_status();  // n == n_tokens(): everything stays, pending included
}

Result<GenerateStats> Session::generate(const std::vector<int32_t>& prompt_tokens, const GenerateParams& params,
                                        const TokenCallback& on_token) {
  if (!model_.loaded()) return invalid_argument("generate: the session has no model");
  cancel_.requested.store(false, std::memory_order_relaxed);
  FLASHSCOPE_RETURN_IF_ERROR(check_params(params));
  std::vector<int32_t> feed;
  try {
    feed.reserve(prompt_tokens.size() + 1);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "generate: cannot allocate the prompt");
  }
  if (pending_ >= 0) feed.push_back(pending_);
  feed.insert(feed.end(), prompt_tokens.begin(), prompt_tokens.end());
  if (feed.empty()) return invalid_argument("generate: the prompt is empty and nothing is pending");

  GenerateStats stats;
  stats.prompt_tokens = static_cast<int>(feed.size());
  const std::vector<int32_t>& stops = params.stop_tokens.empty() ? model_.stop_tokens() : params.stop_tokens;
  const Tokenizer& tok = model_.tokenizer();
  Rng rng(params.sampling.seed);
  std::vector<float> logits;

  const Clock::time_point t0 = Clock::now();
  // forward() checks the fit and leaves the cache as it was on any error.
  FLASHSCOPE_RETURN_IF_ERROR(model_.forward(seq_, feed, {}, LogitsMode::kLast, &logits));
  pending_ = -1;
  stats.prefill_ms = ms_since(t0);
  stats.prefill_tokens_per_s = stats.prefill_ms > 0 ? 1000.0 * stats.prompt_tokens / stats.prefill_ms : 0.0;

  // The recent-token window of the repetition penalty: the conversation so far.
  std::vector<int32_t> recent = seq_.tokens();
  StreamDecoder decoder(tok);
  StopStringMatcher stop_strings(params.stop_strings);
  auto cancelled = [&] { return cancel_.requested.load(std::memory_order_relaxed); };
  stats.stop_reason = StopReason::kMaxTokens;
  int decode_steps = 0;
  Clock::time_point decode_t0 = Clock::now();

  for (int i = 0; i < params.max_tokens; ++i) {
    if (cancelled()) {
      stats.stop_reason = StopReason::kCancelled;
      break;
    }
    const int32_t id = sample(logits, params.sampling, rng, recent);
    if (i == 0) {
      stats.ttft_ms = ms_since(t0);
      decode_t0 = Clock::now();
    }
    ++stats.generated_tokens;
    pending_ = id;
    recent.push_back(id);
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
      stats.stop_reason = StopReason::kStopToken;
      stats.stop_token = id;
      break;
    }
    const std::string text = stop_strings.push(tok.is_control(id) ? std::string() : decoder.push(id));
    if (stop_strings.matched()) {
      stats.stop_reason = StopReason::kStopString;
      stats.stop_string = stop_strings.matched_index();
      if (on_token) on_token(TokenEvent{id, text, i});  // the text before the stop string
      break;
    }
    if (on_token && !on_token(TokenEvent{id, text, i})) {
      stats.stop_reason = StopReason::kCallback;
      break;
    }
    if (cancelled()) {
      stats.stop_reason = StopReason::kCancelled;
      break;
    }
    if (i + 1 == params.max_tokens) break;
    if (seq_.n_tokens() + 1 > seq_.capacity()) {
      stats.stop_reason = StopReason::kContextFull;
      break;
    }
    FLASHSCOPE_RETURN_IF_ERROR(model_.forward(seq_, {id}, {}, LogitsMode::kLast, &logits));
    pending_ = -1;
    ++decode_steps;
  }
  if (decode_steps > 0) {
    stats.decode_ms = ms_since(decode_t0);
    stats.decode_tokens_per_s = 1000.0 * decode_steps / stats.decode_ms;
  }
  // Held-back text: an incomplete character, and a tail that could have
  // begun a stop string (nothing after a match).
  std::string tail;
  if (stats.stop_reason != StopReason::kStopString) {
    tail = stop_strings.push(decoder.flush());
    tail += stop_strings.flush();
  }
  if (!tail.empty() && on_token) on_token(TokenEvent{-1, tail, stats.generated_tokens});
  return stats;
}

}  // namespace flashscope
