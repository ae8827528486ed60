// A chat as the app keeps it: the system prompt, the sampling settings and
// the messages with each answer's statistics, and its JSON file form.
//
// The UI owns one Conversation and edits it directly; the engine worker
// never sees it, only the ChatMessage list prompt_messages() builds from it
// for each request, so editing or loading a conversation can never race the
// engine.
//
// File format (version 1), pretty-printed UTF-8 JSON:
//   { "format": "flashscope-conversation", "version": 1,
//     "system_prompt": "...",
//     "settings": { "temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
//                   "repetition_penalty": 1, "repeat_last_n": 64, "max_tokens": 256,
//                   "seed": 42, "random_seed": true },
//     "messages": [ { "role": "user", "content": "..." },
//                   { "role": "assistant", "content": "...",
//                     "stats": { "prompt_tokens": 31, "generated_tokens": 40, "context_tokens": 71,
//                                "prefill_ms": 80.1, "ttft_ms": 95.3, "decode_ms": 1800.0,
//                                "prefill_tokens_per_s": 387.0, "decode_tokens_per_s": 21.6,
//                                "stop_reason": "stop_token" } } ] }
// Unknown keys are ignored; missing settings keep their defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/engine.hpp"
#include "flashscope/status.hpp"

namespace flashscope::app {

// What one answer cost; valid is false until the answer finished.
struct AnswerStats {
  bool valid = false;
  int prompt_tokens = 0;     // tokens prefilled for this answer (the reused prefix not counted)
  int generated_tokens = 0;  // tokens sampled (a final stop token included)
  int context_tokens = 0;    // tokens in the KV cache after the answer
  double prefill_ms = 0.0;
  double ttft_ms = 0.0;
  double decode_ms = 0.0;
  double prefill_tokens_per_s = 0.0;
  double decode_tokens_per_s = 0.0;
  std::string stop_reason;  // stop_reason_name(): stop_token, max_tokens, callback (Stop pressed), context_full
};

struct Message {
  std::string role;  // "user" or "assistant"
  std::string content;
  AnswerStats stats;  // assistant messages
  std::string error;  // the engine's message when the answer failed (not saved)
};

inline Message make_message(std::string role, std::string content) {
  Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

// Sampling settings as the chat panel shows them; GenerateParams for the
// engine. The sampling fields start as the library's defaults
// (engine_sampling_defaults: the CLI's and the server's); once a model is
// loaded, its own (default_sampling) unless the user changed them.
struct ChatSettings {
  float temperature = engine_sampling_defaults().temperature;
  int top_k = engine_sampling_defaults().top_k;
  float top_p = engine_sampling_defaults().top_p;
  float min_p = engine_sampling_defaults().min_p;
  float repetition_penalty = engine_sampling_defaults().repetition_penalty;
  int repeat_last_n = engine_sampling_defaults().repeat_last_n;
  float dry_multiplier = engine_sampling_defaults().dry_multiplier;  // 0: DRY off
  int max_tokens = 256;
  uint64_t seed = 42;
  bool random_seed = true;  // a fresh seed for every answer (the one used is written to seed)
};

struct Conversation {
  std::string system_prompt = kSmolLMDefaultSystemPrompt;
  ChatSettings settings;
  std::vector<Message> messages;
};

// How a reply ended, in the words a person would use ("end of turn",
// "max tokens", "stopped", "context full") for a stop_reason_name() value.
const char* stop_reason_label(const std::string& reason);

// The sampling fields of `settings` set from `p` (max_tokens and the seed
// are left alone); and whether they equal p's.
void set_sampling(ChatSettings* settings, const SamplingParams& p);
bool sampling_equals(const ChatSettings& settings, const SamplingParams& p);

// The engine's parameters for the settings (seed as given: the caller picks
// a fresh one first when random_seed is set).
GenerateParams generate_params(const ChatSettings& settings);

// The ChatML message list for a request: the system prompt when it is not
// empty, then the first `count` messages (count > size: all).
std::vector<ChatMessage> prompt_messages(const Conversation& conversation, size_t count);

// The conversation as plain text ("System: ...\n\nUser: ...\n\nAssistant: ..."), for Copy all.
std::string conversation_as_text(const Conversation& conversation);

std::string conversation_to_json(const Conversation& conversation);
// kCorruptData naming what is wrong (not JSON, wrong format tag, a message
// without a role or content); *out is left unchanged on error.
Status conversation_from_json(const std::string& text, Conversation* out);

// File forms of the above. kIoError when the file cannot be read or written;
// save writes a temporary file then renames it, so a crash never leaves half a file.
Status save_conversation(const std::string& path, const Conversation& conversation);
Status load_conversation(const std::string& path, Conversation* out);

}  // namespace flashscope::app
