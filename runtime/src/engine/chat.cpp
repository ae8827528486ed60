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
// format_chatml writes it without Jinja: it is the fallback when a model's
// template cannot be used. ChatFormat renders the model's own template.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flashscope/chat.hpp"
#include "flashscope/chat_template.hpp"
#include "flashscope/model.hpp"

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

// --- ChatFormat ---------------------------------------------------------------------

namespace {

bool has_chatml_tokens(const Tokenizer& tok) {
  return tok.token_id("<|im_start|>") >= 0 && tok.token_id("<|im_end|>") >= 0;
}

std::string token_text_of(const Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.vocab_size() ? tok.decode({id}) : std::string();
}

using Spans = std::vector<std::pair<size_t, size_t>>;

// Byte ranges of the special tokens that encode(text, true) splits out, so a
// message's content is never matched inside one ("a" inside "<|im_start|>").
// Empty when the tokens do not spell the text back byte for byte.
Spans special_ranges(const Tokenizer& tok, const std::string& text) {
  Spans out;
  size_t at = 0;
  for (int32_t id : tok.encode(text, /*parse_special=*/true)) {
    const size_t n = tok.token_text(id).size();
    const TokenType type = tok.token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUserDefined) out.emplace_back(at, at + n);
    at += n;
  }
  if (at != text.size()) out.clear();
  return out;
}

// The fallback of rendered_with_spans(): where each message's content
// appears verbatim in the rendering, in order, never across a special token.
// A template that transforms a content (trims it, drops its thinking) leaves
// it unmatched: that part is then encoded as template text.
Spans searched_spans(const Tokenizer& tok, const std::string& text, const std::vector<ChatMessage>& messages) {
  const Spans specials = special_ranges(tok, text);
  auto straddles = [&](size_t pos) {
    for (const auto& [b, e] : specials) {
      if (b < pos && pos < e) return true;
    }
    return false;
  };
  Spans spans;
  size_t cursor = 0;
  for (const ChatMessage& m : messages) {
    if (m.content.empty()) continue;
    for (size_t at = text.find(m.content, cursor); at != std::string::npos; at = text.find(m.content, at + 1)) {
      const size_t end = at + m.content.size();
      if (straddles(at) || straddles(end)) continue;
      spans.emplace_back(at, end);
      cursor = end;
      break;
    }
  }
  return spans;
}

// text[begin, end) as tokens: inside the spans without control tokens,
// outside with them.
std::vector<int32_t> encode_range(const Tokenizer& tok, const std::string& text, size_t begin, const Spans& spans) {
  std::vector<int32_t> ids;
  auto add = [&](size_t b, size_t e, bool special) {
    if (e <= b) return;
    const auto part = tok.encode(std::string_view(text).substr(b, e - b), special);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  size_t at = begin;
  for (const auto& [b, e] : spans) {
    if (e <= at) continue;
    add(at, b, true);
    add(std::max(b, at), e, false);
    at = e;
  }
  add(at, text.size(), true);
  return ids;
}

std::string joined_contents(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") out += m.content;
  }
  return out;
}

// U+E000 and U+E001 (private use) around each content mark where the
// template put it; no text a person types has them.
constexpr std::string_view kOpenMark = "\xEE\x80\x80";
constexpr std::string_view kCloseMark = "\xEE\x80\x81";

struct Rendered {
  std::string text;
  Spans spans;  // the messages' contents in text
};

// The rendering and where the contents are in it: rendered again with each
// content between marks, which are then taken out; when that gives the same
// text (the template only copied the contents), the marks say exactly where
// they went. A template that looks into a content (startswith, length) may
// render differently with the marks: then the contents are searched for.
Result<Rendered> rendered_with_spans(const ChatFormat& format, const Tokenizer& tok,
                                     const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  auto plain = format.render(messages, add_generation_prompt);
  if (!plain.ok()) return plain.status();
  Rendered out{std::move(plain).value(), {}};
  if (format.kind() == ChatFormatKind::kTranscript) {
    // No control token but BOS: everything after it is one span, encoded
    // as plain text, so a label and the words after it tokenize as the
    // model read them in training ("Question:", " What"), not cut apart.
    const size_t bos = tok.add_bos() ? token_text_of(tok, tok.bos_id()).size() : 0;
    out.spans.emplace_back(bos, out.text.size());
    return out;
  }
  bool markable = true;
  std::vector<ChatMessage> marked = messages;
  for (ChatMessage& m : marked) {
    if (m.content.find(kOpenMark) != std::string::npos || m.content.find(kCloseMark) != std::string::npos) {
      markable = false;
    }
    if (!m.content.empty()) m.content = std::string(kOpenMark) + m.content + std::string(kCloseMark);
  }
  if (markable) {
    auto text = format.render(marked, add_generation_prompt);
    if (text.ok()) {
      std::string stripped;
      stripped.reserve(out.text.size());
      Spans spans;
      size_t open = std::string::npos;
      const std::string& t = *text;
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kOpenMark.size(), kOpenMark) == 0) {
          open = stripped.size();
          i += kOpenMark.size();
        } else if (t.compare(i, kCloseMark.size(), kCloseMark) == 0) {
          if (open != std::string::npos) spans.emplace_back(open, stripped.size());
          open = std::string::npos;
          i += kCloseMark.size();
        } else {
          stripped += t[i++];
        }
      }
      if (stripped == out.text) {
        out.spans = std::move(spans);
        return out;
      }
    }
  }
  out.spans = searched_spans(tok, out.text, messages);
  return out;
}

}  // namespace

const char* chat_format_kind_name(ChatFormatKind k) {
  switch (k) {
    case ChatFormatKind::kTemplate: return "template";
    case ChatFormatKind::kChatML: return "chatml";
    case ChatFormatKind::kCompletion: return "completion";
    case ChatFormatKind::kTranscript: return "transcript";
  }
  return "?";
}

ChatFormat ChatFormat::chatml(const Model& model, std::string default_system) {
  ChatFormat f;
  f.kind_ = ChatFormatKind::kChatML;
  f.default_system_ = std::move(default_system);
  f.tokenizer_ = model.tokenizer();
  return f;
}

ChatFormat ChatFormat::completion(const Model& model) {
  ChatFormat f;
  f.kind_ = ChatFormatKind::kCompletion;
  f.tokenizer_ = model.tokenizer();
  return f;
}

ChatFormat ChatFormat::transcript(const Model& model) {
  ChatFormat f;
  f.kind_ = ChatFormatKind::kTranscript;
  f.tokenizer_ = model.tokenizer();
  return f;
}

std::vector<std::string> ChatFormat::stop_strings() const {
  if (kind_ == ChatFormatKind::kTranscript) return {"\nQuestion:"};
  return {};
}

ChatFormat ChatFormat::for_model(const Model& model, std::string_view override_template) {
  std::shared_ptr<const ChatTemplate> parsed;
  Status status;
  std::string source;
  if (!override_template.empty()) {
    source = std::string(override_template);
    auto t = ChatTemplate::parse(source);
    if (t.ok()) {
      parsed = std::make_shared<const ChatTemplate>(std::move(t).value());
    } else {
      status = t.status();
    }
  } else {
    source = model.chat_template();
    status = model.chat_template_status();
    if (const ChatTemplate* t = model.parsed_chat_template()) {
      parsed = std::make_shared<const ChatTemplate>(*t);
    }
  }
  if (parsed) {
    ChatFormat f;
    f.kind_ = ChatFormatKind::kTemplate;
    f.template_ = std::move(parsed);
    f.source_ = std::move(source);
    f.tokenizer_ = model.tokenizer();
    return f;
  }
  if (source.empty()) {
    // A base model: given the contents back to back it continues the text
    // (more questions, the same line again) until max_tokens; as a
    // transcript it answers and then starts the next question, where the
    // reply stops (bench/answers/).
    ChatFormat f = transcript(model);
    f.notice_ = "the model has no chat template: a question-and-answer transcript";
    return f;
  }
  const std::string which = override_template.empty() ? "the model's chat template" : "the chat template file";
  ChatFormat f;
  if (has_chatml_tokens(model.tokenizer())) {
    std::string system = default_system_prompt_from_template(source);
    f = chatml(model, system.empty() ? std::string(kSmolLMDefaultSystemPrompt) : std::move(system));
    f.notice_ = which + " cannot be used (" + status.message() + "); using built-in ChatML";
  } else {
    f = transcript(model);
    f.notice_ = which + " cannot be used (" + status.message() + "); a question-and-answer transcript";
  }
  f.template_status_ = status;
  return f;
}

Result<std::string> ChatFormat::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  switch (kind_) {
    case ChatFormatKind::kChatML: return format_chatml(messages, add_generation_prompt, default_system_);
    case ChatFormatKind::kCompletion: {
      std::string out;
      if (tokenizer_.add_bos()) out = token_text_of(tokenizer_, tokenizer_.bos_id());
      return out + joined_contents(messages);
    }
    case ChatFormatKind::kTranscript: {
      std::string out;
      if (tokenizer_.add_bos()) out = token_text_of(tokenizer_, tokenizer_.bos_id());
      for (const ChatMessage& m : messages) {
        if (m.role == "system") continue;
        if (m.role == "assistant") {
          // The model's own reply starts with its space (" Paris"): kept as
          // it is, the session's text stays a prefix of the next rendering.
          const bool spaced = !m.content.empty() && (m.content[0] == ' ' || m.content[0] == '\n');
          out += (spaced ? "" : " ") + m.content + "\n";
        } else {
          out += "Question: " + m.content + "\nAnswer:";
        }
      }
      return out;
    }
    case ChatFormatKind::kTemplate: break;
  }
  ChatTemplateInput in;
  in.messages.reserve(messages.size());
  for (const ChatMessage& m : messages) in.messages.emplace_back(m.role, TemplateValue(m.content));
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = token_text_of(tokenizer_, tokenizer_.bos_id());
  in.eos_token = token_text_of(tokenizer_, tokenizer_.eos_id());
  return template_->render(in);
}

Result<std::vector<int32_t>> ChatFormat::encode(const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt) const {
  if (kind_ == ChatFormatKind::kChatML) {
    return encode_chatml(tokenizer_, messages, add_generation_prompt, default_system_);
  }
  auto r = rendered_with_spans(*this, tokenizer_, messages, add_generation_prompt);
  if (!r.ok()) return r.status();
  return encode_range(tokenizer_, r->text, 0, r->spans);
}

Result<ChatTurn> ChatFormat::next_turn(const std::vector<int32_t>& held,
                                       const std::vector<ChatMessage>& messages) const {
  auto rendered = rendered_with_spans(*this, tokenizer_, messages, /*add_generation_prompt=*/true);
  if (!rendered.ok()) return rendered.status();
  const std::string& text = rendered->text;
  const Spans& spans = rendered->spans;
  ChatTurn turn;
  // Compared as text, not as tokens: a reply's sampled tokens need not be
  // the ones its text encodes to, and they are what the cache holds.
  const std::string held_text = tokenizer_.decode(held);
  if (!held.empty() && text.size() > held_text.size() && text.compare(0, held_text.size(), held_text) == 0) {
    turn.keep = static_cast<int>(held.size());
    turn.feed = encode_range(tokenizer_, text, held_text.size(), spans);
    turn.appended = true;
  }
  if (turn.feed.empty()) {
    turn.appended = false;
    const std::vector<int32_t> all = encode_range(tokenizer_, text, 0, spans);
    size_t common = 0;
    while (common < held.size() && common < all.size() && held[common] == all[common]) ++common;
    if (common == all.size() && common > 0) --common;  // a generate needs a token to feed
    turn.keep = static_cast<int>(common);
    turn.feed.assign(all.begin() + static_cast<std::ptrdiff_t>(common), all.end());
  }
  return turn;
}

// --- reasoning -----------------------------------------------------------------------

namespace {

std::string_view trim_ws(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view trim_ws_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  return s;
}

}  // namespace

ReasoningSplit split_reasoning(std::string_view reply, std::string_view open_tag, std::string_view close_tag) {
  ReasoningSplit out;
  std::string_view body = reply;
  const std::string_view lead = trim_ws_left(reply);
  bool opened = false;
  if (!open_tag.empty() && lead.substr(0, open_tag.size()) == open_tag) {
    body = lead.substr(open_tag.size());
    opened = true;
  }
  const size_t close = close_tag.empty() ? std::string_view::npos : body.find(close_tag);
  if (close == std::string_view::npos) {
    if (!opened) {
      out.content = std::string(reply);
      return out;
    }
    out.has_reasoning = true;
    out.reasoning_open = true;
    out.reasoning = std::string(trim_ws(body));
    return out;
  }
  out.has_reasoning = true;
  out.reasoning = std::string(trim_ws(body.substr(0, close)));
  out.content = std::string(trim_ws_left(body.substr(close + close_tag.size())));
  return out;
}

}  // namespace flashscope
