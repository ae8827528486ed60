// Drawing pieces the dashboard's tabs share: headings and notes, colour
// conversions from viz/, grids of cells with hover and click, colour bars,
// time axes, legends, small line and bar charts — all ImDrawList rectangles
// and lines at the cursor, each reserving its space with a Dummy or an
// InvisibleButton so ImGui's layout flows around it.
#pragma once

#include <imgui.h>

#include <functional>
#include <string>
#include <vector>

#include "dashboard/baked_picture.hpp"
#include "dashboard/dashboard.hpp"
#include "viz/color_scale.hpp"

namespace flashscope::app::dash {

inline ImU32 to_u32(viz::Rgb c, int alpha = 255) { return IM_COL32(c.r, c.g, c.b, alpha); }

// Colours with a fixed meaning across tabs.
inline constexpr ImU32 kSkippedFill = IM_COL32(40, 42, 46, 255);  // causal-skipped tiles: never computed
inline constexpr ImU32 kNoDataFill = IM_COL32(58, 60, 66, 255);   // computed but not recorded
inline constexpr ImU32 kGridLine = IM_COL32(20, 21, 24, 255);
inline constexpr ImU32 kSelect = IM_COL32(255, 255, 255, 255);
inline constexpr ImU32 kAxis = IM_COL32(120, 126, 135, 255);
inline constexpr ImU32 kTail = IM_COL32(255, 90, 90, 60);

void heading(const char* text, const UiFonts& fonts);
void muted(const char* fmt, ...) IM_FMTARGS(1);
void wrapped_muted(const std::string& text);
// "? " marker whose tooltip explains a term.
void help_marker(const char* text);

// Records the last item's rectangle under `name` (framebuffer pixels) for the layout report.
void note_widget(DashboardState& s, const char* name);

// A rows × cols grid of cells of cell_w × cell_h at the cursor (1 px gaps),
// filled by fill(r, c), decorated by decorate(r, c, min, max) when given —
// both into `picture`, so they are rendered only when they change; the
// hovered cell's outline is drawn over it each frame. Reserves the space
// with an InvisibleButton `id`; returns the hovered cell, whether it was
// clicked, and where the grid lies (for grid_cell_rect).
struct GridHit {
  int row = -1, col = -1;
  bool clicked = false;
  ImVec2 origin;
  float cell_w = 0, cell_h = 0;
};
GridHit cell_grid(const char* id, BakedPicture& picture, int rows, int cols, float cell_w, float cell_h,
                  const std::function<ImU32(int, int)>& fill,
                  const std::function<void(ImDrawList*, int, int, ImVec2, ImVec2)>& decorate = nullptr);
// The rectangle cell (r, c) of that grid fills (its gap left out).
void grid_cell_rect(const GridHit& grid, int r, int c, ImVec2* min, ImVec2* max);

// Records text drawn at `at` (in the current font at font_px, 0: its size) as
// label WIDGET:TEXT (DashboardState::labels).
void note_label(std::vector<NamedRect>* labels, const char* widget, const std::string& text, ImVec2 at,
                float font_px = 0.0f);

// A horizontal colour bar at least `width` wide with labels under its ends
// and middle: wider where the labels need it, so they never run together
// (a narrow grid's "0%50100%"). Records them under `widget` when `labels` is given.
void color_bar(const char* id, viz::ColorMap map, const viz::ColorScale& scale, float width,
               const std::function<std::string(float)>& label, std::vector<NamedRect>* labels = nullptr,
               const char* widget = "");

// Tick marks and labels of a time axis [t0_us, t1_us] under x ∈ [x0, x1] at y.
void time_axis(ImDrawList* dl, float x0, float x1, float y, double t0_us, double t1_us);

// A small coloured square and its label, on the current line.
void swatch(ImU32 color, const char* label);

// A line chart of `values` (oldest first) in a box width × height at the
// cursor, y from 0 to y_max (labelled top_label at the top left); ref > 0
// draws a dashed reference line (SOL) labelled ref_label. Hover shows index
// and value through `tooltip`.
void line_chart(const char* id, const std::vector<float>& values, float y_max, float width, float height, ImU32 color,
                float ref, const char* ref_label, const std::string& top_label,
                const std::function<std::string(int, float)>& tooltip);

// Horizontal bars, one per label, scaled to v_max; value_text(i) is printed after each bar.
void bar_rows(const char* id, const std::vector<std::string>& labels, const std::vector<float>& values, float v_max,
              float width, const std::vector<ImU32>& colors, const std::function<std::string(int)>& value_text);

}  // namespace flashscope::app::dash
