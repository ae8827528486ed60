#include "platform/ui_theme.hpp"

#include <cmath>

#include "platform/paths.hpp"

namespace flashscope::app {

namespace {

// Latin, Greek, Cyrillic, phonetic and sub/superscript letters (Kᵀ, Vⱼ),
// punctuation, arrows, maths, box drawing, blocks and shapes: what DejaVu
// covers and a model's answers or our labels use.
constexpr ImWchar kGlyphRanges[] = {
    0x0020, 0x00FF, 0x0100, 0x024F, 0x0370, 0x03FF, 0x0400, 0x04FF, 0x1D00, 0x1DBF,  // ᵀ
    0x2000, 0x206F, 0x2070, 0x209F,  // super- and subscripts
    0x20A0, 0x20CF, 0x2100, 0x214F, 0x2190, 0x21FF, 0x2200, 0x22FF, 0x2300, 0x23FF, 0x2500, 0x25FF,
    0x2C60, 0x2C7F,  // ⱼ
    0,
};

constexpr float kBodyPx = 16.0f;
constexpr float kMonoPx = 15.0f;
constexpr float kTitlePx = 19.0f;

}  // namespace

UiFonts load_fonts(float scale) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  UiFonts fonts;
  fonts.body_px = std::round(kBodyPx * scale);
  const std::string sans = find_font("DejaVuSans.ttf");
  const std::string mono = find_font("DejaVuSansMono.ttf");
  const std::string bold = find_font("DejaVuSans-Bold.ttf");
  ImFontConfig cfg;
  cfg.OversampleH = 2;
  cfg.OversampleV = 1;
  if (!sans.empty()) {
    fonts.body = io.Fonts->AddFontFromFileTTF(sans.c_str(), fonts.body_px, &cfg, kGlyphRanges);
  }
  if (fonts.body) {
    fonts.dejavu = true;
    fonts.mono = mono.empty() ? nullptr
                              : io.Fonts->AddFontFromFileTTF(mono.c_str(), std::round(kMonoPx * scale), &cfg,
                                                             kGlyphRanges);
    fonts.title = io.Fonts->AddFontFromFileTTF((bold.empty() ? sans : bold).c_str(), std::round(kTitlePx * scale),
                                               &cfg, kGlyphRanges);
  } else {
    // ImGui's 13 px bitmap font, scaled: readable, but ASCII only.
    ImFontConfig def;
    def.SizePixels = std::round(13.0f * scale);
    fonts.body = io.Fonts->AddFontDefault(&def);
    fonts.note = "DejaVu Sans not found (apt-get install fonts-dejavu-core, or put it in assets/fonts/): "
                 "using ImGui's built-in font";
    fonts.body_px = def.SizePixels;
  }
  if (!fonts.mono) fonts.mono = fonts.body;
  if (!fonts.title) fonts.title = fonts.body;
  return fonts;
}

void apply_style(float scale) {
  ImGuiStyle& style = ImGui::GetStyle();
  style = ImGuiStyle();
  ImGui::StyleColorsDark(&style);
  style.WindowPadding = ImVec2(12, 10);
  style.FramePadding = ImVec2(8, 5);
  style.ItemSpacing = ImVec2(8, 7);
  style.ItemInnerSpacing = ImVec2(6, 5);
  style.CellPadding = ImVec2(8, 4);
  style.ScrollbarSize = 14;
  style.GrabMinSize = 12;
  style.WindowRounding = 0;
  style.ChildRounding = 6;
  style.FrameRounding = 4;
  style.PopupRounding = 4;
  style.GrabRounding = 4;
  style.TabRounding = 4;
  style.ScrollbarRounding = 6;
  style.WindowBorderSize = 0;
  style.ChildBorderSize = 1;

  ImVec4* c = style.Colors;
  c[ImGuiCol_WindowBg] = ImVec4(0.08f, 0.09f, 0.10f, 1.00f);
  // Panels are told apart by their borders, not filled: every full-panel
  // fill is a blended pass over a million pixels, which software GL (Mesa
  // llvmpipe under Xvfb, VMs, remote desktops) pays per frame
  // (bench/TUNING.md#figures-moved-out-of-product-comments).
  c[ImGuiCol_ChildBg] = ImVec4(0.0f, 0.0f, 0.0f, 0.0f);
  c[ImGuiCol_PopupBg] = ImVec4(0.11f, 0.12f, 0.14f, 0.98f);
  c[ImGuiCol_Border] = ImVec4(0.22f, 0.24f, 0.27f, 1.00f);
  c[ImGuiCol_FrameBg] = ImVec4(0.16f, 0.17f, 0.19f, 1.00f);
  c[ImGuiCol_FrameBgHovered] = ImVec4(0.21f, 0.23f, 0.26f, 1.00f);
  c[ImGuiCol_FrameBgActive] = ImVec4(0.24f, 0.27f, 0.30f, 1.00f);
  c[ImGuiCol_Button] = ImVec4(0.19f, 0.21f, 0.24f, 1.00f);
  c[ImGuiCol_ButtonHovered] = ImVec4(0.27f, 0.36f, 0.18f, 1.00f);
  c[ImGuiCol_ButtonActive] = ImVec4(0.33f, 0.48f, 0.10f, 1.00f);
  c[ImGuiCol_Header] = ImVec4(0.16f, 0.18f, 0.20f, 1.00f);
  c[ImGuiCol_HeaderHovered] = ImVec4(0.22f, 0.26f, 0.22f, 1.00f);
  c[ImGuiCol_HeaderActive] = ImVec4(0.27f, 0.34f, 0.20f, 1.00f);
  c[ImGuiCol_Tab] = ImVec4(0.14f, 0.15f, 0.17f, 1.00f);
  c[ImGuiCol_TabHovered] = ImVec4(0.30f, 0.42f, 0.14f, 1.00f);
  c[ImGuiCol_TabActive] = ImVec4(0.25f, 0.36f, 0.10f, 1.00f);
  c[ImGuiCol_TabUnfocused] = c[ImGuiCol_Tab];
  c[ImGuiCol_TabUnfocusedActive] = c[ImGuiCol_TabActive];
  c[ImGuiCol_CheckMark] = palette::kAccent;
  c[ImGuiCol_SliderGrab] = ImVec4(0.46f, 0.73f, 0.00f, 0.80f);
  c[ImGuiCol_SliderGrabActive] = palette::kAccent;
  c[ImGuiCol_PlotLines] = palette::kAccent;
  c[ImGuiCol_PlotHistogram] = ImVec4(0.40f, 0.62f, 0.05f, 1.00f);
  c[ImGuiCol_TextSelectedBg] = ImVec4(0.46f, 0.73f, 0.00f, 0.35f);
  c[ImGuiCol_Separator] = c[ImGuiCol_Border];
  c[ImGuiCol_TableHeaderBg] = ImVec4(0.15f, 0.16f, 0.18f, 1.00f);
  c[ImGuiCol_TableBorderStrong] = c[ImGuiCol_Border];
  c[ImGuiCol_TableBorderLight] = ImVec4(0.18f, 0.19f, 0.21f, 1.00f);
  style.ScaleAllSizes(scale);
}

}  // namespace flashscope::app
