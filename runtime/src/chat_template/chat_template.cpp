// The public face of the interpreter: TemplateValue, ChatTemplate::parse
// (lexer, then parser) and render (the input turned into the variables
// transformers passes: messages, add_generation_prompt, bos_token,
// eos_token and the caller's extras, then the interpreter).
#include "flashscope/chat_template.hpp"

#include <exception>
#include <new>

#include "chat_template/ast.hpp"
#include "chat_template/interpreter.hpp"
#include "chat_template/lexer.hpp"
#include "chat_template/parser.hpp"

namespace flashscope {

TemplateValue TemplateValue::list(List items) {
  TemplateValue v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

TemplateValue TemplateValue::map(Map entries) {
  TemplateValue v;
  v.kind_ = Kind::kMap;
  v.map_ = std::make_shared<const Map>(std::move(entries));
  return v;
}

const TemplateValue::List& TemplateValue::as_list() const {
  static const List kEmpty;
  return list_ ? *list_ : kEmpty;
}

const TemplateValue::Map& TemplateValue::as_map() const {
  static const Map kEmpty;
  return map_ ? *map_ : kEmpty;
}

namespace {

using chat_template::Value;

Value to_value(const TemplateValue& v) {
  switch (v.kind()) {
    case TemplateValue::Kind::kNone: return Value::none();
    case TemplateValue::Kind::kBool: return Value::boolean(v.as_bool());
    case TemplateValue::Kind::kInt: return Value::integer(v.as_int());
    case TemplateValue::Kind::kFloat: return Value::real(v.as_float());
    case TemplateValue::Kind::kString: return Value::string(v.as_string());
    case TemplateValue::Kind::kList: {
      chat_template::List items;
      items.reserve(v.as_list().size());
      for (const TemplateValue& item : v.as_list()) items.push_back(to_value(item));
      return Value::make_list(std::move(items));
    }
    case TemplateValue::Kind::kMap: {
      chat_template::Map entries;
      entries.reserve(v.as_map().size());
      for (const auto& [key, value] : v.as_map()) entries.emplace_back(key, to_value(value));
      return Value::make_map(std::move(entries));
    }
  }
  return Value::none();
}

void set_global(chat_template::Map& globals, const std::string& name, Value v) {
  for (auto& entry : globals) {
    if (entry.first == name) {
      entry.second = std::move(v);
      return;
    }
  }
  globals.emplace_back(name, std::move(v));
}

}  // namespace

ChatTemplate::ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source, const ChatTemplateLimits& limits) {
  if (limits.max_depth < 1 || limits.max_loop_iterations < 0) {
    return invalid_argument("chat template limits: max_depth must be >= 1 and max_loop_iterations >= 0");
  }
  try {
    auto tokens = chat_template::tokenize(source);
    if (!tokens.ok()) return tokens.status();
    auto program = chat_template::parse_program(std::move(tokens).value(), limits);
    if (!program.ok()) return program.status();
    ChatTemplate t;
    t.program_ = std::make_shared<const chat_template::Program>(std::move(program).value());
    return t;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "chat template: out of memory while parsing");
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(const ChatTemplateInput& input) const {
  if (!program_) return std::string();
  try {
    chat_template::List messages;
    messages.reserve(input.messages.size());
    for (const ChatTemplateMessage& m : input.messages) {
      chat_template::Map fields;
      fields.reserve(2 + m.extra.size());
      fields.emplace_back("role", Value::string(m.role));
      fields.emplace_back("content", to_value(m.content));
      for (const auto& [key, value] : m.extra) set_global(fields, key, to_value(value));
      messages.push_back(Value::make_map(std::move(fields)));
    }
    chat_template::Map globals;
    globals.emplace_back("messages", Value::make_list(std::move(messages)));
    globals.emplace_back("add_generation_prompt", Value::boolean(input.add_generation_prompt));
    globals.emplace_back("bos_token", Value::string(input.bos_token));
    globals.emplace_back("eos_token", Value::string(input.eos_token));
    for (const auto& [name, value] : input.variables) set_global(globals, name, to_value(value));
    return chat_template::render_program(*program_, std::move(globals), input.now);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "chat template: out of memory while rendering");
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace flashscope
