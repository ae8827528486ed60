// ChatML formatting, as SmolLM2's Jinja template renders it:
//
//   {% for message in messages %}
//     {% if loop.first and messages[0]['role'] != 'system' %}
//       <|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n
//     {% endif %}
//     <|im_start|>{role}\n{content}<|im_end|>\n
//   {% endfor %}
//   {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}
//
// We do not run Jinja: ChatML is fixed text, and the default system prompt
// can be read out of the template's string literal.
#include <string>
#include <vector>

#include "flashscope/chat.hpp"

namespace flashscope {
namespace {

constexpr const char* kImStart = "<|im_start|>";
constexpr const char* kImEnd = "<|im_end|>";

void append_message(std::string& out, const std::string& role, const std::string& content) {
  out += kImStart;
  out += role;
  out += '\n';
  out += content;
  out += kImEnd;
  out += '\n';
}

}  // namespace

std::string format_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& default_system) {
  std::string out;
  if ((messages.empty() || messages.front().role != "system") && !default_system.empty()) {
    append_message(out, "system", default_system);
  }
  for (const ChatMessage& m : messages) append_message(out, m.role, m.content);
  if (add_generation_prompt) {
    out += kImStart;
    out += "assistant\n";
  }
  return out;
}

std::vector<int32_t> encode_chatml(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt, const std::string& default_system) {
  std::vector<int32_t> ids;
  auto add = [&](const std::string& text, bool special) {
    const std::vector<int32_t> part = tokenizer.encode(text, special);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  auto add_message = [&](const std::string& role, const std::string& content) {
    add(std::string(kImStart) + role + "\n", true);
    add(content, false);
    add(std::string(kImEnd) + "\n", true);
  };
  if ((messages.empty() || messages.front().role != "system") && !default_system.empty()) {
    add_message("system", default_system);
  }
  for (const ChatMessage& m : messages) add_message(m.role, m.content);
  if (add_generation_prompt) add(std::string(kImStart) + "assistant\n", true);
  return ids;
}

std::string chatml_next_turn(const std::string& user_content, bool reply_closed) {
  std::string out;
  if (!reply_closed) out += kImEnd;
  out += '\n';  // what follows <|im_end|> in the template
  append_message(out, "user", user_content);
  out += kImStart;
  out += "assistant\n";
  return out;
}

std::string default_system_prompt_from_template(const std::string& tmpl) {
  // The literal may spell the newline as a real newline or as "\n" (an escape
  // inside a Jinja string); accept both.
  for (const std::string& marker : {std::string(kImStart) + "system\n", std::string(kImStart) + "system\\n"}) {
    const size_t at = tmpl.find(marker);
    if (at == std::string::npos) continue;
    const size_t begin = at + marker.size();
    const size_t end = tmpl.find(kImEnd, begin);
    if (end == std::string::npos) continue;
    const std::string text = tmpl.substr(begin, end - begin);
    // Jinja markup inside means the prompt is computed, not a literal.
    if (text.find("{{") != std::string::npos || text.find("{%") != std::string::npos) continue;
    return text;
  }
  return {};
}

}  // namespace flashscope
