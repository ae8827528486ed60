// ReasoningStream (reasoning_stream.hpp): split the whole text so far each
// time, and send what grew past what was sent.
#include "reasoning_stream.hpp"

#include <string_view>

#include "flashscope/chat.hpp"

namespace flashscope::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr size_t kHold = 8;  // "</think>" may be arriving at the end of the reasoning

constexpr std::string_view kClose = "</think>";

bool starts_with_open(const std::string& text) {
  const size_t i = text.find_first_not_of(" \t\r\n");
  return i != std::string::npos && text.compare(i, kOpen.size(), kOpen) == 0;
}

// Whitespace, or whitespace and the start of "<think>": the reply may still open a block.
bool may_open(const std::string& text) {
  const size_t i = text.find_first_not_of(" \t\r\n");
  if (i == std::string::npos) return true;
  const std::string_view rest(text.data() + i, text.size() - i);
  return rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest;
}

// The first n bytes of s, shortened to a whole UTF-8 character.
std::string utf8_prefix(const std::string& s, size_t n) {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// The part of `now` past what was sent, when what was sent is its prefix
// (else nothing: trimming took back text already sent).
std::string grow(std::string* sent, const std::string& now) {
  if (now.size() <= sent->size() || now.compare(0, sent->size(), *sent) != 0) return {};
  std::string d = now.substr(sent->size());
  *sent = now;
  return d;
}

}  // namespace

bool prompt_opens_reasoning(const std::string& prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string::npos || close < open;
}

ReasoningSplit split_reply(const std::string& reply, bool prompt_opened) {
  if (prompt_opened) return split_reasoning(std::string(kOpen) + reply);
  if (!starts_with_open(reply)) {
    ReasoningSplit s;
    s.content = reply;
    return s;
  }
  return split_reasoning(reply);
}

void ReasoningStream::take(bool final, std::string* reasoning, std::string* content) {
  const ReasoningSplit s = split_reply(text_, prompt_opened_);
  std::string r = s.reasoning;
  std::string c = s.content;
  if (!final) {
    if (s.reasoning_open) r = utf8_prefix(r, r.size() >= kHold ? r.size() - kHold : 0);
    if (!prompt_opened_ && !s.has_reasoning && may_open(text_)) c.clear();
  }
  *reasoning = grow(&sent_reasoning_, r);
  *content = grow(&sent_content_, c);
}

}  // namespace flashscope::server
