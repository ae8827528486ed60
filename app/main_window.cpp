#include "main_window.hpp"

#include <imgui.h>

#include <algorithm>
#include <cmath>

namespace flashscope::app {

namespace {

PanelRect current_item_rect() {
  const ImVec2 a = ImGui::GetItemRectMin();
  const ImVec2 b = ImGui::GetItemRectMax();
  const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  return {a.x * fb.x, a.y * fb.y, (b.x - a.x) * fb.x, (b.y - a.y) * fb.y};
}

void draw_status_bar(const EngineSnapshot& snap, const DeviceSummary& device, const TraceSources& sources,
                     const UiFonts& fonts, float scale) {
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::PushFont(fonts.mono);
  ImGui::TextColored(palette::kMuted, "FlashScope %s", FLASHSCOPE_APP_VERSION);
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  const bool slow = io.Framerate < 30.0f;
  ImGui::TextColored(slow ? palette::kWarning : palette::kMuted, "UI %.0f fps (%.1f ms)", io.Framerate,
                     1000.0f / std::max(io.Framerate, 1e-3f));
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  ImGui::TextColored(snap.state == EngineState::kGenerating ? palette::kAccent : palette::kMuted,
                     "engine %s", snap.switching_to.empty() ? engine_state_name(snap.state) : "loading model");
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  if (device.cuda) ImGui::TextColored(palette::kMuted, "CUDA: %s", device.info.name.c_str());
  else ImGui::TextColored(palette::kMuted, "CPU backend (no CUDA device)");
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  if (const TraceSlot* shown = shown_slot(sources)) {
    ImGui::TextColored(palette::kMuted, "trace: %s", shown->provenance.c_str());
    ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  }
  if (fonts.dejavu) {
    ImGui::TextColored(palette::kMuted, "DejaVu Sans %.0f px · scale %.2f · %.0f×%.0f", fonts.body_px, scale,
                       io.DisplaySize.x, io.DisplaySize.y);
  } else {
    ImGui::TextColored(palette::kWarning, "%s", fonts.note.c_str());
  }
  ImGui::PopFont();
}

}  // namespace

void draw_main_window(FrameLayout& layout, ChatPanelState& chat, Conversation& conversation,
                      EngineWorker& worker, DashboardState& dashboard, DashboardContext& ctx, float scale,
                      bool* quit) {
  const EngineSnapshot& snap = ctx.snap;
  const UiFonts& fonts = ctx.fonts;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  // No background: glClear already paints it (one full-screen fill less, see platform/ui_theme.cpp).
  const ImGuiWindowFlags host_flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                      ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus |
                                      ImGuiWindowFlags_NoBackground | ImGuiWindowFlags_MenuBar;
  ImGui::Begin("FlashScope", nullptr, host_flags);
  if (ImGui::BeginMenuBar()) {
    draw_file_menu(dashboard, ctx.sources, quit);
    if (ImGui::BeginMenu("Model")) {
      if (ImGui::MenuItem("Choose model…")) chat.picker.open = true;
      ImGui::EndMenu();
    }
    ImGui::EndMenuBar();
  }
  draw_open_trace_dialog(dashboard, ctx.sources);

  const ImGuiStyle& style = ImGui::GetStyle();
  const float status_h = ImGui::GetFrameHeight();
  const float body_h = ImGui::GetContentRegionAvail().y - status_h - style.ItemSpacing.y;
  const float splitter_w = std::round(6.0f * scale);
  const float avail_w = ImGui::GetContentRegionAvail().x - splitter_w - 2.0f * style.ItemSpacing.x;
  layout.split = std::clamp(layout.split, 0.25f, 0.75f);
  const float chat_w = std::round(avail_w * layout.split);

  ImGui::BeginChild("Chat", ImVec2(chat_w, body_h), true);
  draw_chat_panel(chat, conversation, worker, snap, fonts);
  ImGui::EndChild();
  layout.chat = current_item_rect();

  ImGui::SameLine();
  ImGui::InvisibleButton("##splitter", ImVec2(splitter_w, body_h));
  if (ImGui::IsItemHovered() || ImGui::IsItemActive()) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeEW);
  if (ImGui::IsItemActive() && avail_w > 0.0f) layout.split += ImGui::GetIO().MouseDelta.x / avail_w;
  ImGui::SameLine();

  // A token hovered in the chat: the token view highlights its row.
  dashboard.tokens.hover_text = chat.hovered_text;
  dashboard.tokens.hover_byte = chat.hovered_byte;
  ImGui::BeginChild("Dashboard", ImVec2(0.0f, body_h), true);
  draw_dashboard(dashboard, ctx);
  ImGui::EndChild();
  layout.dashboard = current_item_rect();

  ImGui::BeginGroup();
  draw_status_bar(snap, ctx.device, ctx.sources, fonts, scale);
  ImGui::EndGroup();
  layout.status_bar = current_item_rect();
  ImGui::End();
}

}  // namespace flashscope::app
