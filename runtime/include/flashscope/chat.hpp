// Chat formatting: a conversation as ChatML text or token ids (SmolLM2's
// template), and the system prompt a GGUF chat template carries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/tokenizer.hpp"

namespace flashscope {

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

}  // namespace flashscope
