#include "chat/conversation.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "flashscope/untrusted.hpp"
#include "platform/json.hpp"

namespace flashscope::app {

namespace {

constexpr const char* kFormatTag = "flashscope-conversation";
constexpr int kFormatVersion = 1;

Json stats_to_json(const AnswerStats& s) {
  return Json{{"prompt_tokens", s.prompt_tokens},
              {"generated_tokens", s.generated_tokens},
              {"context_tokens", s.context_tokens},
              {"prefill_ms", s.prefill_ms},
              {"ttft_ms", s.ttft_ms},
              {"decode_ms", s.decode_ms},
              {"prefill_tokens_per_s", s.prefill_tokens_per_s},
              {"decode_tokens_per_s", s.decode_tokens_per_s},
              {"stop_reason", s.stop_reason}};
}

Status corrupt(const std::string& what) { return {StatusCode::kCorruptData, "conversation file: " + what}; }

// Number members read into narrower types. Absent or not a number: the value
// stays as it is. A number the type cannot hold is refused naming the field:
// the cast would be undefined behaviour (top_k: 1e10).
Status read_int(const Json& o, const char* key, const std::string& where, int* value) {
  const Json* v = json_member(o, key);
  if (!v || !v->is_number()) return Status::ok_status();
  const double d = v->get<double>();
  if (!(d >= std::numeric_limits<int>::min() && d < -static_cast<double>(std::numeric_limits<int>::min()))) {
    return corrupt(where + key + " = " + v->dump() + " does not fit an int");
  }
  *value = static_cast<int>(d);
  return Status::ok_status();
}

Status read_float(const Json& o, const char* key, const std::string& where, float* value) {
  const Json* v = json_member(o, key);
  if (!v || !v->is_number()) return Status::ok_status();
  const double d = v->get<double>();
  if (!(std::fabs(d) <= std::numeric_limits<float>::max())) {
    return corrupt(where + key + " = " + v->dump() + " does not fit a float");
  }
  *value = static_cast<float>(d);
  return Status::ok_status();
}

// Written as a decimal string (seeds above 2^53 lose bits as a JSON number);
// a number is read too.
Status read_seed(const Json& o, const std::string& where, uint64_t* value) {
  const Json* seed = json_member(o, "seed");
  if (!seed) return Status::ok_status();
  if (seed->is_string()) {
    *value = std::strtoull(seed->get_ref<const std::string&>().c_str(), nullptr, 10);
  } else if (seed->is_number_unsigned()) {
    *value = seed->get<uint64_t>();
  } else if (seed->is_number()) {
    const double d = seed->get<double>();
    if (!(d >= 0 && d < 18446744073709551616.0)) {  // 2^64
      return corrupt(where + "seed = " + seed->dump() + " is not a 64-bit unsigned integer");
    }
    *value = static_cast<uint64_t>(d);
  }
  return Status::ok_status();
}

Status stats_from_json(const Json& o, const std::string& where, AnswerStats* out) {
  AnswerStats s;
  s.valid = o.is_object();
  FLASHSCOPE_RETURN_IF_ERROR(read_int(o, "prompt_tokens", where, &s.prompt_tokens));
  FLASHSCOPE_RETURN_IF_ERROR(read_int(o, "generated_tokens", where, &s.generated_tokens));
  FLASHSCOPE_RETURN_IF_ERROR(read_int(o, "context_tokens", where, &s.context_tokens));
  s.prefill_ms = json_number(o, "prefill_ms", 0);
  s.ttft_ms = json_number(o, "ttft_ms", 0);
  s.decode_ms = json_number(o, "decode_ms", 0);
  s.prefill_tokens_per_s = json_number(o, "prefill_tokens_per_s", 0);
  s.decode_tokens_per_s = json_number(o, "decode_tokens_per_s", 0);
  s.stop_reason = json_string(o, "stop_reason");
  *out = std::move(s);
  return Status::ok_status();
}

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
  // DRY's base, allowed length and window are the library's (the panel shows the multiplier).
  const SamplingParams d = engine_sampling_defaults();
  gp.sampling.dry_multiplier = settings.dry_multiplier;
  gp.sampling.dry_base = d.dry_base;
  gp.sampling.dry_allowed_length = d.dry_allowed_length;
  gp.sampling.dry_last_n = d.dry_last_n;
  gp.sampling.seed = settings.seed;
  return gp;
}

void set_sampling(ChatSettings* settings, const SamplingParams& p) {
  settings->temperature = p.temperature;
  settings->top_k = p.top_k;
  settings->top_p = p.top_p;
  settings->min_p = p.min_p;
  settings->repetition_penalty = p.repetition_penalty;
  settings->repeat_last_n = p.repeat_last_n;
  settings->dry_multiplier = p.dry_multiplier;
}

bool sampling_equals(const ChatSettings& settings, const SamplingParams& p) {
  ChatSettings as_p = settings;
  set_sampling(&as_p, p);
  return as_p.temperature == settings.temperature && as_p.top_k == settings.top_k && as_p.top_p == settings.top_p &&
         as_p.min_p == settings.min_p && as_p.repetition_penalty == settings.repetition_penalty &&
         as_p.repeat_last_n == settings.repeat_last_n && as_p.dry_multiplier == settings.dry_multiplier;
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
  const ChatSettings& t = c.settings;
  Json messages = Json::array();
  for (const Message& m : c.messages) {
    Json o = {{"role", m.role}, {"content", m.content}};
    if (m.stats.valid) o["stats"] = stats_to_json(m.stats);
    messages.push_back(std::move(o));
  }
  const Json root = {
      {"format", kFormatTag},
      {"version", kFormatVersion},
      {"system_prompt", c.system_prompt},
      {"settings",
       {{"temperature", static_cast<double>(t.temperature)},
        {"top_k", t.top_k},
        {"top_p", static_cast<double>(t.top_p)},
        {"min_p", static_cast<double>(t.min_p)},
        {"repetition_penalty", static_cast<double>(t.repetition_penalty)},
        {"repeat_last_n", t.repeat_last_n},
        {"dry_multiplier", static_cast<double>(t.dry_multiplier)},
        {"max_tokens", t.max_tokens},
        // Seeds above 2^53 would lose bits as a JSON number: written as a string.
        {"seed", std::to_string(t.seed)},
        {"random_seed", t.random_seed}}},
      {"messages", std::move(messages)}};
  return json_write(root);
}

Status conversation_from_json(const std::string& text, Conversation* out) {
  Json root;
  std::string error;
  if (!json_parse(text, &root, &error)) return corrupt("not valid JSON: " + error);
  if (!root.is_object()) return corrupt("the top level is not an object");
  if (json_string(root, "format") != kFormatTag) {
    return corrupt(std::string("\"format\" is not \"") + kFormatTag + "\"");
  }
  const double version = json_number(root, "version", 0);
  if (version != kFormatVersion) return corrupt("unsupported version " + std::to_string(version) + " (this app reads 1)");

  Conversation c;
  c.system_prompt = json_string(root, "system_prompt", "");
  if (const Json* s = json_member(root, "settings"); s && s->is_object()) {
    ChatSettings& t = c.settings;
    const std::string where = "settings.";
    FLASHSCOPE_RETURN_IF_ERROR(read_float(*s, "temperature", where, &t.temperature));
    FLASHSCOPE_RETURN_IF_ERROR(read_int(*s, "top_k", where, &t.top_k));
    FLASHSCOPE_RETURN_IF_ERROR(read_float(*s, "top_p", where, &t.top_p));
    FLASHSCOPE_RETURN_IF_ERROR(read_float(*s, "min_p", where, &t.min_p));
    FLASHSCOPE_RETURN_IF_ERROR(read_float(*s, "repetition_penalty", where, &t.repetition_penalty));
    FLASHSCOPE_RETURN_IF_ERROR(read_int(*s, "repeat_last_n", where, &t.repeat_last_n));
    FLASHSCOPE_RETURN_IF_ERROR(read_float(*s, "dry_multiplier", where, &t.dry_multiplier));
    FLASHSCOPE_RETURN_IF_ERROR(read_int(*s, "max_tokens", where, &t.max_tokens));
    FLASHSCOPE_RETURN_IF_ERROR(read_seed(*s, where, &t.seed));
    t.random_seed = json_bool(*s, "random_seed", t.random_seed);
  }
  const Json* messages = json_member(root, "messages");
  if (!messages || !messages->is_array()) return corrupt("\"messages\" is missing or not an array");
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const Json* role = json_member(m, "role");
    const Json* content = json_member(m, "content");
    if (!role || !role->is_string() || !content || !content->is_string()) {
      return corrupt("message " + std::to_string(i) + " needs string \"role\" and \"content\"");
    }
    const std::string& role_name = role->get_ref<const std::string&>();
    if (role_name != "user" && role_name != "assistant") {
      return corrupt("message " + std::to_string(i) + " has role \"" + role_name + "\" (user or assistant)");
    }
    Message msg;
    msg.role = role_name;
    msg.content = content->get<std::string>();
    if (const Json* stats = json_member(m, "stats")) {
      FLASHSCOPE_RETURN_IF_ERROR(stats_from_json(*stats, "message " + std::to_string(i) + " stats.", &msg.stats));
    }
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
  FLASHSCOPE_RETURN_IF_ERROR(check_regular_file(path));  // before the open a FIFO would block
  std::ifstream f(path, std::ios::binary);
  if (!f) return {StatusCode::kIoError, "cannot open " + path};
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) return {StatusCode::kIoError, "cannot read " + path};
  return conversation_from_json(text.str(), out);
}

}  // namespace flashscope::app
