// The app's look: fonts (DejaVu Sans and Sans Mono from fonts-dejavu-core,
// or assets/fonts/), colours and sizes, all scaled for HiDPI.
//
// Scale comes from glfwGetWindowContentScale (1 on a normal screen, 2 on a
// HiDPI one): fonts are rasterized at size × scale rather than stretched,
// and every style size goes through ImGuiStyle::ScaleAllSizes.
#pragma once

#include <string>

#include <imgui.h>

namespace flashscope::app {

struct UiFonts {
  ImFont* body = nullptr;   // the default font: text and widgets
  ImFont* mono = nullptr;   // numbers in tables, formulas, token counts
  ImFont* title = nullptr;  // panel headings
  bool dejavu = false;      // false: ImGui's built-in bitmap font (note says why)
  float body_px = 0.0f;
  std::string note;         // shown in the status bar when the fallback is in use
};

// Clears io.Fonts and loads the fonts for `scale`. Call before the first
// frame, or between frames followed by recreating the font texture.
UiFonts load_fonts(float scale);

// Resets the style to the app's theme at `scale`.
void apply_style(float scale);

// Colours the panels share.
namespace palette {
inline const ImVec4 kAccent(0.46f, 0.73f, 0.00f, 1.00f);     // CUDA green: the assistant, progress
inline const ImVec4 kUser(0.47f, 0.69f, 1.00f, 1.00f);       // the user's messages
inline const ImVec4 kMuted(0.58f, 0.61f, 0.66f, 1.00f);      // secondary text
inline const ImVec4 kWarning(1.00f, 0.74f, 0.28f, 1.00f);    // attention, no GPU
inline const ImVec4 kError(1.00f, 0.42f, 0.42f, 1.00f);
inline const ImVec4 kUserBubble(0.13f, 0.17f, 0.24f, 1.00f);
inline const ImVec4 kAssistantBubble(0.13f, 0.15f, 0.13f, 1.00f);
inline const ImVec4 kCard(0.12f, 0.13f, 0.15f, 1.00f);
}  // namespace palette

}  // namespace flashscope::app
