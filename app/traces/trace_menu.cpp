// File → Open trace…: a path field in a modal (Debian's Dear ImGui 1.86 has
// no file dialog), read with read_trace; a bad file keeps the dialog open
// with the reader's message (what is wrong and where), and also leaves it
// above the trace views until the next open.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>

#include "dashboard/dashboard.hpp"

namespace flashscope::app {

namespace {

constexpr const char* kOpenTitle = "Open trace";

// Dear ImGui 1.86 names only a few letter keys; the GLFW backend's key
// indices are GLFW key codes, which for letters are their ASCII capitals.
// Also while a text field has the keyboard, which is almost always (the
// chat box keeps it): Ctrl+O and Ctrl+Q type nothing and no field uses them.
bool ctrl_pressed(char letter) {
  const ImGuiIO& io = ImGui::GetIO();
  return io.KeyCtrl && !io.KeyShift && !io.KeyAlt && ImGui::IsKeyPressed(letter, false);
}

}  // namespace

void draw_file_menu(DashboardState& state, TraceSources& sources, bool* quit) {
  if (ctrl_pressed('O')) state.open_dialog_requested = true;
  if (ctrl_pressed('Q')) *quit = true;
  if (!ImGui::BeginMenu("File")) return;
  if (ImGui::MenuItem("Open trace\xE2\x80\xA6", "Ctrl+O")) state.open_dialog_requested = true;
  if (ImGui::MenuItem("Close replayed trace", nullptr, false, static_cast<bool>(sources.replay.trace)))
    close_replay(sources);
  ImGui::Separator();
  if (ImGui::MenuItem("Quit", "Ctrl+Q")) *quit = true;
  ImGui::EndMenu();
}

void draw_open_trace_dialog(DashboardState& state, TraceSources& sources) {
  if (state.open_dialog_requested) {
    ImGui::OpenPopup(kOpenTitle);
    state.open_dialog_requested = false;
  }
  // Centred, and its height fitted to the content every frame: a reader's
  // error appears under the path after the dialog opened, and a height
  // fixed at opening would scroll the buttons out of view.
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->GetCenter(), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSize(ImVec2(std::min(ImGui::GetFontSize() * 40.0f, vp->WorkSize.x * 0.9f), 0.0f),
                           ImGuiCond_Always);
  if (!ImGui::BeginPopupModal(kOpenTitle, nullptr, ImGuiWindowFlags_NoSavedSettings)) {
    state.open_dialog_rect[2] = 0.0f;
    return;
  }
  ImGui::TextUnformatted("A trace file written by flashscope-cli trace (or the runtime's write_trace):");
  if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(-1.0f);
  const bool enter = ImGui::InputText("##trace_path", &state.open_path, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::TextColored(palette::kMuted, "e.g. assets/traces/cpu-example.fstrace; relative paths start at %s",
                     "the working directory");
  if (!sources.replay_error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kError);
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(sources.replay_error.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
  }
  if (ImGui::Button("Open") || enter) {
    if (open_replay(sources, state.open_path).ok()) ImGui::CloseCurrentPopup();
  }
  state.open_buttons_visible = ImGui::IsItemVisible();
  ImGui::SameLine();
  if (ImGui::Button("Cancel") || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) ImGui::CloseCurrentPopup();
  state.open_buttons_visible = state.open_buttons_visible && ImGui::IsItemVisible();
  const ImVec2 a = ImGui::GetWindowPos(), size = ImGui::GetWindowSize();
  const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  state.open_dialog_rect[0] = a.x * fb.x;
  state.open_dialog_rect[1] = a.y * fb.y;
  state.open_dialog_rect[2] = size.x * fb.x;
  state.open_dialog_rect[3] = size.y * fb.y;
  ImGui::EndPopup();
}

}  // namespace flashscope::app
