// OpenAI request bodies → GenRequest (openai_request.hpp). The field rules
// are OpenAI's (temperature in [0, 2], top_p in (0, 1], at most 4 stop
// strings, n = 1 here, presence_penalty and frequency_penalty in [-2, 2]);
// the engine's own sampling knobs (top_k, min_p, repeat_penalty,
// repeat_last_n, dry_multiplier, dry_base, dry_allowed_length,
// dry_penalty_last_n: llama.cpp's server's names) and vLLM's ignore_eos are
// accepted as extensions, as llama.cpp and vLLM do. Absent fields keep what
// the caller put in GenRequest::params (the server: default_sampling).
#include "openai_request.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace flashscope::server {

namespace {

using nlohmann::json;

ApiError bad(std::string param, std::string message) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

std::string type_name(const json& v) { return v.type_name(); }

// Each reader leaves *out alone when the field is absent or null.
std::optional<ApiError> read_bool(const json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad(key, std::string("'") + key + "' must be a boolean, not " + type_name(*it));
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_number(const json& body, const char* key, double lo, double hi, bool lo_open,
                                    float* out, bool* given = nullptr) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad(key, std::string("'") + key + "' must be a number, not " + type_name(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
    return bad(key, std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") + json(lo).dump() + ", " +
                        json(hi).dump() + "], not " + it->dump());
  }
  *out = static_cast<float>(v);
  if (given) *given = true;
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out,
                                 bool* given = nullptr) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return bad(key, std::string("'") + key + "' must be an integer, not " +
                        (it->is_number() ? std::string("a fraction") : type_name(*it)));
  }
  // Unsigned values above int64 arrive as number_unsigned.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return bad(key, std::string("'") + key + "' must be at most " + std::to_string(hi));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                        "], not " + std::to_string(v));
  }
  *out = v;
  if (given) *given = true;
  return std::nullopt;
}

// The fields both endpoints share: sampling, stop, stream, n.
std::optional<ApiError> read_common(const json& body, GenRequest* out) {
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad("model", "'model' must be a string, not " + type_name(*it));
    out->model = it->get<std::string>();
  }
  // A field the body leaves out keeps the caller's value: the server starts
  // from default_sampling (the CLI's defaults), not OpenAI's temperature 1.
  SamplingParams& s = out->params.sampling;
  if (auto e = read_number(body, "temperature", 0.0, 2.0, false, &s.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0.0, 1.0, true, &s.top_p)) return e;
  if (auto e = read_number(body, "min_p", 0.0, 1.0, false, &s.min_p)) return e;
  if (auto e = read_number(body, "repeat_penalty", 0.0, 10.0, true, &s.repetition_penalty)) return e;
  int64_t top_k = s.top_k;
  if (auto e = read_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k)) return e;
  s.top_k = static_cast<int>(top_k);
  int64_t last_n = s.repeat_last_n;
  if (auto e = read_int(body, "repeat_last_n", -1, std::numeric_limits<int32_t>::max(), &last_n)) return e;
  s.repeat_last_n = static_cast<int>(last_n);
  // DRY under llama.cpp's server's names; dry_penalty_last_n as there: -1
  // the whole conversation, 0 off.
  if (auto e = read_number(body, "dry_multiplier", 0.0, 100.0, false, &s.dry_multiplier)) return e;
  if (auto e = read_number(body, "dry_base", 1.0, 100.0, false, &s.dry_base)) return e;
  int64_t dry_allowed = s.dry_allowed_length;
  if (auto e = read_int(body, "dry_allowed_length", 1, kDryMaxRun, &dry_allowed)) return e;
  s.dry_allowed_length = static_cast<int>(dry_allowed);
  int64_t dry_last_n = s.dry_last_n;
  if (auto e = read_int(body, "dry_penalty_last_n", -1, std::numeric_limits<int32_t>::max(), &dry_last_n)) return e;
  s.dry_last_n = static_cast<int>(dry_last_n);
  // OpenAI's additive penalties, over the reply's own tokens as OpenAI and
  // vLLM count them; repeat_penalty (the CTRL rule) is applied before them.
  if (auto e = read_number(body, "presence_penalty", -2.0, 2.0, false, &s.presence_penalty)) return e;
  if (auto e = read_number(body, "frequency_penalty", -2.0, 2.0, false, &s.frequency_penalty)) return e;
  int64_t seed = 0;
  if (auto e = read_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed,
                        &out->seed_given)) {
    return e;
  }
  s.seed = static_cast<uint64_t>(seed);
  int64_t n = 1;
  if (auto e = read_int(body, "n", 1, 128, &n)) return e;
  if (n != 1) return bad("n", "'n' must be 1: one choice per request");
  if (auto e = read_bool(body, "stream", &out->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (auto e = read_bool(*it, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    std::vector<std::string> stops;
    if (it->is_string()) {
      stops.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      if (it->size() > 4) return bad("stop", "'stop' may hold at most 4 strings");
      for (size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string()) {
          return bad("stop[" + std::to_string(i) + "]", "'stop' must hold strings, not " + type_name((*it)[i]));
        }
        stops.push_back((*it)[i].get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or an array of strings, not " + type_name(*it));
    }
    for (size_t i = 0; i < stops.size(); ++i) {
      if (stops[i].empty()) return bad("stop", "'stop' strings must not be empty");
    }
    out->params.stop_strings = std::move(stops);
  }
  int64_t max_tokens = 0;
  bool given = false;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    if (given) break;
    if (auto e = read_int(body, key, 1, std::numeric_limits<int32_t>::max(), &max_tokens, &given)) return e;
  }
  out->max_tokens_given = given;
  out->params.max_tokens = static_cast<int>(max_tokens);
  // vLLM's extension: only max_tokens ends the reply (benchmarks of a fixed length).
  bool ignore_eos = false;
  if (auto e = read_bool(body, "ignore_eos", &ignore_eos)) return e;
  if (ignore_eos) out->params.stop_tokens = {-1};  // a token never sampled: no stop token
  if (auto it = body.find("logprobs"); it != body.end() && !it->is_null()) {
    if (!(it->is_boolean() && !it->get<bool>())) return bad("logprobs", "'logprobs' is not supported by this server");
  }
  return std::nullopt;
}

// A message's content: a string, or an array of {"type": "text", "text"} parts.
std::optional<ApiError> read_content(const json& m, const std::string& where, std::string* out) {
  auto it = m.find("content");
  if (it == m.end()) return bad(where + ".content", "'" + where + ".content' is missing");
  if (it->is_null()) return std::nullopt;  // an assistant turn with tool calls only; rendered empty
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) {
    return bad(where + ".content", "'" + where + ".content' must be a string or an array of parts, not " +
                                       type_name(*it));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    const std::string pw = where + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) return bad(pw, "'" + pw + "' must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return bad(pw + ".type", "'" + pw + ".type' must be \"text\": this server reads text only");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return bad(pw + ".text", "'" + pw + ".text' must be a string");
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

nlohmann::json error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

std::optional<ApiError> parse_chat_request(const nlohmann::json& body, GenRequest* out) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  out->chat = true;
  auto msgs = body.find("messages");
  if (msgs == body.end()) return bad("messages", "'messages' is missing");
  if (!msgs->is_array()) return bad("messages", "'messages' must be an array, not " + type_name(*msgs));
  if (msgs->empty()) return bad("messages", "'messages' must hold at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(where, "'" + where + "' must be an object, not " + type_name(m));
    auto role = m.find("role");
    if (role == m.end()) return bad(where + ".role", "'" + where + ".role' is missing");
    if (!role->is_string()) return bad(where + ".role", "'" + where + ".role' must be a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant") {
      return bad(where + ".role", "'" + where + ".role' must be one of system, developer, user, assistant; not '" +
                                      role->get<std::string>() + "'");
    }
    ChatMessage cm;
    cm.role = std::move(r);
    if (auto e = read_content(m, where, &cm.content)) return e;
    out->messages.push_back(std::move(cm));
  }
  return read_common(body, out);
}

std::optional<ApiError> parse_completion_request(const nlohmann::json& body, GenRequest* out) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  out->chat = false;
  auto p = body.find("prompt");
  if (p == body.end()) return bad("prompt", "'prompt' is missing");
  const json* prompt = &*p;
  // A list holding one prompt is one prompt; a list of token ids is a prompt too.
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    prompt = &(*prompt)[0];
  }
  if (prompt->is_string()) {
    out->prompt = prompt->get<std::string>();
    if (out->prompt.empty()) return bad("prompt", "'prompt' must not be empty");
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    out->prompt_is_ids = true;
    for (size_t i = 0; i < prompt->size(); ++i) {
      const json& t = (*prompt)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return bad("prompt[" + std::to_string(i) + "]", "'prompt' token ids must be non-negative integers");
      }
      out->prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else {
    return bad("prompt", "'prompt' must be a non-empty string, a list of one string, or a list of token ids");
  }
  if (auto it = body.find("echo"); it != body.end() && !it->is_null()) {
    if (!(it->is_boolean() && !it->get<bool>())) return bad("echo", "'echo' is not supported by this server");
  }
  if (auto it = body.find("suffix"); it != body.end() && !it->is_null()) {
    return bad("suffix", "'suffix' is not supported by this server");
  }
  return read_common(body, out);
}

const char* finish_reason(StopReason r) {
  switch (r) {
    case StopReason::kStopToken:
    case StopReason::kStopString:
    case StopReason::kCallback:
    case StopReason::kCancelled:
      return "stop";
    case StopReason::kMaxTokens:
    case StopReason::kContextFull:
      return "length";
  }
  return "stop";
}

}  // namespace flashscope::server
