// Chat templates: the Jinja source a GGUF model carries as
// tokenizer.chat_template, rendered the way Hugging Face transformers renders
// it (jinja2's ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks on, the loopcontrols extension, `tojson` as Python's
// json.dumps with ensure_ascii=False, and the globals raise_exception and
// strftime_now), so the prompt a model sees here is the one it was trained on.
//
//   auto tmpl = flashscope::ChatTemplate::parse(model.chat_template());
//   if (!tmpl.ok()) { /* tmpl.status().message(): "3:14: unsupported tag 'include'" */ }
//   flashscope::ChatTemplateInput in;
//   in.messages = {{"system", "Be brief."}, {"user", "Hi!"}};
//   auto prompt = tmpl->render(in);  // "<|im_start|>system\nBe brief.<|im_end|>\n..."
//
// The interpreter covers the Jinja subset chat templates use: text with
// whitespace control ({%- -%} {{- -}} {#- -#}), comments; if/elif/else,
// for (with loop.*, a loop filter, else, break/continue), set (also
// `set ns.attr` and block set), macro and calling it, {% generation %}
// (rendered as its body, as transformers does); the expression grammar with
// filters, tests, slicing, `in`, comparisons, ternaries, list and dict
// literals; string, list and dict methods. Undefined names behave like
// jinja2's default Undefined: empty when printed, false, iterable as empty,
// an error when called or when an attribute of one is read. Anything else
// (include, extends, call blocks, ...) is an error at parse time naming the
// construct and its line:column. Upper/lower/title/capitalize change ASCII
// letters only (Python changes every cased letter).
//
// Rendering untrusted templates is bounded: ChatTemplateLimits caps nesting,
// the total number of loop iterations, the size of the output and of any
// string or list a template builds, and the total work of a render; each
// limit is an error, never a hang.
// No exceptions escape and nothing is printed.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope {

// A JSON-like value handed to a template: none, bool, int, float, string,
// list, or map (string keys, insertion order kept, as in a Python dict, so
// `tojson` and `items()` see the order the caller gave).
class TemplateValue {
 public:
  enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kList, kMap };
  using List = std::vector<TemplateValue>;
  using Map = std::vector<std::pair<std::string, TemplateValue>>;

  TemplateValue() = default;  // none
  TemplateValue(bool b) : kind_(Kind::kBool), int_(b) {}                        // NOLINT: implicit by design
  TemplateValue(int v) : kind_(Kind::kInt), int_(v) {}                          // NOLINT
  TemplateValue(int64_t v) : kind_(Kind::kInt), int_(v) {}                      // NOLINT
  TemplateValue(double v) : kind_(Kind::kFloat), float_(v) {}                   // NOLINT
  TemplateValue(std::string s) : kind_(Kind::kString), string_(std::move(s)) {}  // NOLINT
  TemplateValue(const char* s) : kind_(Kind::kString), string_(s) {}            // NOLINT
  static TemplateValue list(List items);
  static TemplateValue map(Map entries);

  Kind kind() const { return kind_; }
  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_float() const { return float_; }
  const std::string& as_string() const { return string_; }
  const List& as_list() const;
  const Map& as_map() const;

 private:
  Kind kind_ = Kind::kNone;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string string_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<const Map> map_;
};

// One chat message. The template sees a dict with "role", "content" and then
// the extra fields in the order given (tool_calls, reasoning_content, name...).
struct ChatTemplateMessage {
  ChatTemplateMessage() = default;
  ChatTemplateMessage(std::string r, TemplateValue c, TemplateValue::Map e = {})
      : role(std::move(r)), content(std::move(c)), extra(std::move(e)) {}

  std::string role;
  TemplateValue content;  // usually a string; a list of parts, or none, where a template expects it
  TemplateValue::Map extra;
};

struct ChatTemplateInput {
  std::vector<ChatTemplateMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;  // the tokens' text; always defined, "" when the model has none
  std::string eos_token;
  // Further variables (tools, enable_thinking, date_string, ...); a name
  // given here overrides the ones above.
  TemplateValue::Map variables;
  // strftime_now's clock, as broken-down local time; the system's local
  // time now when empty. Tests inject a fixed date.
  std::function<std::tm()> now;
};

struct ChatTemplateLimits {
  int max_depth = 64;                    // nesting of blocks and brackets at parse, of macro calls at render
  int64_t max_loop_iterations = 100000;  // all loops of one render together
  size_t max_output_bytes = 1u << 22;    // 4 MiB: the output, and any one string or list a template builds
  // Bytes of all the values one render's expressions produce, plus 16 per
  // evaluation: a bound on its time (256 MiB is well under a second; real
  // templates use a few times their output).
  size_t max_work_bytes = size_t{1} << 28;
};

namespace chat_template {
struct Program;
}

class ChatTemplate {
 public:
  // Parses a template. kInvalidArgument for a syntax error, kUnsupported for
  // a construct outside the subset; the message names it and its line:column
  // ("chat template 3:14: unsupported tag 'include'"). The limits are kept
  // for render().
  static Result<ChatTemplate> parse(std::string_view source, const ChatTemplateLimits& limits = {});

  // An empty template (renders ""). Exists for Result<ChatTemplate>; use parse().
  ChatTemplate();

  // The prompt text. kInvalidArgument for an error while rendering (a type
  // error, an undefined call, raise_exception: "chat template 12:8:
  // raise_exception: Conversation roles must alternate ...") or a limit
  // reached, naming where. Safe to call from several threads.
  Result<std::string> render(const ChatTemplateInput& input) const;

 private:
  std::shared_ptr<const chat_template::Program> program_;
};

}  // namespace flashscope
