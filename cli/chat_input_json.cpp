#include "chat_input_json.hpp"

#include "flashscope/untrusted.hpp"

namespace flashscope::cli {

TemplateValue template_value_from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::boolean: return TemplateValue(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return TemplateValue(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return TemplateValue(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return TemplateValue(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return TemplateValue(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      TemplateValue::List items;
      for (const auto& item : j) items.push_back(template_value_from_json(item));
      return TemplateValue::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      TemplateValue::Map entries;
      for (auto it = j.begin(); it != j.end(); ++it) entries.emplace_back(it.key(), template_value_from_json(it.value()));
      return TemplateValue::map(std::move(entries));
    }
    default: return TemplateValue();
  }
}

Result<ChatTemplateInput> chat_input_from_json(const nlohmann::ordered_json& j) {
  ChatTemplateInput in;
  const nlohmann::ordered_json* messages = &j;
  if (j.is_object()) {
    if (!j.contains("messages")) return invalid_argument("chat input: the object has no \"messages\"");
    messages = &j["messages"];
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages" || key == "name" || key == "template" || key == "expected") continue;
      if (key == "add_generation_prompt") {
        if (!it->is_boolean()) return invalid_argument("chat input: add_generation_prompt must be true or false");
        in.add_generation_prompt = it->get<bool>();
      } else if ((key == "bos_token" || key == "eos_token") && it->is_string()) {
        (key == "bos_token" ? in.bos_token : in.eos_token) = it->get<std::string>();
      } else {
        in.variables.emplace_back(key, template_value_from_json(*it));
      }
    }
  }
  if (!messages->is_array()) return invalid_argument("chat input: \"messages\" must be a list");
  for (size_t k = 0; k < messages->size(); ++k) {
    const auto& m = (*messages)[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return invalid_argument("chat input: message " + std::to_string(k) + " needs a string \"role\"");
    }
    ChatTemplateMessage msg;
    msg.role = m["role"].get<std::string>();
    if (m.contains("content")) msg.content = template_value_from_json(m["content"]);
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role" || it.key() == "content") continue;
      msg.extra.emplace_back(it.key(), template_value_from_json(it.value()));
    }
    in.messages.push_back(std::move(msg));
  }
  return in;
}

Result<ChatTemplateInput> read_chat_input(const std::string& path) {
  auto text = read_small_file(path);
  if (!text.ok()) return text.status();
  const auto j = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(path + " is not valid JSON");
  return chat_input_from_json(j);
}

}  // namespace flashscope::cli
