// Session: one conversation's cache and pending token; generate() runs one
// Reply (engine/reply.hpp has the loop and its rules, which BatchGenerator
// shares) from prefill to stop.
#include <string>
#include <utility>
#include <vector>

#include "engine/reply.hpp"
#include "flashscope/session.hpp"

namespace flashscope {

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

Result<GenerateStats> Session::generate(int keep, const std::vector<int32_t>& prompt_tokens,
                                        const GenerateParams& params, const TokenCallback& on_token) {
  if (keep < 0 || keep > n_tokens()) {
    return invalid_argument("generate: keep " + std::to_string(keep) + " of the session's " +
                            std::to_string(n_tokens()) + " tokens");
  }
  if (keep < n_tokens()) {
    if (!model_.loaded()) return invalid_argument("generate: the session has no model");
    FLASHSCOPE_RETURN_IF_ERROR(model::check_generate_params(params));
    if (prompt_tokens.empty()) return invalid_argument("generate: no prompt tokens to feed");
    if (keep + static_cast<int64_t>(prompt_tokens.size()) > capacity()) {
      return invalid_argument("generate: " + std::to_string(prompt_tokens.size()) + " prompt tokens after " +
                              std::to_string(keep) + " kept do not fit the " + std::to_string(capacity()) +
                              "-token context");
    }
    FLASHSCOPE_RETURN_IF_ERROR(truncate(keep));
  }
  return generate(prompt_tokens, params, on_token);
}

Result<GenerateStats> Session::generate(const std::vector<int32_t>& prompt_tokens, const GenerateParams& params,
                                        const TokenCallback& on_token) {
  if (!model_.loaded()) return invalid_argument("generate: the session has no model");
  model::Reply reply(*this, params, on_token);
  FLASHSCOPE_RETURN_IF_ERROR(reply.begin(prompt_tokens));
  FLASHSCOPE_RETURN_IF_ERROR(reply.prefill());
  while (reply.wants_token()) {
    auto id = reply.sample();
    if (!id.ok()) return id.status();
    if (!reply.accept(id.value())) break;
    FLASHSCOPE_RETURN_IF_ERROR(reply.decode());
  }
  return reply.finish();
}

}  // namespace flashscope
