#include "chat/chat_panel.hpp"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>

#include "chat/model_picker.hpp"
#include "chat/text_hit.hpp"

namespace flashscope::app {

namespace {

// Text that spans the panel, wrapped at its right edge minus `right_pad`;
// with `hover`, the byte under the pointer is recorded there.
void wrapped_text(const std::string& text, float right_pad = 0.0f, ChatPanelState* hover = nullptr) {
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float wrap = ImGui::GetContentRegionAvail().x - right_pad;
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + wrap);
  ImGui::TextUnformatted(text.c_str(), text.c_str() + text.size());
  ImGui::PopTextWrapPos();
  if (hover != nullptr && ImGui::IsItemHovered()) {
    const int byte = wrapped_text_byte_at(text, origin, wrap, ImGui::GetIO().MousePos);
    if (byte >= 0) {
      hover->hovered_text = text;
      hover->hovered_byte = byte;
    }
  }
}

float small_button_width(const char* label) {
  return ImGui::CalcTextSize(label, nullptr, true).x + ImGui::GetStyle().FramePadding.x * 2.0f;
}

// Places the next items, total_width wide, on the current line ending at
// screen x `right` (or right after what is already on the line).
void align_right(float total_width, float right) {
  ImGui::SameLine();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::SetCursorScreenPos(ImVec2(std::max(p.x, right - total_width), p.y));
}
void align_right(float total_width) {
  align_right(total_width, ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x);
}

void draw_header(ChatPanelState& state, const EngineSnapshot& snap, const UiFonts& fonts) {
  ImGui::PushFont(fonts.title);
  ImGui::TextUnformatted("Chat");
  ImGui::PopFont();
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  if (ImGui::SmallButton("Models…")) state.picker.open = true;
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  switch (snap.state) {
    case EngineState::kLoading:
      ImGui::TextColored(palette::kMuted, "loading %s…", snap.model_path.c_str());
      break;
    case EngineState::kFailed:
      ImGui::TextColored(palette::kError, "no model");
      break;
    default: {
      const ModelConfig& c = snap.config;
      if (snap.on_gpu) {  // what the weights take on the GPU, as they are kept there
        ImGui::TextColored(palette::kMuted, "%s · %d layers · %d/%d heads · d=%d · %.0f MB file · %.0f MB on GPU (%s) · CUDA",
                           snap.model_name.c_str(), c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
                           snap.weight_bytes / 1e6, snap.device_weight_bytes / 1e6, weight_format_name(snap.weights));
      } else {
        ImGui::TextColored(palette::kMuted, "%s · %d layers · %d/%d heads · d=%d · %.0f MB · CPU", snap.model_name.c_str(),
                           c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, snap.weight_bytes / 1e6);
      }
    }
  }
  if (!snap.switching_to.empty()) {
    const size_t slash = snap.switching_to.find_last_of('/');
    ImGui::TextColored(palette::kMuted, "loading %s…",
                       snap.switching_to.c_str() + (slash == std::string::npos ? 0 : slash + 1));
  }
  if (snap.state != EngineState::kLoading && snap.state != EngineState::kFailed && !snap.chat_format_notice.empty()) {
    // A fallback is a warning; a base model's plain completion is how it is meant to run.
    const bool fallback = snap.chat_format_fallback;
    ImGui::PushStyleColor(ImGuiCol_Text, fallback ? palette::kWarning : palette::kMuted);
    wrapped_text((fallback ? "Chat template: " : "") + snap.chat_format_notice +
                 (snap.chat_format == ChatFormatKind::kCompletion ? " (each message continues the text)" : ""));
    ImGui::PopStyleColor();
  }
  if (snap.state == EngineState::kFailed) {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kError);
    wrapped_text(snap.load_error);
    ImGui::PopStyleColor();
    ImGui::TextColored(palette::kMuted, "Run scripts/fetch_model.sh, or start with --model PATH.");
  }
}

// "N of M tokens" as a bar; amber past 90 %.
void draw_context_meter(const EngineSnapshot& snap) {
  const int used = snap.context_used;
  const int cap = std::max(1, snap.context_capacity);
  const float fraction = static_cast<float>(used) / static_cast<float>(cap);
  char overlay[160];
  std::snprintf(overlay, sizeof overlay, "context  %d of %d tokens  (%.1f%%)  ·  KV cache %.1f MB", used,
                snap.context_capacity, 100.0f * fraction, used * static_cast<double>(snap.kv_bytes_per_token) / 1e6);
  const bool nearly_full = fraction > 0.9f;
  if (nearly_full) ImGui::PushStyleColor(ImGuiCol_PlotHistogram, palette::kWarning);
  ImGui::ProgressBar(fraction, ImVec2(-1.0f, 0.0f), overlay);
  if (nearly_full) ImGui::PopStyleColor();
}

void draw_system_prompt(Conversation& conversation, const EngineSnapshot& snap) {
  std::string preview = conversation.system_prompt.empty() ? "(none)" : conversation.system_prompt;
  if (preview.size() > 64) preview = preview.substr(0, 61) + "…";
  for (char& ch : preview) {
    if (ch == '\n') ch = ' ';
  }
  // Plain completion and a base model's transcript leave system messages out (ChatFormat).
  const bool unused = snap.state != EngineState::kLoading && snap.state != EngineState::kFailed &&
                      (snap.chat_format == ChatFormatKind::kCompletion || snap.chat_format == ChatFormatKind::kTranscript);
  if (unused) preview = snap.chat_format == ChatFormatKind::kCompletion ? "not used in plain completion"
                                                                        : "not used: the model has no chat template";
  const std::string label = "System prompt  —  " + preview + "###system";
  if (!ImGui::CollapsingHeader(label.c_str())) return;
  const float h = ImGui::GetTextLineHeight() * 3.0f + ImGui::GetStyle().FramePadding.y * 2.0f;
  ImGui::InputTextMultiline("##system", &conversation.system_prompt, ImVec2(-1.0f, h));
  const std::string model_default =
      snap.default_system_prompt.empty() ? std::string(kSmolLMDefaultSystemPrompt) : snap.default_system_prompt;
  if (ImGui::SmallButton("Model default")) conversation.system_prompt = model_default;
  ImGui::SameLine();
  if (ImGui::SmallButton("None")) conversation.system_prompt.clear();
  ImGui::SameLine();
  ImGui::TextColored(palette::kMuted, unused ? "not used: this model has no chat template"
                                            : "applies from the next answer");
}

void draw_sampling(Conversation& conversation, const SamplingParams& model_sampling) {
  ChatSettings& s = conversation.settings;
  char label[200];
  if (s.temperature <= 0.0f) {
    std::snprintf(label, sizeof label, "Sampling  —  greedy · up to %d tokens###sampling", s.max_tokens);
  } else {
    std::snprintf(label, sizeof label,
                  "Sampling  —  temp %.2f · top-k %d · top-p %.2f · min-p %.2f · up to %d tokens###sampling",
                  s.temperature, s.top_k, s.top_p, s.min_p, s.max_tokens);
  }
  if (!ImGui::CollapsingHeader(label)) return;
  ImGui::PushItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  ImGui::SliderFloat("Temperature", &s.temperature, 0.0f, 2.0f, s.temperature <= 0.0f ? "0 (greedy)" : "%.2f");
  ImGui::SliderInt("Top-k", &s.top_k, 0, 200, s.top_k <= 0 ? "off" : "%d");
  ImGui::SliderFloat("Top-p", &s.top_p, 0.05f, 1.0f, s.top_p >= 1.0f ? "off" : "%.2f");
  ImGui::SliderFloat("Min-p", &s.min_p, 0.0f, 0.5f, s.min_p <= 0.0f ? "off" : "%.2f");
  ImGui::SliderFloat("Repetition penalty", &s.repetition_penalty, 1.0f, 2.0f,
                     s.repetition_penalty <= 1.0f ? "off" : "%.2f");
  ImGui::SliderFloat("DRY (ends loops)", &s.dry_multiplier, 0.0f, 2.0f, s.dry_multiplier <= 0.0f ? "off" : "%.2f");
  ImGui::SliderInt("Max tokens", &s.max_tokens, 1, 2048);
  ImGui::Checkbox("New seed for every answer", &s.random_seed);
  ImGui::BeginDisabled(s.random_seed);
  ImGui::InputScalar("Seed", ImGuiDataType_U64, &s.seed);
  ImGui::EndDisabled();
  ImGui::PopItemWidth();
  if (ImGui::SmallButton("Defaults")) {  // the model's, as the CLI and the server answer
    s = ChatSettings();
    set_sampling(&s, model_sampling);
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("Greedy")) s.temperature = 0.0f;
}

void draw_file_row(ChatPanelState& state, Conversation& conversation, EngineWorker& worker) {
  const std::string label = "Conversation file  —  " + state.file_path + "###file";
  if (!ImGui::CollapsingHeader(label.c_str())) return;
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  ImGui::InputText("##path", &state.file_path);
  ImGui::SameLine();
  if (ImGui::Button("Save")) {
    const Status s = save_conversation(state.file_path, conversation);
    state.file_message = s.ok() ? "saved " + std::to_string(conversation.messages.size()) + " messages to " +
                                      state.file_path
                                : s.to_string();
    state.file_message_is_error = !s.ok();
  }
  ImGui::SameLine();
  if (ImGui::Button("Load")) {
    const Status s = load_conversation_into(state, conversation, worker, state.file_path);
    state.file_message = s.ok() ? "loaded " + std::to_string(conversation.messages.size()) + " messages from " +
                                      state.file_path
                                : s.to_string();
    state.file_message_is_error = !s.ok();
  }
  if (!state.file_message.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, state.file_message_is_error ? palette::kError : palette::kMuted);
    wrapped_text(state.file_message);
    ImGui::PopStyleColor();
  }
}

// An answer's text; a thinking block (<think>…</think>) comes first as a
// collapsed node, so the answer reads first and the reasoning is a click away.
void draw_answer_text(const std::string& content, bool streaming, float pad, ChatPanelState* hover) {
  const char* cursor = "\xE2\x96\x8D";  // U+258D: a text cursor
  const ReasoningSplit split = split_reasoning(content);
  if (!split.has_reasoning) {
    wrapped_text(streaming ? content + cursor : content, pad, hover);
    return;
  }
  char label[96];
  std::snprintf(label, sizeof label, "%s  (%zu characters)###thinking",
                split.reasoning_open && streaming ? "Thinking…" : "Thinking", split.reasoning.size());
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kMuted);
  if (ImGui::TreeNodeEx(label, ImGuiTreeNodeFlags_None)) {
    wrapped_text(split.reasoning_open && streaming ? split.reasoning + cursor : split.reasoning, pad);
    ImGui::TreePop();
  }
  ImGui::PopStyleColor();
  if (!split.reasoning_open) wrapped_text(streaming ? split.content + cursor : split.content, pad, hover);
}

// One message as a rounded "bubble": role, buttons flush right, the text,
// and for answers a line of statistics. The background is drawn after the
// contents (on a lower draw-list channel) because its height is known only then.
void draw_message(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                  const EngineSnapshot& snap, const UiFonts& fonts, int index) {
  Message& m = conversation.messages[static_cast<size_t>(index)];
  const bool user = m.role == "user";
  const int n = static_cast<int>(conversation.messages.size());
  const bool streaming = state.pending_id != 0 && index == n - 1;
  const bool idle = state.pending_id == 0;
  const bool last_user = user && (index == n - 1 || (index == n - 2 && conversation.messages.back().role != "user"));
  const bool last_answer = !user && index == n - 1;
  const bool edit_here = state.editing && last_user && idle;

  ImGui::PushID(index);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  const float pad = style.FramePadding.x * 1.25f;
  const ImVec2 start = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  dl->ChannelsSplit(2);
  dl->ChannelsSetCurrent(1);
  ImGui::SetCursorScreenPos(ImVec2(start.x + pad, start.y + pad));
  ImGui::BeginGroup();

  // "SmolLM2-135M-Instruct.Q4_1" speaks as "SmolLM2-135M-Instruct"; in
  // plain completion the person writes text that the model continues.
  const bool completion = snap.state == EngineState::kIdle && snap.chat_format == ChatFormatKind::kCompletion;
  const std::string model =
      snap.model_name.empty() ? "Assistant" : snap.model_name.substr(0, snap.model_name.find('.'));
  const std::string who = user ? (completion ? "Your text" : "You") : completion ? model + " continues" : model;
  ImGui::PushFont(fonts.title);
  ImGui::TextColored(user ? palette::kUser : palette::kAccent, "%s", who.c_str());
  ImGui::PopFont();

  // Buttons, flush right on the role line.
  const bool copied = state.copied_message == index && ImGui::GetTime() - state.copied_at < 1.5;
  const char* copy_label = copied ? "Copied" : "Copy";
  const bool show_edit = last_user && idle && !state.editing;
  const bool show_regen = last_answer && idle && !m.content.empty();
  float buttons = small_button_width(copy_label);
  if (show_edit) buttons += small_button_width("Edit") + style.ItemSpacing.x;
  if (show_regen) buttons += small_button_width("Regenerate") + style.ItemSpacing.x;
  align_right(buttons, start.x + width - pad);
  if (show_edit && ImGui::SmallButton("Edit")) {
    state.editing = true;
    state.edit_text = m.content;
  }
  if (show_edit) ImGui::SameLine();
  if (show_regen && ImGui::SmallButton("Regenerate")) regenerate_last_answer(state, conversation, worker);
  if (show_regen) ImGui::SameLine();
  if (ImGui::SmallButton(copy_label)) {
    ImGui::SetClipboardText(m.content.c_str());
    state.copied_message = index;
    state.copied_at = ImGui::GetTime();
  }

  if (edit_here) {
    const float h = ImGui::GetTextLineHeight() * 4.0f + style.FramePadding.y * 2.0f;
    ImGui::InputTextMultiline("##edit", &state.edit_text, ImVec2(width - 2.0f * pad, h));
    if (ImGui::Button("Send edited")) edit_last_user_message(state, conversation, worker, state.edit_text);
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) state.editing = false;
  } else if (streaming && m.content.empty() && m.error.empty()) {
    if (snap.answer_id == state.pending_id && snap.state == EngineState::kPrefilling) {
      ImGui::TextColored(palette::kMuted, "prefilling %d tokens (%d reused from the KV cache)…",
                         snap.answer_prompt_tokens, snap.answer_reused_tokens);
    } else if (snap.state == EngineState::kLoading) {
      ImGui::TextColored(palette::kMuted, "waiting for the model to load…");
    } else {
      ImGui::TextColored(palette::kMuted, "thinking…");
    }
  } else if (!user) {
    draw_answer_text(m.content, streaming, pad, &state);
  } else {
    wrapped_text(m.content, pad, &state);
  }

  if (!m.error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kError);
    wrapped_text(m.error, pad);
    ImGui::PopStyleColor();
  }
  if (!user) {
    ImGui::PushFont(fonts.mono);
    if (streaming && snap.answer_id == state.pending_id && snap.answer_tokens > 0) {
      ImGui::TextColored(palette::kMuted, "%d tokens · %.1f tok/s%s", snap.answer_tokens,
                         snap.answer_live_tokens_per_s, state.stop_requested ? " · stopping…" : "");
    } else if (m.stats.valid) {
      const AnswerStats& s = m.stats;
      ImGui::TextColored(palette::kMuted, "%d tokens · %.1f tok/s · prefill %d tok %.0f ms · TTFT %.0f ms · %s",
                         s.generated_tokens, s.decode_tokens_per_s, s.prompt_tokens, s.prefill_ms, s.ttft_ms,
                         stop_reason_label(s.stop_reason));
    }
    ImGui::PopFont();
  }
  ImGui::EndGroup();

  const float bottom = ImGui::GetItemRectMax().y + pad;
  dl->ChannelsSetCurrent(0);
  dl->AddRectFilled(start, ImVec2(start.x + width, bottom),
                    ImGui::GetColorU32(user ? palette::kUserBubble : palette::kAssistantBubble), style.ChildRounding);
  dl->AddRectFilled(start, ImVec2(start.x + 3.0f, bottom),
                    ImGui::GetColorU32(user ? palette::kUser : palette::kAccent), style.ChildRounding);
  dl->ChannelsMerge();
  ImGui::SetCursorScreenPos(ImVec2(start.x, bottom));
  ImGui::Dummy(ImVec2(width, style.ItemSpacing.y));
  ImGui::PopID();
}

void draw_transcript(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                     const EngineSnapshot& snap, const UiFonts& fonts, float height) {
  ImGui::BeginChild("##transcript", ImVec2(0.0f, height), true);
  // Stick to the bottom while the user has not scrolled up.
  const bool stick = state.follow_output || ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 2.0f;
  if (conversation.messages.empty()) {
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    ImGui::SetCursorPosY(avail.y * 0.45f);
    // A base model continues text rather than answering it.
    const bool completion = snap.state == EngineState::kIdle && snap.chat_format == ChatFormatKind::kCompletion;
    const char* first = completion ? "Write the start of a text; the model continues it." : "Ask the model anything.";
    for (const char* hint : {first, "Enter sends · Ctrl+Enter adds a line · Esc stops."}) {
      ImGui::SetCursorPosX(std::max(0.0f, (avail.x - ImGui::CalcTextSize(hint).x) * 0.5f));
      ImGui::TextColored(palette::kMuted, "%s", hint);
    }
  }
  for (int i = 0; i < static_cast<int>(conversation.messages.size()); ++i) {
    draw_message(state, conversation, worker, snap, fonts, i);
  }
  if (stick) ImGui::SetScrollHereY(1.0f);
  state.follow_output = false;
  ImGui::EndChild();
}

void draw_input(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                const EngineSnapshot& snap, float input_height) {
  const bool engine_ok = snap.state != EngineState::kFailed && snap.switching_to.empty();
  const bool idle = state.pending_id == 0;
  if (state.focus_input) {
    ImGui::SetKeyboardFocusHere();
    state.focus_input = false;
    state.focus_frames_left = 8;  // until the field is active (next frame, mostly), 8 at most
  }
  const bool entered = ImGui::InputTextMultiline(
      "##input", &state.input, ImVec2(-1.0f, input_height),
      ImGuiInputTextFlags_EnterReturnsTrue | ImGuiInputTextFlags_CtrlEnterForNewLine);
  if (state.focus_frames_left > 0) state.focus_frames_left = ImGui::IsItemActive() ? 0 : state.focus_frames_left - 1;
  if (state.input.empty() && !ImGui::IsItemActive()) {
    const char* placeholder =
        snap.chat_format == ChatFormatKind::kCompletion ? "Text for the model to continue…" : "Message the model…";
    const ImVec2 p = ImGui::GetItemRectMin();
    const ImGuiStyle& style = ImGui::GetStyle();
    ImGui::GetWindowDrawList()->AddText(ImVec2(p.x + style.FramePadding.x, p.y + style.FramePadding.y),
                                        ImGui::GetColorU32(palette::kMuted), placeholder);
  }
  bool send = entered;

  ImGui::BeginDisabled(!idle || !engine_ok || is_blank(state.input));
  send |= ImGui::Button("Send");
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(idle || state.stop_requested);
  if (ImGui::Button(state.stop_requested ? "Stopping…" : "Stop")) stop_answer(state, worker);
  ImGui::EndDisabled();
  ImGui::SameLine();
  const bool can_regen = idle && engine_ok && !conversation.messages.empty() &&
                         conversation.messages.back().role == "assistant";
  ImGui::BeginDisabled(!can_regen);
  if (ImGui::Button("Regenerate")) regenerate_last_answer(state, conversation, worker);
  ImGui::EndDisabled();
  ImGui::SameLine();
  if (ImGui::Button("New chat")) new_chat(state, conversation, worker);
  ImGui::SameLine();
  ImGui::BeginDisabled(conversation.messages.empty());
  if (ImGui::Button("Copy all")) ImGui::SetClipboardText(conversation_as_text(conversation).c_str());
  ImGui::EndDisabled();

  // Engine state, flush right.
  char status[96];
  if (snap.state == EngineState::kGenerating) {
    std::snprintf(status, sizeof status, "generating · %.1f tok/s", snap.answer_live_tokens_per_s);
  } else {
    std::snprintf(status, sizeof status, "engine: %s",
                  snap.switching_to.empty() ? engine_state_name(snap.state) : "loading model");
  }
  const float status_w = ImGui::CalcTextSize(status).x;
  ImGui::SameLine();
  if (ImGui::GetContentRegionAvail().x >= status_w) {  // only where it fits beside the buttons
    align_right(status_w);
    ImGui::AlignTextToFramePadding();
    ImGui::TextColored(snap.state == EngineState::kGenerating ? palette::kAccent : palette::kMuted, "%s", status);
  } else {
    ImGui::NewLine();
  }

  if (!idle && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) stop_answer(state, worker);
  if (send && idle && engine_ok && send_user_message(state, conversation, worker, state.input)) {
    state.input.clear();
  }
  if (entered) state.focus_input = true;  // Enter deactivates the field; keep typing
}

}  // namespace

void draw_chat_panel(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                     const EngineSnapshot& snap, const UiFonts& fonts) {
  state.hovered_text.clear();
  state.hovered_byte = -1;
  draw_header(state, snap, fonts);
  draw_context_meter(snap);
  ImGui::Spacing();
  ImGui::BeginDisabled(state.pending_id != 0);  // settings of a running answer are fixed
  draw_system_prompt(conversation, snap);
  draw_sampling(conversation, snap.sampling);
  draw_file_row(state, conversation, worker);
  ImGui::EndDisabled();
  ImGui::Spacing();

  const ImGuiStyle& style = ImGui::GetStyle();
  const float input_height = ImGui::GetTextLineHeight() * 3.0f + style.FramePadding.y * 2.0f;
  const float bottom = input_height + ImGui::GetFrameHeight() + style.ItemSpacing.y * 2.0f;
  draw_transcript(state, conversation, worker, snap, fonts,
                  std::max(ImGui::GetFrameHeight() * 3.0f, ImGui::GetContentRegionAvail().y - bottom));
  draw_input(state, conversation, worker, snap, input_height);
  draw_model_picker(state, worker, snap, fonts);
}

}  // namespace flashscope::app
