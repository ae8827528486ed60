// The Attention tab on a trace of the model's own attention: the token map,
// every row (a query: a token of the conversation) × every key (a token it
// may attend to), coloured by probability on a log scale, zoomable from the
// whole conversation (groups of tokens, the kernel's tiles outlined) down to
// single tokens, with the tokens on both axes wherever a label has room; and
// beside it the selected row's most probable keys and the answer's decode
// steps as a sequence: one strip per generated token over the keys it could
// see, with the key it attended to most. Above them, every head of the
// layer in numbers — a bar row beside the head picker; a click traces that
// head. A token hovered in the chat has its row highlighted in both views.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "viz/token_label.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

// At most this many groups of tokens are drawn per axis: a frame stays cheap
// under the software renderer whatever the conversation's length.
constexpr int kMaxCells = 96;
constexpr int kMaxZoom = 8;
constexpr ImU32 kHoverBand = IM_COL32(255, 255, 255, 60);  // the row of the token hovered in the chat

void refresh(TokenView& v, const Trace& t, uint64_t version) {
  if (v.version == version) return;
  v.version = version;
  v.steps_first = -1;
  v.matrix = viz::build_token_matrix(t);
  v.sel_row = std::min(v.sel_row, v.matrix.rows - 1);
  v.window.first_row = v.window.first_key = 0;
}

// A label cut to at most `max_px` wide (whole UTF-8 characters), "…" marking a cut.
std::string fit_label(std::string s, float max_px) {
  if (ImGui::CalcTextSize(s.c_str()).x <= max_px) return s;
  while (!s.empty()) {
    do s.pop_back();
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80);
    if (!s.empty() && (static_cast<unsigned char>(s.back()) & 0x80)) s.pop_back();  // a lead byte left alone
    const std::string cut = s + "\xE2\x80\xA6";
    if (ImGui::CalcTextSize(cut.c_str()).x <= max_px) return cut;
  }
  return {};
}

// Text turned a quarter to the left (reading upwards), its baseline's start at `pos`.
void vertical_text(ImDrawList* dl, ImVec2 pos, ImU32 color, const char* text) {
  const int start = dl->VtxBuffer.Size;
  dl->AddText(pos, color, text);
  for (int i = start; i < dl->VtxBuffer.Size; ++i) {
    ImVec2& p = dl->VtxBuffer[i].pos;
    const float dx = p.x - pos.x, dy = p.y - pos.y;
    p = ImVec2(pos.x + dy, pos.y - dx);
  }
}

void clamp_pan(TokenView& v) { viz::clamp_window(v.window, v.matrix.rows, v.matrix.keys); }

void zoom_at(TokenView& v, int steps, int row, int key) {
  viz::zoom_window(v.window, v.matrix.rows, v.matrix.keys, steps, row, key, kMaxZoom);
}

// The map in a box `size` wide and tall (labels included).
void token_map(DashboardState& s, const Trace& t, float size) {
  TokenView& v = s.tokens;
  const viz::TokenMatrix& m = v.matrix;
  clamp_pan(v);
  const float fs = ImGui::GetFontSize();
  const float left = fs * 6.0f, top = fs * 5.0f;  // the rows' and the keys' labels
  const int vis_rows = std::min(viz::tokens_in_view(m.rows, v.window.zoom), m.rows - v.window.first_row);
  const int vis_keys = std::min(viz::tokens_in_view(m.keys, v.window.zoom), m.keys - v.window.first_key);
  // Groups of g tokens per cell when more tokens are in view than cells drawn.
  const int gr = viz::ceil_div(vis_rows, kMaxCells), gk = viz::ceil_div(vis_keys, kMaxCells);
  const int cells_r = viz::ceil_div(vis_rows, gr), cells_k = viz::ceil_div(vis_keys, gk);
  const float side = std::max(size - std::max(left, top), 40.0f);
  const float cell_w = side / cells_k, cell_h = std::min(side / cells_r, cell_w * 4.0f);

  std::vector<float> positive;
  positive.reserve(static_cast<size_t>(m.sampled));
  for (size_t i = 0; i < m.prob.size(); ++i)
    if (m.state[i] == viz::TokenMatrix::kSampled && m.prob[i] > 0.0f) positive.push_back(m.prob[i]);
  const viz::ColorScale scale = viz::fit_scale(positive, true, 1e-4f);

  const ImVec2 start = ImGui::GetCursorScreenPos();
  ImGui::SetCursorScreenPos(ImVec2(start.x + left, start.y + top));
  const int r0 = v.window.first_row, k0 = v.window.first_key;
  const int block_q = std::max(1, t.meta.block_q), block_kv = std::max(1, t.meta.block_kv);
  const dash::GridHit hit = dash::cell_grid(
      "##token_map", s.pictures.get("tokens_map"), cells_r, cells_k, cell_w, cell_h,
      [&](int r, int k) -> ImU32 {
        const float p = viz::group_max(m, r0 + r * gr, r0 + (r + 1) * gr, k0 + k * gk, k0 + (k + 1) * gk);
        if (p == -1.0f) return dash::kSkippedFill;
        if (p < 0.0f) return dash::kNoDataFill;
        return dash::to_u32(viz::sample_colormap(viz::ColorMap::kViridis, viz::scale_position(scale, p)));
      },
      [&](ImDrawList* dl, int r, int k, ImVec2 a, ImVec2 b) {
        // The kernel's tiles: a line where a q-tile or kv-tile begins.
        const int row = r0 + r * gr, key = k0 + k * gk;
        if (r > 0 && row / block_q != (row - gr) / block_q)
          dl->AddLine(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x, a.y - 1), IM_COL32(255, 255, 255, 70));
        if (k > 0 && key / block_kv != (key - gk) / block_kv)
          dl->AddLine(ImVec2(a.x - 1, a.y - 1), ImVec2(a.x - 1, b.y), IM_COL32(255, 255, 255, 70));
      });
  dash::note_widget(s, "tokens_map");
  const bool dragging = ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left);
  ImDrawList* dl = ImGui::GetWindowDrawList();

  // The selected row, outlined across the map.
  const int sel = v.sel_row >= 0 ? v.sel_row : m.rows - 1;
  if (sel >= r0 && sel < r0 + vis_rows) {
    const float y = hit.origin.y + ((sel - r0) / gr) * cell_h;
    dl->AddRect(ImVec2(hit.origin.x - 1, y - 1), ImVec2(hit.origin.x + cells_k * cell_w, y + cell_h), dash::kSelect,
                0.0f, 0, 1.5f);
  }

  // The token hovered in the chat: its row, banded across the map.
  if (v.hover_row >= r0 && v.hover_row < r0 + vis_rows) {
    const float y = hit.origin.y + ((v.hover_row - r0) / gr) * cell_h;
    dl->AddRectFilled(ImVec2(hit.origin.x - left, y - 1), ImVec2(hit.origin.x + cells_k * cell_w, y + cell_h),
                      kHoverBand);
  }

  // Token labels where a token has its own cell and a label has room.
  v.labels_drawn = 0;
  const ImU32 ink = ImGui::GetColorU32(palette::kMuted);
  if (gr == 1) {
    const int step = viz::label_step(cell_h, fs * 1.05f);
    for (int r = 0; step > 0 && r < cells_r; r += step) {
      const std::string l = fit_label(viz::row_token_label(t, r0 + r), left - 6.0f);
      const float w = ImGui::CalcTextSize(l.c_str()).x;
      dl->AddText(ImVec2(hit.origin.x - w - 4.0f, hit.origin.y + (r + 0.5f) * cell_h - fs * 0.5f),
                  r0 + r == sel || r0 + r == v.hover_row ? dash::kSelect : ink, l.c_str());
      ++v.labels_drawn;
    }
  }
  if (v.hover_row >= r0 && v.hover_row < r0 + vis_rows) {
    const std::string l = fit_label(viz::row_token_label(t, v.hover_row), left - 6.0f);
    const float y = hit.origin.y + ((v.hover_row - r0) / gr + 0.5f) * cell_h - fs * 0.5f;
    const float w = ImGui::CalcTextSize(l.c_str()).x;
    dl->AddRectFilled(ImVec2(hit.origin.x - w - 6.0f, y), ImVec2(hit.origin.x - 2.0f, y + fs),
                      IM_COL32(40, 44, 52, 255));
    dl->AddText(ImVec2(hit.origin.x - w - 4.0f, y), dash::kSelect, l.c_str());
  }
  if (gk == 1) {
    const int step = viz::label_step(cell_w, fs * 1.05f);
    for (int k = 0; step > 0 && k < cells_k; k += step) {
      const std::string l = fit_label(viz::key_token_label(t, k0 + k), top - 6.0f);
      vertical_text(dl, ImVec2(hit.origin.x + (k + 0.5f) * cell_w - fs * 0.5f, hit.origin.y - 4.0f), ink, l.c_str());
      ++v.labels_drawn;
    }
  }
  if (v.labels_drawn == 0 || gr > 1 || gk > 1) {
    char what[96];
    std::snprintf(what, sizeof what, "%d\xC3\x97%d tokens per cell", gr, gk);
    dl->AddText(ImVec2(start.x, start.y), ink, gr > 1 || gk > 1 ? what : "zoom in for the tokens");
  }

  // Hover: the pair and its probability; click: list the row's keys; the
  // wheel zooms at the pointer, a drag pans.
  if (hit.row >= 0) {
    const int row = r0 + hit.row * gr, key = k0 + hit.col * gk;
    ImGui::BeginTooltip();
    if (gr == 1 && gk == 1) {
      ImGui::Text("%s \xE2\x86\x92 %s", viz::row_token_label(t, row).c_str(), viz::key_token_label(t, key).c_str());
      const uint8_t st = m.at_state(row, key);
      if (st == viz::TokenMatrix::kMasked)
        ImGui::TextColored(palette::kMuted, "masked: the key comes later");
      else if (st == viz::TokenMatrix::kSampled)
        ImGui::Text("p = %.4g  (query %d, key %d)", m.at(row, key), row, key);
      else
        ImGui::TextColored(palette::kMuted, "not sampled by this trace");
    } else {
      const float p = viz::group_max(m, row, row + gr, key, key + gk);
      ImGui::Text("queries %d\xE2\x80\x93%d, keys %d\xE2\x80\x93%d: largest p %.4g", row,
                  std::min(m.rows, row + gr) - 1, key, std::min(m.keys, key + gk) - 1, std::max(p, 0.0f));
    }
    ImGui::TextColored(palette::kMuted, "click: this row's keys \xC2\xB7 wheel: zoom \xC2\xB7 drag: pan");
    ImGui::EndTooltip();
    if (hit.clicked) v.sel_row = row;
    const float wheel = ImGui::GetIO().MouseWheel;
    if (wheel != 0.0f) zoom_at(v, wheel > 0 ? 1 : -1, row, key);
  }
  if (dragging) {
    const ImVec2 d = ImGui::GetMouseDragDelta(ImGuiMouseButton_Left);
    const int dr = static_cast<int>(-d.y / (cell_h / gr)), dk = static_cast<int>(-d.x / (cell_w / gk));
    if (dr != 0 || dk != 0) {
      v.window.first_row += dr;
      v.window.first_key += dk;
      clamp_pan(v);
      ImGui::ResetMouseDragDelta(ImGuiMouseButton_Left);
    }
  }
  ImGui::SetCursorScreenPos(ImVec2(hit.origin.x, hit.origin.y + cells_r * cell_h + 4.0f));
  dash::color_bar("##token_bar", viz::ColorMap::kViridis, scale, cells_k * cell_w, [](float x) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%.1e", x);
    return std::string(buf);
  });
}

// The selected row's most probable keys, with their tokens.
void row_keys(TokenView& v, const Trace& t, const UiFonts& fonts, float height) {
  const viz::TokenMatrix& m = v.matrix;
  const int row = v.sel_row >= 0 ? v.sel_row : m.rows - 1;
  ImGui::Text("query %d %s attends to", row, viz::row_token_label(t, row).c_str());
  const int fit = std::max(3, static_cast<int>(height / ImGui::GetTextLineHeightWithSpacing()) - 2);
  const auto top = viz::top_row_keys(m, row, std::min(fit, 12));
  if (top.empty()) {
    dash::muted("no sampled key for this row");
    return;
  }
  if (ImGui::BeginTable("##token_keys", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::PushFont(fonts.mono);
    for (const auto& [key, p] : top) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%5d", key);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(fit_label(viz::key_token_label(t, key), ImGui::GetFontSize() * 9.0f).c_str());
      ImGui::TableNextColumn();
      const ImVec2 c = ImGui::GetCursorScreenPos();
      const float w = ImGui::GetFontSize() * 6.0f * std::clamp(p, 0.0f, 1.0f);
      ImGui::GetWindowDrawList()->AddRectFilled(
          ImVec2(c.x, c.y + 2.0f), ImVec2(c.x + std::max(w, 1.0f), c.y + ImGui::GetTextLineHeight() - 2.0f),
          dash::to_u32(viz::sample_colormap(viz::ColorMap::kViridis, 0.3f + 0.7f * p)));
      ImGui::Dummy(ImVec2(ImGui::GetFontSize() * 6.0f, ImGui::GetTextLineHeight()));
      ImGui::SameLine();
      ImGui::Text("%.3f", p);
    }
    ImGui::PopFont();
    ImGui::EndTable();
  }
}

// The answer's decode steps, one line each: the token the step fed, a strip
// of its probabilities over the conversation's keys (v.steps_matrix: on CUDA
// each step's own trace, as the decode kernel ran it), and its most probable
// key. A click selects the step's row (the map outlines it, the key list
// follows it).
void decode_steps(DashboardState& s, const Trace& t, const std::vector<int>& steps, float width, float height) {
  TokenView& v = s.tokens;
  const viz::TokenMatrix& m = v.steps_matrix;  // row i: steps[i]
  v.steps_drawn = 0;
  if (steps.empty()) return;
  const float fs = ImGui::GetFontSize();
  const float label_w = fs * 6.0f, top_w = fs * 8.0f;
  const float line_h = ImGui::GetTextLineHeightWithSpacing();
  const int shown = std::clamp(static_cast<int>(height / line_h) - 1, 1, static_cast<int>(steps.size()));
  // The last steps when not all fit (the end of the answer, where the strip
  // is longest) until the wheel scrolls them.
  const int last_first = static_cast<int>(steps.size()) - shown;
  const int first = v.steps_first < 0 ? last_first : std::min(v.steps_first, last_first);
  // Keys grouped so the strip stays within kMaxCells columns.
  const int g = viz::ceil_div(m.keys, kMaxCells);
  const int cols = viz::ceil_div(m.keys, g);
  const float strip_w = std::max(width - label_w - top_w, fs * 4.0f);
  std::vector<float> positive;
  for (int i = first; i < static_cast<int>(steps.size()); ++i)
    for (int k = 0; k < m.keys; ++k)
      if (m.at_state(i, k) == viz::TokenMatrix::kSampled && m.at(i, k) > 0.0f) positive.push_back(m.at(i, k));
  const viz::ColorScale scale = viz::fit_scale(positive, true, 1e-4f);
  const ImVec2 start = ImGui::GetCursorScreenPos();
  ImGui::SetCursorScreenPos(ImVec2(start.x + label_w, start.y));
  const dash::GridHit hit = dash::cell_grid(
      "##decode_steps", s.pictures.get("tokens_decode"), shown, cols, strip_w / cols, line_h,
      [&](int r, int k) -> ImU32 {
        const float p = viz::group_max(m, first + r, first + r + 1, k * g, (k + 1) * g);
        if (p == -1.0f) return dash::kSkippedFill;
        if (p < 0.0f) return dash::kNoDataFill;
        return dash::to_u32(viz::sample_colormap(viz::ColorMap::kViridis, viz::scale_position(scale, p)));
      });
  dash::note_widget(s, "tokens_decode");
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 ink = ImGui::GetColorU32(ImGuiCol_Text), muted = ImGui::GetColorU32(palette::kMuted);
  for (int r = 0; r < shown; ++r) {
    const int row = steps[first + r];
    const float y = hit.origin.y + r * line_h + (line_h - fs) * 0.5f;
    const std::string l = fit_label(viz::row_token_label(t, row), label_w - 6.0f);
    dl->AddText(ImVec2(hit.origin.x - ImGui::CalcTextSize(l.c_str()).x - 4.0f, y),
                row == v.sel_row ? dash::kSelect : ink, l.c_str());
    const auto top = viz::top_row_keys(m, first + r, 1);
    if (!top.empty()) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "\xE2\x86\x92 %s %.0f%%",
                    fit_label(viz::key_token_label(t, top[0].first), top_w - fs * 3.5f).c_str(),
                    100.0f * top[0].second);
      dl->AddText(ImVec2(hit.origin.x + cols * (strip_w / cols) + 6.0f, y), muted, buf);
    }
    if (row == v.hover_row)
      dl->AddRectFilled(ImVec2(hit.origin.x - label_w, hit.origin.y + r * line_h),
                        ImVec2(hit.origin.x + strip_w, hit.origin.y + (r + 1) * line_h), kHoverBand);
    if (row == v.sel_row)
      dl->AddRect(ImVec2(hit.origin.x - 1, hit.origin.y + r * line_h - 1),
                  ImVec2(hit.origin.x + strip_w, hit.origin.y + (r + 1) * line_h), dash::kSelect, 0.0f, 0, 1.5f);
    ++v.steps_drawn;
  }
  if (hit.row >= 0) {
    const int row = steps[first + hit.row], key = hit.col * g;
    ImGui::BeginTooltip();
    ImGui::Text("decode step %d fed %s", first + hit.row + 1, viz::row_token_label(t, row).c_str());
    if (g == 1 && m.at_state(first + hit.row, key) == viz::TokenMatrix::kSampled)
      ImGui::Text("\xE2\x86\x92 %s: p = %.4g", viz::key_token_label(t, key).c_str(), m.at(first + hit.row, key));
    ImGui::TextColored(palette::kMuted, "click: select this step%s",
                       shown < static_cast<int>(steps.size()) ? " \xC2\xB7 wheel: scroll" : "");
    ImGui::EndTooltip();
    if (hit.clicked) v.sel_row = row;
    const float wheel = ImGui::GetIO().MouseWheel;
    if (wheel != 0.0f) v.steps_first = std::clamp(first - static_cast<int>(wheel * 3.0f), 0, last_first);
  }
}

// Every head of the traced layer: four bars each — entropy (as a share of
// ln N, N the conversation's keys: 1 is uniform), mass on the first token
// (the attention sink), on the previous token, and on the sliding window
// (when the model has one) — the traced head outlined; a click traces another.
void head_summary_row(DashboardState& s, const Trace& t, const std::vector<HeadSummary>& heads) {
  TokenView& v = s.tokens;
  v.heads_drawn = 0;
  if (heads.empty()) return;
  static constexpr ImU32 kBarColor[4] = {IM_COL32(110, 165, 255, 255), IM_COL32(255, 189, 72, 255),
                                         IM_COL32(118, 186, 0, 255), IM_COL32(200, 120, 255, 255)};
  const bool window = heads[0].window_mass >= 0.0;
  const int bars = window ? 4 : 3;
  const float fs = ImGui::GetFontSize();
  const float cell_w =
      std::clamp(ImGui::GetContentRegionAvail().x * 0.6f / static_cast<float>(heads.size()), fs * 1.6f, fs * 3.0f);
  const float bar_h = fs * 1.6f, h = bar_h + ImGui::GetTextLineHeight() + 2.0f;
  const double ln_keys = std::log(std::max(2, t.meta.kv_len));
  auto value = [&](const HeadSummary& x, int b) {
    switch (b) {
      case 0:
        return x.entropy / ln_keys;
      case 1:
        return x.first_token_mass;
      case 2:
        return x.previous_token_mass;
      default:
        return x.window_mass;
    }
  };
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##head_summary", ImVec2(cell_w * static_cast<float>(heads.size()), h));
  dash::note_widget(s, "tokens_heads");
  const bool hovered = ImGui::IsItemHovered(), clicked = ImGui::IsItemClicked();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 muted = ImGui::GetColorU32(palette::kMuted);
  for (size_t i = 0; i < heads.size(); ++i) {
    const float x = p.x + cell_w * static_cast<float>(i);
    dl->AddRectFilled(ImVec2(x + 1, p.y), ImVec2(x + cell_w - 1, p.y + bar_h), IM_COL32(26, 28, 32, 255));
    const float bw = (cell_w - 4.0f) / bars;
    for (int b = 0; b < bars; ++b) {
      const float f = static_cast<float>(std::clamp(value(heads[i], b), 0.0, 1.0));
      dl->AddRectFilled(ImVec2(x + 2 + b * bw, p.y + bar_h * (1.0f - f)), ImVec2(x + 2 + (b + 1) * bw - 1, p.y + bar_h),
                        kBarColor[b]);
    }
    const std::string n = std::to_string(heads[i].head);
    dl->AddText(ImVec2(x + (cell_w - ImGui::CalcTextSize(n.c_str()).x) * 0.5f, p.y + bar_h + 1.0f),
                heads[i].head == t.meta.traced_head ? dash::kSelect : muted, n.c_str());
    if (heads[i].head == t.meta.traced_head)
      dl->AddRect(ImVec2(x, p.y - 1), ImVec2(x + cell_w, p.y + h), dash::kSelect, 0.0f, 0, 1.5f);
    ++v.heads_drawn;
  }
  if (hovered) {
    const int i =
        std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - p.x) / cell_w), 0, static_cast<int>(heads.size()) - 1);
    const HeadSummary& x = heads[static_cast<size_t>(i)];
    ImGui::BeginTooltip();
    ImGui::Text("head %d over %d rows", x.head, x.rows);
    ImGui::Text("entropy %.2f nats (uniform over all keys: %.2f)", x.entropy, ln_keys);
    ImGui::Text("first token (sink) %.1f%%", 100.0 * x.first_token_mass);
    ImGui::Text("previous token %.1f%%  \xC2\xB7  itself %.1f%%", 100.0 * x.previous_token_mass, 100.0 * x.self_mass);
    if (window) ImGui::Text("sliding window %.1f%%", 100.0 * x.window_mass);
    ImGui::TextColored(palette::kMuted, "click: trace this head");
    ImGui::EndTooltip();
    if (clicked && x.head != s.chat_head) {
      s.chat_head = x.head;
      s.chat_head_changed = true;
    }
  }
  ImGui::SameLine();
  ImGui::BeginGroup();
  const char* names[4] = {"entropy / ln N", "first token (sink)", "previous token", "window"};
  for (int b = 0; b < bars; ++b) {
    dash::swatch(kBarColor[b], names[b]);
    if (b % 2 == 0 && b + 1 < bars) ImGui::SameLine();
  }
  ImGui::EndGroup();
}

}  // namespace

bool draw_token_attention(DashboardState& s, DashboardContext& ctx, const Trace& t, uint64_t version) {
  if (t.tokens.empty()) return false;
  TokenView& v = s.tokens;
  refresh(v, t, version);
  if (v.matrix.rows == 0 || v.matrix.sampled == 0) return false;
  v.hover_row = v.hover_byte >= 0 ? viz::row_of_key(t, viz::key_at_text(t, v.hover_text, v.hover_byte)) : -1;
  v.hover_label = v.hover_row >= 0 ? viz::row_token_label(t, v.hover_row) : std::string();
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("View");
  ImGui::SameLine();
  if (ImGui::RadioButton("tokens", v.show_tokens)) v.show_tokens = true;
  ImGui::SameLine();
  if (ImGui::RadioButton("kernel tiles", !v.show_tokens)) v.show_tokens = false;
  if (!v.show_tokens) return false;
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  const int mid_r = v.window.first_row + viz::tokens_in_view(v.matrix.rows, v.window.zoom) / 2;
  const int mid_k = v.window.first_key + viz::tokens_in_view(v.matrix.keys, v.window.zoom) / 2;
  if (ImGui::Button("\xE2\x88\x92") && v.window.zoom > 0) zoom_at(v, -1, mid_r, mid_k);
  ImGui::SameLine();
  if (ImGui::Button("+") && v.window.zoom < kMaxZoom) zoom_at(v, 1, mid_r, mid_k);
  ImGui::SameLine();
  if (ImGui::Button("whole conversation")) {
    v.window.zoom = 0;
    clamp_pan(v);
  }
  ImGui::SameLine();
  dash::muted("%d of %d tokens in view", std::min(viz::tokens_in_view(v.matrix.keys, v.window.zoom), v.matrix.keys),
              v.matrix.keys);

  // The engine's numbers belong to the trace shown only when it is the engine's latest.
  const bool engine_trace = ctx.sources.shown == TraceOrigin::kChat && ctx.snap.attention_trace.get() == &t;
  if (engine_trace) {
    head_summary_row(s, t, ctx.snap.attention_heads);
  } else {
    v.heads_drawn = 0;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float bottom = ImGui::GetCursorScreenPos().y + avail.y;
  const float size = std::min(avail.x * 0.6f, avail.y - ImGui::GetTextLineHeightWithSpacing() * 2.5f);
  ImGui::BeginGroup();
  token_map(s, t, size);
  ImGui::EndGroup();
  ImGui::SameLine(0.0f, ImGui::GetStyle().ItemSpacing.x * 4.0f);
  ImGui::BeginGroup();
  // The answer's decode steps: the rows from the latest answer's first fed token on.
  const std::vector<int> steps =
      engine_trace ? viz::rows_from_key(t, ctx.snap.attention_answer_first) : std::vector<int>();
  row_keys(v, t, ctx.fonts, steps.empty() ? avail.y * 0.5f : avail.y * 0.3f);
  if (!steps.empty()) {
    const std::vector<Trace>* own = ctx.snap.attention_steps.get();
    if (v.steps_version != version || v.steps_key != ctx.snap.attention_answer_first || v.steps_source != own) {
      v.steps_matrix = viz::step_rows_matrix(v.matrix, t, steps, own != nullptr ? *own : std::vector<Trace>(),
                                             &v.steps_own);
      v.steps_version = version;
      v.steps_key = ctx.snap.attention_answer_first;
      v.steps_source = own;
    }
    ImGui::Spacing();
    ImGui::Text("The answer, step by step (%zu decode steps)", steps.size());
    dash::muted("each token fed back \xE2\x86\x92 its strongest key");
    decode_steps(s, t, steps, ImGui::GetContentRegionAvail().x, bottom - ImGui::GetCursorScreenPos().y);
  } else {
    v.steps_drawn = 0;
    v.steps_own = 0;
  }
  ImGui::EndGroup();
  return true;
}

}  // namespace flashscope::app
