#include "dashboard/dash_draw.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "viz/units.hpp"

namespace flashscope::app::dash {

void heading(const char* text, const UiFonts& fonts) {
  ImGui::Spacing();
  ImGui::PushFont(fonts.title);
  ImGui::TextUnformatted(text);
  ImGui::PopFont();
}

void muted(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kMuted);
  ImGui::TextV(fmt, args);
  ImGui::PopStyleColor();
  va_end(args);
}

void wrapped_muted(const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kMuted);
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextUnformatted(text.c_str(), text.c_str() + text.size());
  ImGui::PopTextWrapPos();
  ImGui::PopStyleColor();
}

void help_marker(const char* text) {
  ImGui::TextColored(palette::kMuted, "(?)");
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 32.0f);
    ImGui::TextUnformatted(text);
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

void note_widget(DashboardState& s, const char* name) {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  s.widgets.push_back({name, a.x * fb.x, a.y * fb.y, (b.x - a.x) * fb.x, (b.y - a.y) * fb.y});
}

namespace {

// Cells smaller than 4 px get no gap: the gaps would be most of the picture.
float cell_gap(float cell_w, float cell_h) { return std::min(cell_w, cell_h) >= 4.0f ? 1.0f : 0.0f; }

}  // namespace

void grid_cell_rect(const GridHit& grid, int r, int c, ImVec2* min, ImVec2* max) {
  const float gap = cell_gap(grid.cell_w, grid.cell_h);
  *min = ImVec2(grid.origin.x + c * grid.cell_w, grid.origin.y + r * grid.cell_h);
  *max = ImVec2(min->x + grid.cell_w - gap, min->y + grid.cell_h - gap);
}

GridHit cell_grid(const char* id, BakedPicture& picture, int rows, int cols, float cell_w, float cell_h,
                  const std::function<ImU32(int, int)>& fill,
                  const std::function<void(ImDrawList*, int, int, ImVec2, ImVec2)>& decorate) {
  GridHit hit;
  hit.origin = ImGui::GetCursorScreenPos();
  hit.cell_w = cell_w;
  hit.cell_h = cell_h;
  const ImVec2 size(std::max(1.0f, cols * cell_w), std::max(1.0f, rows * cell_h));
  ImGui::InvisibleButton(id, size);
  const bool hovered = ImGui::IsItemHovered();
  hit.clicked = ImGui::IsItemClicked();
  ImDrawList* dl = picture.begin(hit.origin, ImVec2(hit.origin.x + size.x, hit.origin.y + size.y));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      ImVec2 a, b;
      grid_cell_rect(hit, r, c, &a, &b);
      dl->AddRectFilled(a, b, fill(r, c));
      if (decorate) decorate(dl, r, c, a, b);
    }
  }
  picture.end();
  if (hovered) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    hit.col = std::clamp(static_cast<int>((m.x - hit.origin.x) / cell_w), 0, cols - 1);
    hit.row = std::clamp(static_cast<int>((m.y - hit.origin.y) / cell_h), 0, rows - 1);
    ImVec2 a, b;
    grid_cell_rect(hit, hit.row, hit.col, &a, &b);
    ImGui::GetWindowDrawList()->AddRect(a, b, IM_COL32(255, 255, 255, 160));
  } else {
    hit.clicked = false;
  }
  return hit;
}

void note_label(std::vector<NamedRect>* labels, const char* widget, const std::string& text, ImVec2 at,
                float font_px) {
  if (labels == nullptr) return;
  const ImVec2 size = font_px > 0.0f ? ImGui::GetFont()->CalcTextSizeA(font_px, FLT_MAX, 0.0f, text.c_str())
                                     : ImGui::CalcTextSize(text.c_str());
  const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  labels->push_back({std::string(widget) + ":" + text, at.x * fb.x, at.y * fb.y, size.x * fb.x, size.y * fb.y});
}

void color_bar(const char* id, viz::ColorMap map, const viz::ColorScale& scale, float width,
               const std::function<std::string(float)>& label, std::vector<NamedRect>* labels, const char* widget) {
  const float h = ImGui::GetTextLineHeight() * 0.6f;
  const std::string texts[3] = {label(viz::scale_value(scale, 0.0f)), label(viz::scale_value(scale, 0.5f)),
                                label(viz::scale_value(scale, 1.0f))};
  float w[3];
  for (int i = 0; i < 3; ++i) w[i] = ImGui::CalcTextSize(texts[i].c_str()).x;
  // The middle label centred, the ends flush with the bar's ends, a space between each.
  const float gap = ImGui::GetFontSize() * 0.6f;
  width = std::max({width, w[0] + w[1] + w[2] + 2.0f * gap, 2.0f * (std::max(w[0], w[2]) + gap) + w[1]});
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(id, ImVec2(width, h + ImGui::GetTextLineHeight()));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  constexpr int kSteps = 48;
  for (int i = 0; i < kSteps; ++i) {
    const float x0 = p.x + width * i / kSteps, x1 = p.x + width * (i + 1) / kSteps;
    dl->AddRectFilled(ImVec2(x0, p.y), ImVec2(x1 + 0.5f, p.y + h),
                      to_u32(viz::sample_colormap(map, (i + 0.5f) / kSteps)));
  }
  const ImU32 text = ImGui::GetColorU32(palette::kMuted);
  const float xs[3] = {p.x, p.x + (width - w[1]) * 0.5f, p.x + width - w[2]};
  for (int i = 0; i < 3; ++i) {
    const ImVec2 at(xs[i], p.y + h + 1.0f);
    dl->AddText(at, text, texts[i].c_str());
    note_label(labels, widget, texts[i], at);
  }
}

void time_axis(ImDrawList* dl, float x0, float x1, float y, double t0_us, double t1_us) {
  if (!(t1_us > t0_us) || x1 <= x0) return;
  const int max_ticks = std::max(2, static_cast<int>((x1 - x0) / (ImGui::GetFontSize() * 6.0f)));
  const ImU32 text = ImGui::GetColorU32(palette::kMuted);
  dl->AddLine(ImVec2(x0, y), ImVec2(x1, y), kAxis);
  for (const double t : viz::nice_ticks(0.0, t1_us - t0_us, max_ticks)) {
    const float x = x0 + static_cast<float>(t / (t1_us - t0_us)) * (x1 - x0);
    dl->AddLine(ImVec2(x, y), ImVec2(x, y + 4.0f), kAxis);
    const std::string s = viz::format_us(t);
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    dl->AddText(ImVec2(std::clamp(x - w * 0.5f, x0, x1 - w), y + 5.0f), text, s.c_str());
  }
}

void swatch(ImU32 color, const char* label) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float s = ImGui::GetTextLineHeight() * 0.75f;
  const float dy = (ImGui::GetTextLineHeight() - s) * 0.5f;
  ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + dy), ImVec2(p.x + s, p.y + dy + s), color, 2.0f);
  ImGui::Dummy(ImVec2(s, ImGui::GetTextLineHeight()));
  ImGui::SameLine(0.0f, ImGui::GetStyle().ItemInnerSpacing.x);
  ImGui::TextUnformatted(label);
  ImGui::SameLine(0.0f, ImGui::GetStyle().ItemSpacing.x * 2.5f);
}

void line_chart(const char* id, const std::vector<float>& values, float y_max, float width, float height, ImU32 color,
                float ref, const char* ref_label, const std::string& top_label,
                const std::function<std::string(int, float)>& tooltip) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(id, ImVec2(width, height));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRect(p, ImVec2(p.x + width, p.y + height), IM_COL32(60, 64, 70, 255));
  const float top = std::max({y_max, ref, 1e-12f});
  auto y_of = [&](float v) { return p.y + height - 2.0f - (height - 4.0f) * std::clamp(v / top, 0.0f, 1.0f); };
  if (!top_label.empty())
    dl->AddText(ImVec2(p.x + 4.0f, p.y + 2.0f), ImGui::GetColorU32(palette::kMuted), top_label.c_str());
  dl->AddText(ImVec2(p.x + 4.0f, p.y + height - ImGui::GetFontSize() - 2.0f), ImGui::GetColorU32(palette::kMuted), "0");
  if (ref > 0) {
    const float y = y_of(ref);
    for (float x = p.x; x < p.x + width; x += 8.0f)
      dl->AddLine(ImVec2(x, y), ImVec2(std::min(x + 4.0f, p.x + width), y), kAxis);
    if (ref_label) dl->AddText(ImVec2(p.x + 4.0f, y + 1.0f), ImGui::GetColorU32(palette::kMuted), ref_label);
  }
  const int n = static_cast<int>(values.size());
  if (n == 0) return;
  auto x_of = [&](int i) { return n == 1 ? p.x + width * 0.5f : p.x + 2.0f + (width - 4.0f) * i / (n - 1); };
  std::vector<ImVec2> pts;
  for (int i = 0; i < n; ++i) pts.emplace_back(x_of(i), y_of(values[static_cast<size_t>(i)]));
  if (n == 1)
    dl->AddCircleFilled(pts[0], 3.0f, color);
  else
    dl->AddPolyline(pts.data(), n, color, 0, 2.0f);
  if (ImGui::IsItemHovered() && tooltip) {
    const float mx = ImGui::GetIO().MousePos.x;
    const int i =
        n == 1 ? 0 : std::clamp(static_cast<int>(std::lround((mx - p.x - 2.0f) / (width - 4.0f) * (n - 1))), 0, n - 1);
    dl->AddCircleFilled(pts[static_cast<size_t>(i)], 4.0f, IM_COL32(255, 255, 255, 255));
    ImGui::SetTooltip("%s", tooltip(i, values[static_cast<size_t>(i)]).c_str());
  }
}

void bar_rows(const char* id, const std::vector<std::string>& labels, const std::vector<float>& values, float v_max,
              float width, const std::vector<ImU32>& colors, const std::function<std::string(int)>& value_text) {
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const int n = static_cast<int>(labels.size());
  float label_w = 0.0f;
  for (const std::string& l : labels) label_w = std::max(label_w, ImGui::CalcTextSize(l.c_str()).x);
  label_w += ImGui::GetStyle().ItemSpacing.x;
  const float value_w = ImGui::CalcTextSize("000.0 TFLOPS (00.0%)").x;
  const float bar_w = std::max(20.0f, width - label_w - value_w);
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(id, ImVec2(width, std::max(1.0f, line * n)));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  for (int i = 0; i < n; ++i) {
    const float y = p.y + i * line;
    dl->AddText(ImVec2(p.x, y), text, labels[static_cast<size_t>(i)].c_str());
    const float v = v_max > 0 ? std::clamp(values[static_cast<size_t>(i)] / v_max, 0.0f, 1.0f) : 0.0f;
    const float h = ImGui::GetTextLineHeight();
    dl->AddRectFilled(ImVec2(p.x + label_w, y + h * 0.15f), ImVec2(p.x + label_w + bar_w, y + h * 0.85f),
                      IM_COL32(45, 48, 53, 255), 2.0f);
    dl->AddRectFilled(ImVec2(p.x + label_w, y + h * 0.15f),
                      ImVec2(p.x + label_w + std::max(2.0f, bar_w * v), y + h * 0.85f),
                      colors[static_cast<size_t>(i) % colors.size()], 2.0f);
    const std::string s = value_text(i);
    dl->AddText(ImVec2(p.x + label_w + bar_w + ImGui::GetStyle().ItemSpacing.x, y), text, s.c_str());
  }
}

}  // namespace flashscope::app::dash
