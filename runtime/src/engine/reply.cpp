// Reply: the rules of one generate() call (see reply.hpp), shared by
// Session::generate() and BatchGenerator.
#include "engine/reply.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <string>
#include <utility>

#include "backends/backend.hpp"
#include "engine/next_token.hpp"
#include "model/internal.hpp"

namespace flashscope::model {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status check_generate_params(const GenerateParams& p) {
  const SamplingParams& s = p.sampling;
  if (p.max_tokens < 0) return invalid_argument("generate: max_tokens must be >= 0");
  if (!(s.top_p > 0.0f)) return invalid_argument("generate: top_p must be > 0 (1 disables it)");
  if (s.min_p < 0.0f || s.min_p > 1.0f) return invalid_argument("generate: min_p must be in [0, 1]");
  if (!(s.repetition_penalty > 0.0f)) return invalid_argument("generate: repetition_penalty must be > 0 (1 disables it)");
  if (!(s.presence_penalty >= -2.0f && s.presence_penalty <= 2.0f))
    return invalid_argument("generate: presence_penalty must be in [-2, 2] (0 disables it)");
  if (!(s.frequency_penalty >= -2.0f && s.frequency_penalty <= 2.0f))
    return invalid_argument("generate: frequency_penalty must be in [-2, 2] (0 disables it)");
  if (!(s.dry_multiplier >= 0.0f && std::isfinite(s.dry_multiplier)))
    return invalid_argument("generate: dry_multiplier must be finite and >= 0 (0 disables it)");
  if (!(s.dry_base >= 1.0f && std::isfinite(s.dry_base))) return invalid_argument("generate: dry_base must be finite and >= 1");
  if (s.dry_allowed_length < 1) return invalid_argument("generate: dry_allowed_length must be >= 1");
  return check_stop_strings(p.stop_strings);
}

Reply::Reply(Session& session, const GenerateParams& params, TokenCallback on_token)
    : session_(session),
      params_(params),
      on_token_(std::move(on_token)),
      rng_(params.sampling.seed),
      decoder_(Internal::model(session).tokenizer()),
      stop_strings_(params.stop_strings) {}

Status Reply::begin(const std::vector<int32_t>& prompt_tokens) {
  if (!session_.model().loaded()) return invalid_argument("generate: the session has no model");
  Internal::cancel_flag(session_).store(false, std::memory_order_relaxed);
  FLASHSCOPE_RETURN_IF_ERROR(check_generate_params(params_));
  const int32_t pending = Internal::pending(session_);
  try {
    feed_.reserve(prompt_tokens.size() + 1);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "generate: cannot allocate the prompt");
  }
  if (pending >= 0) feed_.push_back(pending);
  feed_.insert(feed_.end(), prompt_tokens.begin(), prompt_tokens.end());
  if (feed_.empty()) return invalid_argument("generate: the prompt is empty and nothing is pending");
  Sequence::State* st = Internal::state(Internal::sequence(session_));
  if (st == nullptr) return invalid_argument("generate: the session has no sequence");
  FLASHSCOPE_RETURN_IF_ERROR(check_fit(*st, feed_.size()));
  stats_.prompt_tokens = static_cast<int>(feed_.size());
  t0_ = Clock::now();
  return Status::ok_status();
}

Status Reply::prefill() {
  Sequence& seq = Internal::sequence(session_);
  const Clock::time_point start = Clock::now();
  // The forward pass checks the fit again and leaves the cache as it was on any error.
  FLASHSCOPE_RETURN_IF_ERROR(forward_for_next(session_.model(), seq, feed_, &logits_));
  Internal::pending(session_) = -1;
  stats_.prefill_ms = ms_since(start);
  stats_.prefill_tokens_per_s = stats_.prefill_ms > 0 ? 1000.0 * stats_.prompt_tokens / stats_.prefill_ms : 0.0;
  try {
    recent_ = seq.tokens();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "generate: cannot allocate the recent tokens");
  }
  stats_.stop_reason = StopReason::kMaxTokens;
  decode_t0_ = Clock::now();
  return Status::ok_status();
}

void Reply::stop(StopReason reason) {
  stats_.stop_reason = reason;
  stopped_ = true;
}

bool Reply::wants_token() {
  if (stopped_) return false;
  if (index_ >= params_.max_tokens) {
    stopped_ = true;  // kMaxTokens
    return false;
  }
  if (Internal::cancel_flag(session_).load(std::memory_order_relaxed)) {
    stop(StopReason::kCancelled);  // the last token fed is in the cache, nothing is pending
    return false;
  }
  return true;
}

Result<int32_t> Reply::sample() {
  return sample_next(session_.model(), Internal::sequence(session_), logits_, params_.sampling, rng_, recent_,
                     static_cast<size_t>(stats_.generated_tokens));
}

bool Reply::accept(int32_t id) {
  const int i = index_;
  if (i == 0) {
    stats_.ttft_ms = ms_since(t0_);
    decode_t0_ = Clock::now();
  }
  ++stats_.generated_tokens;
  Internal::pending(session_) = id;
  recent_.push_back(id);
  const std::vector<int32_t>& stops =
      params_.stop_tokens.empty() ? session_.model().stop_tokens() : params_.stop_tokens;
  if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
    stats_.stop_token = id;
    stop(StopReason::kStopToken);
    return false;
  }
  const Tokenizer& tok = session_.model().tokenizer();
  const std::string text = stop_strings_.push(tok.is_control(id) ? std::string() : decoder_.push(id));
  if (stop_strings_.matched()) {
    stats_.stop_string = stop_strings_.matched_index();
    stop(StopReason::kStopString);
    if (on_token_) on_token_(TokenEvent{id, text, i});  // the text before the stop string
    return false;
  }
  if (on_token_ && !on_token_(TokenEvent{id, text, i})) {
    stop(StopReason::kCallback);
    return false;
  }
  if (Internal::cancel_flag(session_).load(std::memory_order_relaxed)) {
    stop(StopReason::kCancelled);
    return false;
  }
  ++index_;
  if (index_ == params_.max_tokens) {
    stopped_ = true;  // kMaxTokens
    return false;
  }
  const Sequence& seq = Internal::sequence(session_);
  if (seq.n_tokens() + 1 > seq.capacity()) {
    stop(StopReason::kContextFull);
    return false;
  }
  token_ = id;
  return true;
}

Status Reply::decode() {
  FLASHSCOPE_RETURN_IF_ERROR(forward_for_next(session_.model(), Internal::sequence(session_), {token_}, &logits_));
  decoded();
  return Status::ok_status();
}

void Reply::decoded() {
  Internal::pending(session_) = -1;
  ++decode_steps_;
}

GenerateStats Reply::finish() {
  if (finished_) return stats_;
  finished_ = true;
  if (decode_steps_ > 0) {
    stats_.decode_ms = ms_since(decode_t0_);
    stats_.decode_tokens_per_s = 1000.0 * decode_steps_ / stats_.decode_ms;
  }
  // Held-back text: an incomplete character, and a tail that could have
  // begun a stop string (nothing after a match).
  std::string tail;
  if (stats_.stop_reason != StopReason::kStopString) {
    tail = stop_strings_.push(decoder_.flush());
    tail += stop_strings_.flush();
  }
  if (!tail.empty() && on_token_) on_token_(TokenEvent{-1, tail, stats_.generated_tokens});
  return stats_;
}

}  // namespace flashscope::model
