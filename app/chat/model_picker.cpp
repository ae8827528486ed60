#include "chat/model_picker.hpp"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>

namespace flashscope::app {
namespace {

std::string size_label(uint64_t bytes) {
  char buf[32];
  if (bytes >= 1'000'000'000ull) std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  return buf;
}

void list(ModelPickerState& p) {
  p.models = list_models(model_search_dirs());
  p.listed = true;
}

void draw_table(ChatPanelState& state, EngineWorker& worker, const EngineSnapshot& snap, const UiFonts& fonts,
                bool switching) {
  ModelPickerState& p = state.picker;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingFixedFit |
                                ImGuiTableFlags_PadOuterX;
  if (!ImGui::BeginTable("##models", 8, flags)) return;
  // Every column as wide as its content: the window fits the table.
  for (const char* c : {"Model", "Architecture", "Parameters", "File", "Weights", "Context", "Chat", "Tokenizer"})
    ImGui::TableSetupColumn(c);
  ImGui::TableHeadersRow();
  for (const CatalogEntry& e : p.models) {
    const ModelFacts& f = e.facts;
    const bool in_use = same_file(f.path, snap.model_path) && snap.state != EngineState::kFailed;
    const bool loading = switching && same_file(f.path, snap.switching_to);
    ImGui::PushID(f.path.c_str());
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const bool selected = p.selected == f.path;
    if (in_use) ImGui::PushStyleColor(ImGuiCol_Text, palette::kAccent);
    if (ImGui::Selectable(f.file_name.c_str(), selected,
                          ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowDoubleClick)) {
      p.selected = f.path;
      if (ImGui::IsMouseDoubleClicked(0) && !in_use && !switching && e.error.empty()) pick_model(state, worker, f.path);
    }
    if (in_use) ImGui::PopStyleColor();
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s%s%s", f.path.c_str(), f.name.empty() ? "" : "\ngeneral.name: ",
                                                  f.name.c_str());
    if (in_use || loading) {
      ImGui::SameLine();
      ImGui::TextColored(in_use ? palette::kAccent : palette::kMuted, in_use ? "· in use" : "· loading…");
    }
    if (!e.error.empty()) {
      ImGui::TableNextColumn();
      ImGui::TextColored(palette::kError, "unreadable: %s", e.error.c_str());
      ImGui::PopID();
      continue;
    }
    ImGui::PushFont(fonts.mono);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(f.architecture.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(parameter_label(f.parameters).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(size_label(f.file_bytes).c_str());
    ImGui::TableNextColumn();
    // Two types keep the table narrow enough for a 1280-pixel window; all of them on hover.
    ImGui::TextUnformatted(weight_types_label(f, 2).c_str());
    if (f.weight_types.size() > 2 && ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", weight_types_label(f, f.weight_types.size()).c_str());
    ImGui::TableNextColumn();
    if (f.context_length > 0) ImGui::Text("%lld", static_cast<long long>(f.context_length));
    else ImGui::TextColored(palette::kMuted, "?");
    ImGui::PopFont();
    ImGui::TableNextColumn();
    if (f.has_chat_template) ImGui::TextUnformatted("template");
    else ImGui::TextColored(palette::kWarning, "none: completion");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(tokenizer_kind_label(f.tokenizer).c_str());
    ImGui::PopID();
  }
  ImGui::EndTable();
}

}  // namespace

void draw_model_picker(ChatPanelState& state, EngineWorker& worker, const EngineSnapshot& snap, const UiFonts& fonts) {
  ModelPickerState& p = state.picker;
  if (!p.open) {
    p.frames_open = 0;
    return;
  }
  if (!p.listed) list(p);
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  // Centred over its first frames: a window that sizes itself knows its size only once drawn.
  p.frames_open = p.frames_open + 1;
  ImGui::SetNextWindowPos(ImVec2(vp->WorkPos.x + vp->WorkSize.x * 0.5f, vp->WorkPos.y + vp->WorkSize.y * 0.45f),
                          p.frames_open <= 3 ? ImGuiCond_Always : ImGuiCond_Appearing, ImVec2(0.5f, 0.5f));
  // Sized by its content (the table), so a long error or a new row never hides below the edge.
  ImGui::SetNextWindowSizeConstraints(ImVec2(ImGui::GetFontSize() * 30.0f, 0.0f),
                                      ImVec2(vp->WorkSize.x * 0.95f, vp->WorkSize.y * 0.9f));
  if (!ImGui::Begin("Models", &p.open,
                    ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                        ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::End();
    return;
  }
  const bool switching = !snap.switching_to.empty();

  ImGui::PushFont(fonts.title);
  ImGui::TextUnformatted("Installed models");
  ImGui::PopFont();
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  std::string dirs;
  for (const std::string& d : model_search_dirs()) dirs += (dirs.empty() ? "" : ", ") + d;
  ImGui::TextColored(palette::kMuted, "in %s", dirs.c_str());
  ImGui::SameLine();
  if (ImGui::SmallButton("Rescan")) list(p);

  if (p.models.empty()) {
    ImGui::TextColored(palette::kMuted,
                       "No .gguf files there. scripts/fetch_model.sh fetches SmolLM2 (and gemma3-270m).");
  } else {
    draw_table(state, worker, snap, fonts, switching);
  }
  // The rows below span the table's width (a window that sizes itself has no width to fill).
  const float width = std::max(ImGui::GetItemRectSize().x, ImGui::GetFontSize() * 30.0f);

  const CatalogEntry* chosen = nullptr;
  for (const CatalogEntry& e : p.models)
    if (e.facts.path == p.selected) chosen = &e;
  const bool chosen_in_use = chosen && same_file(chosen->facts.path, snap.model_path) &&
                             snap.state != EngineState::kFailed;
  ImGui::BeginDisabled(!chosen || chosen_in_use || switching || !chosen->error.empty());
  if (ImGui::Button("Load selected")) pick_model(state, worker, chosen->facts.path);
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::TextColored(palette::kMuted, "or double-click a row");

  ImGui::Spacing();
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Other file");
  ImGui::SameLine();
  const float button_w = ImGui::CalcTextSize("Load file").x + ImGui::GetStyle().FramePadding.x * 2.0f;
  const float label_w = ImGui::CalcTextSize("Other file").x + ImGui::GetStyle().ItemSpacing.x;
  ImGui::SetNextItemWidth(width - label_w - button_w - ImGui::GetStyle().ItemSpacing.x);
  const bool entered = ImGui::InputTextWithHint("##path", "/path/to/model.gguf", &p.path_input,
                                                ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  ImGui::BeginDisabled(switching || p.path_input.empty());
  const bool load_file = ImGui::Button("Load file");
  ImGui::EndDisabled();
  if ((entered || load_file) && !switching && !p.path_input.empty()) pick_model(state, worker, p.path_input);

  // What happened: a load under way, the reason one failed, the mode the model runs in.
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);
  if (!p.path_error.empty()) ImGui::TextColored(palette::kError, "%s", p.path_error.c_str());
  if (switching) {
    ImGui::TextColored(palette::kMuted, "Loading %s on the engine's thread…", snap.switching_to.c_str());
  } else if (!snap.switch_error.empty()) {
    ImGui::TextColored(palette::kError, "%s", snap.switch_error.c_str());
    if (snap.state != EngineState::kFailed)
      ImGui::TextColored(palette::kMuted, "Still running %s.", snap.model_name.c_str());
  }
  ImGui::TextColored(palette::kMuted,
                     "A model without a chat template (a base model) runs as plain completion: "
                     "the conversation's text is continued, not answered as a chat.");
  ImGui::PopTextWrapPos();

  const ImVec2 pos = ImGui::GetWindowPos(), size = ImGui::GetWindowSize();
  const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  p.rect[0] = pos.x * fb.x;
  p.rect[1] = pos.y * fb.y;
  p.rect[2] = size.x * fb.x;
  p.rect[3] = size.y * fb.y;
  ImGui::End();
}

}  // namespace flashscope::app
