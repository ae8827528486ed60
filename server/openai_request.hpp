// The bodies of POST /v1/chat/completions and /v1/completions read into
// what the engine takes, with OpenAI's rules for each field; anything
// malformed is an ApiError naming the field ("messages[2].role",
// "temperature"), which the server answers as a 400 in OpenAI's shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashscope/engine.hpp"

namespace flashscope::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the field at fault; empty: none
  std::string code;   // empty: null
};

// {"error": {"message", "type", "param", "code"}} as OpenAI writes it.
nlohmann::json error_json(const ApiError& e);

struct GenRequest {
  bool chat = true;
  std::string model;
  std::vector<ChatMessage> messages;  // chat
  std::string prompt;                 // completions: text
  std::vector<int32_t> prompt_ids;    // completions: token ids instead of text
  bool prompt_is_ids = false;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  GenerateParams params;              // max_tokens 0 until the server knows the room left
  bool max_tokens_given = false;
  bool seed_given = false;
};

// body: the parsed JSON (the server reports a body that is not JSON itself).
// Sampling fields the body leaves out keep out->params.sampling's values:
// set it to the defaults first (the server: default_sampling of the model).
std::optional<ApiError> parse_chat_request(const nlohmann::json& body, GenRequest* out);
std::optional<ApiError> parse_completion_request(const nlohmann::json& body, GenRequest* out);

// OpenAI's finish_reason for a reply that ended this way: "stop" (a stop
// token or string), "length" (max_tokens, a full context).
const char* finish_reason(StopReason r);

}  // namespace flashscope::server
