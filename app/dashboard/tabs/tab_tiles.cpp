// Attention tiles: the traced head's q-tile × kv-tile grid twice — attention
// mass (viridis) and time per tile (magma) — with causal-skipped tiles left
// dark, diagonal tiles marked by the masked triangle they contain, sampled
// tiles by a dot; clicking a tile shows its softmax probabilities (log
// scale: they span orders of magnitude) and each row's most probable keys.
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

void refresh(TilesView& v, const Trace& t, uint64_t version) {
  if (v.version == version) return;
  v.version = version;
  v.grid = viz::build_tile_grid(t);
  const TileCoord c = viz::default_tile(v.grid);
  v.sel_q = c.q_tile;
  v.sel_k = c.kv_tile;
  v.block = viz::extract_prob_block(t, v.sel_q, v.sel_k);
  v.block_row = -1;
}

std::string percent(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 0.1f ? "%.0f%%" : v >= 0.001f ? "%.1f%%" : "%.2g%%", 100.0f * v);
  return buf;
}

// Index labels along the top and left of a grid drawn at `origin`, every
// step-th tile, the step chosen so labels never touch (round steps: 1, 2, 4, 8…).
void tile_labels(ImDrawList* dl, ImVec2 origin, int rows, int cols, float cell_w, float cell_h) {
  const ImU32 c = ImGui::GetColorU32(palette::kMuted);
  const float fs = ImGui::GetFontSize();
  auto step_for = [](float need, float cell) {
    int step = 1;
    while (step * cell < need) step *= 2;
    return step;
  };
  const int col_step = step_for(ImGui::CalcTextSize(std::to_string(cols - 1).c_str()).x + fs * 0.6f, cell_w);
  const int row_step = step_for(fs * 1.1f, cell_h);
  for (int k = 0; k < cols; k += col_step) {
    const std::string b = std::to_string(k);
    const float w = ImGui::CalcTextSize(b.c_str()).x;
    dl->AddText(ImVec2(origin.x + (k + 0.5f) * cell_w - w * 0.5f, origin.y - fs - 2.0f), c, b.c_str());
  }
  for (int q = 0; q < rows; q += row_step) {
    const std::string b = std::to_string(q);
    const float w = ImGui::CalcTextSize(b.c_str()).x;
    dl->AddText(ImVec2(origin.x - w - 4.0f, origin.y + (q + 0.5f) * cell_h - fs * 0.5f), c, b.c_str());
  }
}

// Marks shared by both heatmaps: the masked triangle of diagonal tiles, a
// stroke through skipped ones, a dot on sampled ones. (The selection is
// drawn over the baked grid: its outline reaches past the grid's edge.)
void decorate_tile(const TilesView& v, ImDrawList* dl, int q, int k, ImVec2 a, ImVec2 b) {
  const viz::TileCell& c = v.grid.at(q, k);
  const float w = b.x - a.x, h = b.y - a.y;
  if (c.flags & viz::kTileSkipped) {
    if (std::min(w, h) >= 6.0f)
      dl->AddLine(ImVec2(a.x + w * 0.2f, b.y - h * 0.2f), ImVec2(b.x - w * 0.2f, a.y + h * 0.2f),
                  IM_COL32(70, 73, 80, 255));
  } else if ((c.flags & viz::kTileMasked) && std::min(w, h) >= 5.0f) {
    // The causal mask hides the keys above the diagonal: the tile's upper-right triangle.
    dl->AddTriangleFilled(ImVec2(a.x + w * 0.55f, a.y), ImVec2(b.x, a.y), ImVec2(b.x, a.y + (b.y - a.y) * 0.45f),
                          IM_COL32(255, 255, 255, 150));
  }
  if (c.flags & viz::kTileSampled) {
    const float r = std::clamp(std::min(w, h) * 0.12f, 1.5f, 5.0f);
    dl->AddCircleFilled(ImVec2(a.x + r + 2.0f, b.y - r - 2.0f), r, IM_COL32(255, 255, 255, 230));
    dl->AddCircle(ImVec2(a.x + r + 2.0f, b.y - r - 2.0f), r, IM_COL32(0, 0, 0, 200));
  }
}

void tile_tooltip(const TilesView& v, const TraceMeta& m, int q, int k) {
  const viz::TileCell& c = v.grid.at(q, k);
  ImGui::BeginTooltip();
  ImGui::Text("q-tile %d (rows %d\xE2\x80\x93%d) \xC3\x97 kv-tile %d (keys %d\xE2\x80\x93%d)", q, q * m.block_q,
              std::min(m.q_len, (q + 1) * m.block_q) - 1, k, k * m.block_kv,
              std::min(m.kv_len, (k + 1) * m.block_kv) - 1);
  if (c.flags & viz::kTileSkipped) {
    ImGui::TextColored(palette::kMuted, "skipped: no row sees any of its keys (causal or window), never computed");
  } else {
    if (c.flags & viz::kTileHasMass) {
      ImGui::Text("mass %s of the average row's attention (%u rows see a key)", percent(c.mass).c_str(), c.rows);
      ImGui::Text("largest probability %.4g", c.max_prob);
    }
    if (c.flags & viz::kTileHasTime)
      ImGui::Text("time %s (a warp's mean, loads and math)", viz::format_us(c.time_us).c_str());
    if (c.flags & viz::kTileMasked)
      ImGui::TextColored(palette::kWarning, "partly masked: the diagonal or a window's edge crosses it");
  }
  ImGui::TextColored(
      palette::kMuted, "%s",
      (c.flags & viz::kTileSampled) ? "click: its probabilities" : "not sampled: no probabilities in this trace");
  ImGui::EndTooltip();
}

// One heatmap with its title, labels and colour bar; returns the clicked tile.
bool tile_heatmap(DashboardState& s, const Trace& t, const char* id, const char* title, float cell_w, float cell_h,
                  viz::ColorMap map, const viz::ColorScale& scale, bool time,
                  const std::function<std::string(float)>& label) {
  TilesView& v = s.tiles;
  const viz::TileGrid& g = v.grid;
  ImGui::BeginGroup();
  ImGui::TextUnformatted(title);
  const float margin = ImGui::CalcTextSize("000").x + 6.0f;
  const ImVec2 top = ImGui::GetCursorScreenPos();
  ImGui::Dummy(ImVec2(margin, ImGui::GetFontSize() + 2.0f));
  ImGui::SetCursorScreenPos(ImVec2(top.x + margin, top.y + ImGui::GetFontSize() + 2.0f));
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  auto fill = [&](int q, int k) -> ImU32 {
    const viz::TileCell& c = g.at(q, k);
    if (c.flags & viz::kTileSkipped) return dash::kSkippedFill;
    if (time) {
      if (!(c.flags & viz::kTileHasTime)) return dash::kNoDataFill;
      return dash::to_u32(viz::sample_colormap(map, viz::scale_position(scale, static_cast<float>(c.time_us))));
    }
    if (!(c.flags & viz::kTileHasMass)) return dash::kNoDataFill;
    return dash::to_u32(viz::sample_colormap(map, viz::scale_position(scale, c.mass)));
  };
  const char* widget = time ? "tiles_time" : "tiles_mass";
  const dash::GridHit hit =
      dash::cell_grid(id, s.pictures.get(widget), g.q_tiles, g.kv_tiles, cell_w, cell_h, fill,
                      [&](ImDrawList* dl, int q, int k, ImVec2 a, ImVec2 b) { decorate_tile(v, dl, q, k, a, b); });
  dash::note_widget(s, widget);
  if (v.sel_q >= 0 && v.sel_q < g.q_tiles && v.sel_k >= 0 && v.sel_k < g.kv_tiles) {
    ImVec2 a, b;
    dash::grid_cell_rect(hit, v.sel_q, v.sel_k, &a, &b);
    ImGui::GetWindowDrawList()->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), dash::kSelect, 0.0f, 0,
                                        2.5f);
  }
  tile_labels(ImGui::GetWindowDrawList(), origin, g.q_tiles, g.kv_tiles, cell_w, cell_h);
  if (hit.row >= 0) tile_tooltip(v, t.meta, hit.row, hit.col);
  ImGui::SetCursorScreenPos(ImVec2(origin.x, ImGui::GetCursorScreenPos().y + 2.0f));
  dash::color_bar(time ? "##time_bar" : "##mass_bar", map, scale, g.kv_tiles * cell_w, label, &s.labels, widget);
  ImGui::EndGroup();
  if (hit.clicked) {
    v.sel_q = hit.row;
    v.sel_k = hit.col;
    v.block = viz::extract_prob_block(t, v.sel_q, v.sel_k);
    v.block_row = -1;
  }
  return hit.clicked;
}

// What the selected tile is, in words, beside the heatmaps: always visible,
// where the tooltip needs a pointer.
void selected_tile_card(const TilesView& v, const TraceMeta& m, const UiFonts& fonts, float width) {
  if (v.sel_q < 0) return;
  const viz::TileCell& c = v.grid.at(v.sel_q, v.sel_k);
  ImGui::BeginGroup();
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);  // its lines wrap inside the room left for it
  ImGui::PushFont(fonts.title);
  ImGui::Text("Tile (%d, %d)", v.sel_q, v.sel_k);
  ImGui::PopFont();
  dash::muted("rows %d\xE2\x80\x93%d", v.sel_q * m.block_q, std::min(m.q_len, (v.sel_q + 1) * m.block_q) - 1);
  dash::muted("keys %d\xE2\x80\x93%d", v.sel_k * m.block_kv, std::min(m.kv_len, (v.sel_k + 1) * m.block_kv) - 1);
  ImGui::PushFont(fonts.mono);
  if (c.flags & viz::kTileSkipped) {
    ImGui::TextColored(palette::kMuted, "skipped");
  } else {
    if (c.flags & viz::kTileHasMass) {
      ImGui::Text("mass  %s", percent(c.mass).c_str());
      ImGui::Text("max p %.4f", c.max_prob);
    }
    if (c.flags & viz::kTileHasTime) ImGui::Text("time  %s", viz::format_us(c.time_us).c_str());
  }
  ImGui::PopFont();
  if (c.flags & viz::kTileMasked)
    ImGui::TextColored(palette::kWarning, "partly masked (diagonal or window edge)");
  else if (!(c.flags & viz::kTileSkipped))
    dash::muted("every pair visible");
  dash::muted("%s", (c.flags & viz::kTileSampled) ? "probabilities below" : "not sampled");
  ImGui::Spacing();
  dash::muted("Click a tile to select it;");
  dash::muted("\xE2\x97\x8F sampled, \xE2\x97\xA5 diagonal,");
  dash::muted("dark: skipped (causal or window).");
  ImGui::PopTextWrapPos();
  ImGui::EndGroup();
}

void probability_view(DashboardState& s, const Trace& t, const UiFonts& fonts) {
  TilesView& v = s.tiles;
  const viz::ProbBlock& b = v.block;
  if (v.sel_q < 0) return;
  char title[160];
  std::snprintf(title, sizeof title, "Softmax probabilities of tile (%d, %d)%s", v.sel_q, v.sel_k,
                b.present ? " \xE2\x80\x94 log colour scale, masked pairs dark" : "");
  dash::heading(title, fonts);
  const float height = ImGui::GetContentRegionAvail().y - ImGui::GetStyle().ItemSpacing.y;
  if (!b.present && !(v.grid.cells.empty() ||
                      std::any_of(v.grid.cells.begin(), v.grid.cells.end(),
                                  [](const viz::TileCell& c) { return (c.flags & viz::kTileSampled) != 0; }))) {
    dash::wrapped_muted(
        "This trace holds no probability samples (flashscope-cli trace prefill --sample-tiles QT:KT,... "
        "records them; live captures always do).");
    return;
  }
  if (!b.present) {
    dash::wrapped_muted(
        "This tile was not sampled by the trace: sampled tiles carry a white dot. Live captures sample "
        "every computed tile of small grids, else the diagonal, the tiles beside it and the first "
        "column; flashscope-cli trace prefill --sample-tiles QT:KT,... picks them for a file.");
    return;
  }
  // The row the table lists: the clicked one, else the one with the most mass here.
  if (v.block_row < 0 || v.block_row >= b.rows) {
    double best = -1;
    for (int r = 0; r < b.rows; ++r) {
      if (b.row_mass(r) > best) {
        best = b.row_mass(r);
        v.block_row = r;
      }
    }
  }
  std::vector<float> positive;
  positive.reserve(b.prob.size());
  for (size_t i = 0; i < b.prob.size(); ++i) {
    if (!b.masked[i]) positive.push_back(b.prob[i]);
  }
  const viz::ColorScale scale = viz::fit_scale(positive, true, 1e-4f);
  // At most kMaxProbCells² cells are drawn: a GPU kernel's block (the Hopper
  // kernel's is 192 x 128) is shown in groups of sr x sk pairs, each drawn at
  // its largest probability, so the frame stays cheap under a software
  // renderer while the model generates. The tooltip names the group.
  constexpr int kMaxProbCells = 64;
  const int sr = viz::ceil_div(b.rows, kMaxProbCells), sk = viz::ceil_div(b.keys, kMaxProbCells);
  const int shown_rows = viz::ceil_div(b.rows, sr), shown_keys = viz::ceil_div(b.keys, sk);
  // The group's largest visible probability, or -1 when every pair in it is masked.
  auto group_max = [&](int gr, int gk) {
    float best = -1.0f;
    for (int r = gr * sr; r < std::min(b.rows, (gr + 1) * sr); ++r)
      for (int k = gk * sk; k < std::min(b.keys, (gk + 1) * sk); ++k)
        if (!b.is_masked(r, k)) best = std::max(best, b.at(r, k));
    return best;
  };
  // Up to half the width; rows may be shorter than keys are wide (a 64-row
  // block in a few hundred pixels of height), at most 2:1.
  const float avail_w = ImGui::GetContentRegionAvail().x;
  const float cell_h =
      std::clamp((height - ImGui::GetTextLineHeightWithSpacing() * 2.6f) / shown_rows, 1.0f, 10.0f);
  const float cell_w = std::clamp((avail_w * 0.5f) / shown_keys, cell_h, cell_h * 2.0f);
  ImGui::BeginGroup();
  const dash::GridHit hit = dash::cell_grid(
      "##probs", s.pictures.get("tiles_probs"), shown_rows, shown_keys, cell_w, cell_h,
      [&](int r, int k) -> ImU32 {
        const float p = group_max(r, k);
        if (p < 0.0f) return dash::kSkippedFill;
        return dash::to_u32(viz::sample_colormap(viz::ColorMap::kViridis, viz::scale_position(scale, p)));
      },
      [&](ImDrawList* dl, int r, int, ImVec2 a, ImVec2 bb) {
        if (v.block_row >= r * sr && v.block_row < (r + 1) * sr)
          dl->AddRectFilled(ImVec2(a.x, bb.y - 1.0f), ImVec2(bb.x, bb.y), IM_COL32(255, 255, 255, 200));
      });
  dash::note_widget(s, "tiles_probs");
  if (hit.row >= 0) {
    const int row = hit.row * sr, key = hit.col * sk;
    ImGui::BeginTooltip();
    if (sr == 1 && sk == 1) {
      if (b.is_masked(row, key)) {
        ImGui::Text("query %d, key %d: masked (the key comes after the query)", b.row0 + row, b.key0 + key);
      } else {
        ImGui::Text("query %d, key %d: p = %.4g", b.row0 + row, b.key0 + key, b.at(row, key));
      }
      if (!t.tokens.empty())
        ImGui::Text("%s \xE2\x86\x92 %s", viz::row_token_label(t, b.row0 + row).c_str(),
                    viz::key_token_label(t, b.key0 + key).c_str());
    } else {
      const float p = group_max(hit.row, hit.col);
      ImGui::Text("queries %d-%d, keys %d-%d: largest p = %.4g", b.row0 + row, b.row0 + std::min(b.rows, row + sr) - 1,
                  b.key0 + key, b.key0 + std::min(b.keys, key + sk) - 1, std::max(p, 0.0f));
    }
    ImGui::TextColored(palette::kMuted, "click: list this row's keys");
    ImGui::EndTooltip();
    if (hit.clicked) v.block_row = row;
  }
  dash::color_bar("##prob_bar", viz::ColorMap::kViridis, scale, shown_keys * cell_w, [](float x) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%.1e", x);
    return std::string(buf);
  }, &s.labels, "tiles_probs");
  ImGui::EndGroup();

  ImGui::SameLine(0.0f, ImGui::GetStyle().ItemSpacing.x * 3.0f);
  ImGui::BeginGroup();
  const int r = v.block_row;
  ImGui::Text("query %d puts %s of its attention here", b.row0 + r, percent(static_cast<float>(b.row_mass(r))).c_str());
  const bool tokens = !t.tokens.empty();
  if (tokens) dash::muted("query token: %s", viz::row_token_label(t, b.row0 + r).c_str());
  dash::muted("largest p in the tile %.4g \xC2\xB7 %d masked pairs", b.max_prob, b.masked_count);
  if (ImGui::BeginTable("##topkeys", tokens ? 4 : 3,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("key");
    if (tokens) ImGui::TableSetupColumn("token");
    ImGui::TableSetupColumn("p");
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 7.0f);
    ImGui::TableHeadersRow();
    ImGui::PushFont(fonts.mono);
    // As many keys as fit beside the block.
    const int fit = static_cast<int>((height - ImGui::GetTextLineHeightWithSpacing() * 3.5f) /
                                     (ImGui::GetTextLineHeight() + ImGui::GetStyle().CellPadding.y * 2.0f));
    const auto top = viz::top_keys(b, r, std::clamp(fit, 3, 10));
    for (const auto& [key, p] : top) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%d", key);
      if (tokens) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(viz::key_token_label(t, key).c_str());
      }
      ImGui::TableNextColumn();
      ImGui::Text("%.4f", p);
      ImGui::TableNextColumn();
      const ImVec2 c = ImGui::GetCursorScreenPos();
      const float w = ImGui::GetFontSize() * 7.0f * std::clamp(p / std::max(b.max_prob, 1e-12f), 0.0f, 1.0f);
      ImGui::GetWindowDrawList()->AddRectFilled(
          ImVec2(c.x, c.y + 3.0f), ImVec2(c.x + std::max(w, 1.0f), c.y + ImGui::GetTextLineHeight() - 3.0f),
          dash::to_u32(viz::sample_colormap(viz::ColorMap::kViridis, viz::scale_position(scale, p))));
      ImGui::Dummy(ImVec2(1, ImGui::GetTextLineHeight()));
    }
    ImGui::PopFont();
    ImGui::EndTable();
  }
  ImGui::EndGroup();
}

}  // namespace

void tab_attention_tiles(DashboardState& s, DashboardContext& ctx) {
  uint64_t version = 0;
  const Trace* t = draw_trace_header(s, ctx, &version);
  if (t == nullptr) return;
  refresh(s.tiles, *t, version);
  const viz::TileGrid& g = s.tiles.grid;
  const TraceMeta& m = t->meta;

  // Controls: the head (live captures can trace another one), the mass scale.
  const bool own_attention = ctx.sources.shown == TraceOrigin::kChat && !t->tokens.empty();
  if (own_attention && ctx.snap.config.n_layers > 1) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("Layer");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8.0f);
    int layer = std::clamp(s.chat_layer, 0, ctx.snap.config.n_layers - 1);
    if (ImGui::SliderInt("##layer", &layer, 0, ctx.snap.config.n_layers - 1)) s.chat_layer = layer;
    ImGui::SameLine();
  }
  if (ctx.sources.shown == TraceOrigin::kChat && m.q_heads > 1) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("Head");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8.0f);
    int head = std::clamp(s.chat_head, 0, m.q_heads - 1);
    if (ImGui::SliderInt("##head", &head, 0, m.q_heads - 1)) s.chat_head = head;
    if (ImGui::IsItemDeactivatedAfterEdit()) s.chat_head_changed = true;
    ImGui::SameLine();
    dash::help_marker(own_attention
                          ? "The model's own attention of this layer and head over the conversation, captured "
                            "again from the engine's cache (GQA: heads of one kv-head share keys)."
                          : "Re-captures with the records following this head (GQA: heads of one kv-head share "
                            "keys). The layer does not matter here: the inputs are synthetic, the same for every "
                            "layer.");
    ImGui::SameLine();
  } else {
    ImGui::AlignTextToFramePadding();
    ImGui::Text("Head %d", m.traced_head);
    ImGui::SameLine();
    dash::help_marker("A trace's tile and softmax records follow one head (flashscope-cli trace --trace-head H).");
    ImGui::SameLine();
  }
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  ImGui::Checkbox("log colour scale", &s.tiles.log_scale);
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  char counts[160];
  std::snprintf(counts, sizeof counts,
                "%d\xC3\x97%d tiles: %d full \xC2\xB7 %d diagonal \xC2\xB7 %d skipped (%.0f%% never computed)", g.q_tiles,
                g.kv_tiles, g.full, g.masked, g.skipped, 100.0 * g.skipped / std::max(1, g.q_tiles * g.kv_tiles));
  dash::wrapped_muted(counts);  // a narrow window: the rest on the next line, not cut off

  // The model's own attention: its tokens, or these tiles (tab_tokens.cpp).
  if (draw_token_attention(s, ctx, *t, version)) return;
  if (g.q_tiles == 0 || g.kv_tiles == 0) {
    dash::wrapped_muted("The trace's shape has no tiles (q_len or kv_len is 0).");
    return;
  }
  // Two heatmaps side by side, square cells, using about half the height left.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float margin = ImGui::CalcTextSize("000").x + 6.0f;
  const float card_w = ImGui::GetFontSize() * 12.0f;  // the selected tile's card beside them
  const float fs = ImGui::GetFontSize();
  // A wide grid (a decode: one q-tile, hundreds of KV tiles) side by side
  // with its twin would be a strip a few pixels high: the two go one above
  // the other across the width, their rows at least two lines tall.
  const bool stacked = g.kv_tiles >= 8 * g.q_tiles && g.kv_tiles > 32;
  const float grid_w = stacked ? avail.x - card_w - ImGui::GetStyle().ItemSpacing.x * 6.0f - margin
                               : (avail.x - card_w - ImGui::GetStyle().ItemSpacing.x * 8.0f) * 0.5f - margin;
  const float grid_h = stacked ? avail.y * 0.26f - ImGui::GetTextLineHeightWithSpacing() * 3.0f
                               : avail.y * 0.52f - ImGui::GetTextLineHeightWithSpacing() * 3.0f;
  // Square cells where they fit; a wide grid (long KV, few q-tiles) gets
  // cells up to 4× taller than wide (stacked: at least two lines) rather
  // than a sliver of a picture.
  const float cell_w = std::clamp(std::min(grid_w / g.kv_tiles, stacked ? 56.0f : grid_h / g.q_tiles), 1.0f, 56.0f);
  const float cell_h =
      stacked ? std::clamp(grid_h / g.q_tiles, std::max(cell_w, fs * 2.0f), std::max(fs * 3.0f, cell_w))
              : std::clamp(std::min(grid_h / g.q_tiles, cell_w * 4.0f), cell_w, 56.0f);

  std::vector<float> masses, times;
  for (const viz::TileCell& c : g.cells) {
    if (c.flags & viz::kTileHasMass) masses.push_back(c.mass);
    if (c.flags & viz::kTileHasTime) times.push_back(static_cast<float>(c.time_us));
  }
  const viz::ColorScale mass_scale = viz::fit_scale(masses, s.tiles.log_scale, 1e-3f);
  // Time: the 95th percentile tops the scale, so one preempted work item does not blacken the rest.
  bool time_clipped = false;
  const viz::ColorScale time_scale = viz::fit_scale_quantile(times, 0.95f, &time_clipped);
  const std::string mass_title = "Attention mass, head " + std::to_string(m.traced_head);
  if (g.has_mass) {
    tile_heatmap(s, *t, "##mass", mass_title.c_str(), cell_w, cell_h, viz::ColorMap::kViridis, mass_scale, false,
                 percent);
  } else {
    ImGui::BeginGroup();
    ImGui::TextUnformatted(mass_title.c_str());
    dash::muted("no tile_mass records in this trace");
    ImGui::EndGroup();
  }
  if (!stacked) ImGui::SameLine(0.0f, ImGui::GetStyle().ItemSpacing.x * 4.0f);
  if (g.has_time) {
    tile_heatmap(
        s, *t, "##time", "Time per tile (a warp's mean)", cell_w, cell_h, viz::ColorMap::kMagma, time_scale, true,
        [&](float us) { return (time_clipped && us >= time_scale.hi ? "\xE2\x89\xA5 " : "") + viz::format_us(us); });
  } else {
    ImGui::BeginGroup();
    ImGui::TextUnformatted("Time per tile");
    dash::muted("no warp spans in this trace");
    ImGui::EndGroup();
  }
  ImGui::SameLine(0.0f, ImGui::GetStyle().ItemSpacing.x * 4.0f);
  selected_tile_card(s.tiles, m, ctx.fonts, card_w);
  probability_view(s, *t, ctx.fonts);
}

}  // namespace flashscope::app
