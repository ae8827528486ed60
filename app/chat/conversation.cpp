#include "chat/conversation.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "platform/json.hpp"

namespace flashscope::app {

namespace {

constexpr const char* kFormatTag = "flashscope-conversation";
constexpr int kFormatVersion = 1;

JsonValue stats_to_json(const AnswerStats& s) {
  JsonValue o = JsonValue::make_object();
  o.object["prompt_tokens"] = JsonValue::of(s.prompt_tokens);
  o.object["generated_tokens"] = JsonValue::of(s.generated_tokens);
  o.object["context_tokens"] = JsonValue::of(s.context_tokens);
  o.object["prefill_ms"] = JsonValue::of(s.prefill_ms);
  o.object["ttft_ms"] = JsonValue::of(s.ttft_ms);
  o.object["decode_ms"] = JsonValue::of(s.decode_ms);
  o.object["prefill_tokens_per_s"] = JsonValue::of(s.prefill_tokens_per_s);
  o.object["decode_tokens_per_s"] = JsonValue::of(s.decode_tokens_per_s);
  o.object["stop_reason"] = JsonValue::of(s.stop_reason);
  return o;
}

AnswerStats stats_from_json(const JsonValue& o) {
  AnswerStats s;
  s.valid = o.is_object();
  s.prompt_tokens = static_cast<int>(o.get_number("prompt_tokens", 0));
  s.generated_tokens = static_cast<int>(o.get_number("generated_tokens", 0));
  s.context_tokens = static_cast<int>(o.get_number("context_tokens", 0));
  s.prefill_ms = o.get_number("prefill_ms", 0);
  s.ttft_ms = o.get_number("ttft_ms", 0);
  s.decode_ms = o.get_number("decode_ms", 0);
  s.prefill_tokens_per_s = o.get_number("prefill_tokens_per_s", 0);
  s.decode_tokens_per_s = o.get_number("decode_tokens_per_s", 0);
  s.stop_reason = o.get_string("stop_reason");
  return s;
}

Status corrupt(const std::string& what) { return {StatusCode::kCorruptData, "conversation file: " + what}; }

}  // namespace

const char* stop_reason_label(const std::string& reason) {
  if (reason == "stop_token") return "end of turn";
  if (reason == "max_tokens") return "max tokens";
  if (reason == "callback") return "stopped";
  if (reason == "context_full") return "context full";
  if (reason == "stop_string") return "stop string";
  if (reason == "cancelled") return "stopped";
  return reason.c_str();
}

GenerateParams generate_params(const ChatSettings& settings) {
  GenerateParams gp;
  gp.max_tokens = settings.max_tokens;
  gp.sampling.temperature = settings.temperature;
  gp.sampling.top_k = settings.top_k;
  gp.sampling.top_p = settings.top_p;
  gp.sampling.min_p = settings.min_p;
  gp.sampling.repetition_penalty = settings.repetition_penalty;
  gp.sampling.repeat_last_n = settings.repeat_last_n;
  gp.sampling.seed = settings.seed;
  return gp;
}

std::vector<ChatMessage> prompt_messages(const Conversation& conversation, size_t count) {
  std::vector<ChatMessage> out;
  if (!conversation.system_prompt.empty()) out.push_back({"system", conversation.system_prompt});
  for (size_t i = 0; i < conversation.messages.size() && i < count; ++i) {
    out.push_back({conversation.messages[i].role, conversation.messages[i].content});
  }
  return out;
}

std::string conversation_as_text(const Conversation& conversation) {
  std::string out;
  auto add = [&](const char* who, const std::string& text) {
    if (!out.empty()) out += "\n\n";
    out += who;
    out += ": ";
    out += text;
  };
  if (!conversation.system_prompt.empty()) add("System", conversation.system_prompt);
  for (const Message& m : conversation.messages) add(m.role == "user" ? "User" : "Assistant", m.content);
  return out;
}

std::string conversation_to_json(const Conversation& c) {
  JsonValue root = JsonValue::make_object();
  root.object["format"] = JsonValue::of(kFormatTag);
  root.object["version"] = JsonValue::of(kFormatVersion);
  root.object["system_prompt"] = JsonValue::of(c.system_prompt);
  JsonValue s = JsonValue::make_object();
  s.object["temperature"] = JsonValue::of(static_cast<double>(c.settings.temperature));
  s.object["top_k"] = JsonValue::of(c.settings.top_k);
  s.object["top_p"] = JsonValue::of(static_cast<double>(c.settings.top_p));
  s.object["min_p"] = JsonValue::of(static_cast<double>(c.settings.min_p));
  s.object["repetition_penalty"] = JsonValue::of(static_cast<double>(c.settings.repetition_penalty));
  s.object["repeat_last_n"] = JsonValue::of(c.settings.repeat_last_n);
  s.object["max_tokens"] = JsonValue::of(c.settings.max_tokens);
  // Seeds above 2^53 would lose bits as a JSON number: written as a string.
  s.object["seed"] = JsonValue::of(std::to_string(c.settings.seed));
  s.object["random_seed"] = JsonValue::of(c.settings.random_seed);
  root.object["settings"] = std::move(s);
  JsonValue messages = JsonValue::make_array();
  for (const Message& m : c.messages) {
    JsonValue o = JsonValue::make_object();
    o.object["role"] = JsonValue::of(m.role);
    o.object["content"] = JsonValue::of(m.content);
    if (m.stats.valid) o.object["stats"] = stats_to_json(m.stats);
    messages.array.push_back(std::move(o));
  }
  root.object["messages"] = std::move(messages);
  return json_write(root);
}

Status conversation_from_json(const std::string& text, Conversation* out) {
  JsonValue root;
  std::string error;
  if (!json_parse(text, &root, &error)) return corrupt("not valid JSON: " + error);
  if (!root.is_object()) return corrupt("the top level is not an object");
  if (root.get_string("format") != kFormatTag) {
    return corrupt(std::string("\"format\" is not \"") + kFormatTag + "\"");
  }
  const double version = root.get_number("version", 0);
  if (version != kFormatVersion) return corrupt("unsupported version " + std::to_string(version) + " (this app reads 1)");

  Conversation c;
  c.system_prompt = root.get_string("system_prompt", "");
  if (const JsonValue* s = root.find("settings"); s && s->is_object()) {
    ChatSettings& t = c.settings;
    t.temperature = static_cast<float>(s->get_number("temperature", t.temperature));
    t.top_k = static_cast<int>(s->get_number("top_k", t.top_k));
    t.top_p = static_cast<float>(s->get_number("top_p", t.top_p));
    t.min_p = static_cast<float>(s->get_number("min_p", t.min_p));
    t.repetition_penalty = static_cast<float>(s->get_number("repetition_penalty", t.repetition_penalty));
    t.repeat_last_n = static_cast<int>(s->get_number("repeat_last_n", t.repeat_last_n));
    t.max_tokens = static_cast<int>(s->get_number("max_tokens", t.max_tokens));
    if (const JsonValue* seed = s->find("seed")) {
      if (seed->is_string()) t.seed = std::strtoull(seed->string.c_str(), nullptr, 10);
      else if (seed->is_number() && seed->number >= 0) t.seed = static_cast<uint64_t>(seed->number);
    }
    t.random_seed = s->get_bool("random_seed", t.random_seed);
  }
  const JsonValue* messages = root.find("messages");
  if (!messages || !messages->is_array()) return corrupt("\"messages\" is missing or not an array");
  for (size_t i = 0; i < messages->array.size(); ++i) {
    const JsonValue& m = messages->array[i];
    const JsonValue* role = m.find("role");
    const JsonValue* content = m.find("content");
    if (!role || !role->is_string() || !content || !content->is_string()) {
      return corrupt("message " + std::to_string(i) + " needs string \"role\" and \"content\"");
    }
    if (role->string != "user" && role->string != "assistant") {
      return corrupt("message " + std::to_string(i) + " has role \"" + role->string + "\" (user or assistant)");
    }
    Message msg;
    msg.role = role->string;
    msg.content = content->string;
    if (const JsonValue* stats = m.find("stats")) msg.stats = stats_from_json(*stats);
    c.messages.push_back(std::move(msg));
  }
  *out = std::move(c);
  return Status::ok_status();
}

Status save_conversation(const std::string& path, const Conversation& conversation) {
  if (path.empty()) return invalid_argument("save: no file name");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return {StatusCode::kIoError, "cannot write " + tmp};
    const std::string text = conversation_to_json(conversation);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!f.flush()) return {StatusCode::kIoError, "cannot write " + tmp};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return {StatusCode::kIoError, "cannot rename " + tmp + " to " + path};
  }
  return Status::ok_status();
}

Status load_conversation(const std::string& path, Conversation* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {StatusCode::kIoError, "cannot open " + path};
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) return {StatusCode::kIoError, "cannot read " + path};
  return conversation_from_json(text.str(), out);
}

}  // namespace flashscope::app
