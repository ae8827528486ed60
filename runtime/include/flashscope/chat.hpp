// Chat formatting: a conversation as the prompt a model expects. ChatFormat
// renders the model's own chat template (tokenizer.chat_template, parsed at
// load; flashscope/chat_template.hpp), falls back to built-in ChatML when it
// cannot, and runs a model without one (a base model) as a question-and-
// answer transcript that stops at the next question; next_turn()
// says what a Session must drop and feed to hold the next turn. Also:
// ChatML itself (SmolLM2's template, the fallback), the system prompt a
// template carries, and a reply's reasoning split from its content.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/status.hpp"
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

// --- the model's chat format -------------------------------------------------------

class ChatTemplate;
class Model;

enum class ChatFormatKind : uint8_t {
  kTemplate,    // the model's template (or an override)
  kChatML,      // built-in ChatML: the template is missing or failed, and the vocabulary has ChatML's tokens
  kCompletion,  // plain text: the contents of the messages back to back, system messages left out
  // A base model (no template): "Question: {user}\nAnswer:" and " {assistant}\n" in turn, system messages
  // left out; the reply ends at stop_strings() ("\nQuestion:"), where the model starts the next question.
  kTranscript,
};
const char* chat_format_kind_name(ChatFormatKind k);

// What a Session must do to hold a conversation: keep its first `keep`
// tokens (Session::truncate), then generate() with `feed`.
struct ChatTurn {
  int keep = 0;
  std::vector<int32_t> feed;
  // True when the session's text was a prefix of the new rendering (only the
  // new turn is fed); false when the template rewrote earlier text (or the
  // session held nothing), so the common token prefix is kept and the rest
  // prefilled again.
  bool appended = false;
};

class ChatFormat {
 public:
  // The format a chat with `model` uses: the template parsed at load (or
  // override_template when not empty, parsed now). No template: plain
  // completion. A template that does not parse: ChatML when the vocabulary
  // has <|im_start|> and <|im_end|>, else the transcript; notice() then
  // says why in a sentence a UI can show, naming the construct and its
  // line:column.
  static ChatFormat for_model(const Model& model, std::string_view override_template = {});
  // Built-in ChatML (format_chatml) with this default system prompt.
  static ChatFormat chatml(const Model& model, std::string default_system = kSmolLMDefaultSystemPrompt);
  static ChatFormat completion(const Model& model);
  static ChatFormat transcript(const Model& model);

  ChatFormat() = default;  // plain completion without a tokenizer; use for_model()

  ChatFormatKind kind() const { return kind_; }
  // Empty when the format is the one asked for; else why it fell back.
  const std::string& notice() const { return notice_; }
  // The template's parse error when it fell back (ok otherwise).
  const Status& template_status() const { return template_status_; }
  // For kTemplate: the template source in use.
  const std::string& template_source() const { return source_; }
  // Stop strings a reply in this format needs (GenerateParams::stop_strings,
  // added to the caller's): kTranscript's "\nQuestion:", else none.
  std::vector<std::string> stop_strings() const;

  // The conversation as prompt text. kCompletion ignores roles (and
  // add_generation_prompt), leaves system messages out and starts with the BOS text when the tokenizer
  // asks for BOS; kTranscript does the same with its labels (an assistant
  // content that does not start with whitespace gets a space after "Answer:"). Template errors (raise_exception, a type error) come back
  // as kInvalidArgument naming where.
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  // render()'s text as tokens. The template's own text is encoded with
  // control tokens, each message's content without, so text a user typed
  // never becomes a control token such as <|im_end|>. Where each content
  // went is known by rendering once more with marks around the contents;
  // a template that looks into a content (startswith, length) and renders
  // differently with the marks has its contents searched for instead, and
  // one it transforms (trims, cuts) is encoded as template text. For
  // SmolLM2 these are encode_chatml's tokens.
  Result<std::vector<int32_t>> encode(const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt = true) const;

  // Brings a session that holds `held` (Session::tokens()) up to
  // `messages` with the generation prompt. When the session's text
  // (held decoded) is a prefix of the new rendering, only the rest is
  // encoded and fed: the sampled tokens of earlier replies stay as they are,
  // as a hand-written ChatML continuation would. Otherwise (a template that
  // rewrites earlier turns, e.g. drops the thinking of earlier replies; a
  // reply cut by a stop string) the whole rendering is encoded and the
  // session keeps the longest common token prefix. Never an empty feed: when
  // the session already holds everything, its last token is fed again.
  Result<ChatTurn> next_turn(const std::vector<int32_t>& held, const std::vector<ChatMessage>& messages) const;

 private:
  ChatFormatKind kind_ = ChatFormatKind::kCompletion;
  std::string notice_;
  Status template_status_;
  std::string source_;
  std::shared_ptr<const ChatTemplate> template_;
  std::string default_system_;  // kChatML
  Tokenizer tokenizer_;
};

// --- reasoning ----------------------------------------------------------------------

// A reply split into its reasoning (Qwen3's "<think>…</think>", DeepSeek-R1's)
// and the answer, as an OpenAI-style server returns reasoning_content and
// content.
struct ReasoningSplit {
  std::string reasoning;  // the text between the tags, trimmed of whitespace at both ends
  std::string content;    // the rest, leading whitespace trimmed
  bool has_reasoning = false;  // an open tag, or a close tag, was found
  bool reasoning_open = false;  // the reply is still inside the block (streaming, or cut off)
};
// Recognises an open tag at the start (after whitespace) with or without its
// close tag, and a close tag alone (the prompt opened the block). A reply
// without either is all content.
ReasoningSplit split_reasoning(std::string_view reply, std::string_view open_tag = "<think>",
                               std::string_view close_tag = "</think>");

}  // namespace flashscope
