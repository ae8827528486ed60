// A streamed chat reply split into reasoning_content and content
// (flashscope::split_reasoning: Qwen3's "<think>…</think>") chunk by chunk,
// so that each chunk carries only text that can no longer change: text that
// may still become "<think>" at the start, or "</think>" at the end of the
// reasoning, is held back until it cannot (or the reply ends).
#pragma once

#include <string>

#include "flashscope/chat.hpp"

namespace flashscope::server {

// Whether a rendered prompt leaves a reasoning block open (Qwen3's
// templates end the generation prompt with "<think>\n" when thinking is
// asked for): the reply then starts inside it.
bool prompt_opens_reasoning(const std::string& prompt);

// A whole reply's split: after an open tag at its start, or from the start
// when the prompt opened the block. A close tag without either is text the
// reply mentions, not a block (a stream could not take back what it sent).
ReasoningSplit split_reply(const std::string& reply, bool prompt_opened);

class ReasoningStream {
 public:
  explicit ReasoningStream(bool prompt_opened = false) : prompt_opened_(prompt_opened) {}
  void push(const std::string& text) { text_ += text; }
  // The reasoning and content that became final since the last call;
  // `final` (the reply ended) gives everything left.
  void take(bool final, std::string* reasoning, std::string* content);

 private:
  bool prompt_opened_;
  std::string text_, sent_reasoning_, sent_content_;
};

}  // namespace flashscope::server
