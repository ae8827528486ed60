#include "chat/chat_actions.hpp"

#include <algorithm>
#include <random>

namespace flashscope::app {

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Asks the engine to answer the conversation as it stands (the last message
// is the user's) and appends the empty assistant message it streams into.
void request_answer(ChatPanelState& state, Conversation& conversation, EngineWorker& worker) {
  ChatSettings& s = conversation.settings;
  if (s.random_seed) s.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  EngineRequest r;
  r.kind = EngineRequest::Kind::kGenerate;
  r.id = state.next_request_id++;
  r.messages = prompt_messages(conversation, conversation.messages.size());
  r.params = generate_params(s);
  conversation.messages.push_back(make_message("assistant", ""));
  state.pending_id = r.id;
  state.stop_requested = false;
  state.editing = false;
  state.follow_output = true;
  worker.submit(std::move(r));
}

}  // namespace

bool is_blank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

bool send_user_message(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                       const std::string& text) {
  if (state.pending_id != 0 || is_blank(text)) return false;
  conversation.messages.push_back(make_message("user", trimmed(text)));
  request_answer(state, conversation, worker);
  return true;
}

bool regenerate_last_answer(ChatPanelState& state, Conversation& conversation, EngineWorker& worker) {
  const auto& m = conversation.messages;
  if (state.pending_id != 0 || m.size() < 2 || m.back().role != "assistant" || m[m.size() - 2].role != "user") {
    return false;
  }
  conversation.messages.pop_back();
  request_answer(state, conversation, worker);
  return true;
}

bool edit_last_user_message(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                            const std::string& text) {
  if (state.pending_id != 0 || is_blank(text)) return false;
  auto& m = conversation.messages;
  size_t last_user = m.size();
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i].role == "user") {
      last_user = i;
      break;
    }
  }
  if (last_user == m.size()) return false;
  m.resize(last_user + 1);
  m.back().content = trimmed(text);
  request_answer(state, conversation, worker);
  return true;
}

void stop_answer(ChatPanelState& state, EngineWorker& worker) {
  if (state.pending_id == 0) return;
  state.stop_requested = true;
  worker.stop();
}

void new_chat(ChatPanelState& state, Conversation& conversation, EngineWorker& worker) {
  worker.reset(state.next_request_id++);
  conversation.messages.clear();
  state.pending_id = 0;
  state.stop_requested = false;
  state.editing = false;
  state.focus_input = true;
}

Status load_conversation_into(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                              const std::string& path) {
  Conversation loaded;
  FLASHSCOPE_RETURN_IF_ERROR(load_conversation(path, &loaded));
  new_chat(state, conversation, worker);
  conversation = std::move(loaded);
  state.model_defaults_applied = true;  // the file's system prompt stands
  return Status::ok_status();
}

void switch_model(ChatPanelState& state, EngineWorker& worker, const std::string& path) {
  if (state.pending_id != 0) state.stop_requested = true;  // the stopped answer finishes through sync
  state.picker.last_request = path;
  worker.load_model(state.next_request_id++, path);
}

bool pick_model(ChatPanelState& state, EngineWorker& worker, const std::string& path) {
  ModelPickerState& p = state.picker;
  auto facts = read_model_facts(path);
  if (!facts.ok()) {
    // The reader's message names the file already when it could open it.
    const std::string why = facts.status().to_string();
    p.path_error = why.find(path) != std::string::npos ? why : "cannot open " + path + ": " + why;
    return false;
  }
  p.path_error.clear();
  const bool listed = std::any_of(p.models.begin(), p.models.end(),
                                  [&](const CatalogEntry& e) { return same_file(e.facts.path, path); });
  if (!listed) p.models.push_back({std::move(facts).value(), std::string()});
  p.selected = path;
  switch_model(state, worker, path);
  return true;
}

void sync_chat_with_engine(ChatPanelState& state, Conversation& conversation, const EngineSnapshot& snap,
                           Metrics& metrics) {
  // The prompt a model starts with: its template's default, else the app's.
  const std::string model_default =
      snap.default_system_prompt.empty() ? std::string(kSmolLMDefaultSystemPrompt) : snap.default_system_prompt;
  if (!state.model_defaults_applied && snap.state != EngineState::kLoading) {
    if (snap.state != EngineState::kFailed && !snap.default_system_prompt.empty() && conversation.messages.empty() &&
        conversation.system_prompt == kSmolLMDefaultSystemPrompt) {
      conversation.system_prompt = snap.default_system_prompt;
    }
    // The model's sampling, as the CLI and the server answer it, unless the
    // user (a flag, a loaded conversation) set the settings already.
    if (snap.state != EngineState::kFailed && sampling_equals(conversation.settings, state.model_sampling)) {
      set_sampling(&conversation.settings, snap.sampling);
    }
    if (snap.state != EngineState::kFailed) state.model_sampling = snap.sampling;
    state.model_defaults_applied = true;
    state.model_generation = snap.model_generation;
    state.model_default_prompt = model_default;
  }
  if (state.model_generation != snap.model_generation && snap.state != EngineState::kLoading) {
    // After a switch: a prompt left at the previous model's default takes the new one's.
    if (state.model_generation != 0 && conversation.system_prompt == state.model_default_prompt) {
      conversation.system_prompt = model_default;
    }
    if (sampling_equals(conversation.settings, state.model_sampling)) set_sampling(&conversation.settings, snap.sampling);
    state.model_sampling = snap.sampling;
    state.model_generation = snap.model_generation;
    state.model_default_prompt = model_default;
  }
  if (state.pending_id == 0 || snap.answer_id != state.pending_id || conversation.messages.empty()) return;
  Message& m = conversation.messages.back();
  if (m.content.size() != snap.answer_text.size()) m.content = snap.answer_text;  // text only grows
  if (!snap.answer_done) return;
  m.error = snap.answer_error;
  if (m.error.empty()) {
    const GenerateStats& g = snap.stats;
    AnswerStats& s = m.stats;
    s.valid = true;
    s.prompt_tokens = g.prompt_tokens;
    s.generated_tokens = g.generated_tokens;
    s.context_tokens = snap.context_used;
    s.prefill_ms = g.prefill_ms;
    s.ttft_ms = g.ttft_ms;
    s.decode_ms = g.decode_ms;
    s.prefill_tokens_per_s = g.prefill_tokens_per_s;
    s.decode_tokens_per_s = g.decode_tokens_per_s;
    s.stop_reason = stop_reason_name(g.stop_reason);
    if (g.generated_tokens > 1) {
      metrics.answers.push_back(s);
      metrics.answer_decode_tps.push_back(static_cast<float>(g.decode_tokens_per_s));
      metrics.answer_prefill_tps.push_back(static_cast<float>(g.prefill_tokens_per_s));
      metrics.answer_ttft_ms.push_back(static_cast<float>(g.ttft_ms));
    }
  }
  state.pending_id = 0;
  state.stop_requested = false;
}

}  // namespace flashscope::app
