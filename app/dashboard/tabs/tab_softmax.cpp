// Online softmax: for one query row, the state the kernel carries from KV
// tile to KV tile — the running max m (with each tile's own max), the
// running sum l (relative to m, so it drops when m rises), the rescale
// factor exp(m_old − m) applied to l and the O accumulator, and what each
// tile finally contributes — then the epilogue's 1/l and the row's LSE.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "viz/color_scale.hpp"
#include "viz/token_label.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

constexpr ImU32 kMColor = IM_COL32(118, 186, 0, 255);
constexpr ImU32 kTileMaxColor = IM_COL32(170, 176, 185, 255);
constexpr ImU32 kLColor = IM_COL32(110, 165, 255, 255);
constexpr ImU32 kRiseColor = IM_COL32(255, 189, 72, 255);
constexpr ImU32 kSteadyColor = IM_COL32(95, 100, 110, 255);

void refresh(SoftmaxView& v, const Trace& t, uint64_t version) {
  if (v.version != version) {
    v.version = version;
    v.rows = viz::softmax_rows(t);
    // Start on the row that rescales most: the recurrence at its busiest.
    v.row_index = v.rows.empty() ? -1 : 0;
    int most = -1;
    for (size_t i = 0; i < v.rows.size(); ++i) {
      const viz::SoftmaxSeries s = viz::build_softmax_series(t, v.rows[i]);
      if (s.valid && s.max_rises > most) {
        most = s.max_rises;
        v.row_index = static_cast<int>(i);
      }
    }
    v.series = v.row_index >= 0 ? viz::build_softmax_series(t, v.rows[static_cast<size_t>(v.row_index)])
                                : viz::SoftmaxSeries();
  }
}

struct Track {
  const char* name;
  const char* what;
};

constexpr int kTracks = 4;
constexpr Track kTrackInfo[kTracks] = {
    {"running max m", "m after the tile (line) and the tile's own max (circles), natural-log units"},
    {"running sum l", "l = rescale\xC2\xB7l_old + \xCE\xA3 exp(s \xE2\x88\x92 m), relative to the current m"},
    {"rescale", "exp(m_old \xE2\x88\x92 m): 1 when the max held, < 1 when it rose (O and l shrink), 0 on the first tile"},
    {"final share",
     "the tile's share of the row's final softmax: tile_sum\xC2\xB7"
     "exp(m_t \xE2\x88\x92 m)/l"},
};

// Where the tracks sit: the names' column, the plot's x range cut into one
// slot per KV tile, and one band per track above the axis.
struct TrackGeometry {
  ImVec2 p;  // top left
  float width = 0, height = 0, axis_h = 0, track_h = 0;
  float gap = 6.0f;
  float x0 = 0, x1 = 0, slot = 0;
  int n_tiles = 0;

  float top(int k) const { return p.y + k * (track_h + gap); }
  float slot_x(int t) const { return x0 + (t + 0.5f) * slot; }
  // frac 0 (the band's bottom) .. 1 (its top) in track k.
  float y_in(int k, float frac) const {
    const float ty = top(k);
    return ty + track_h - 3.0f - (track_h - 6.0f) * std::clamp(frac, 0.0f, 1.0f);
  }
};

// Per-track value ranges: m's (padded by m_pad each side), l's and the share's maxima.
struct TrackRanges {
  float m_lo = INFINITY, m_hi = -INFINITY, m_pad = 0, l_hi = 0.0f, share_hi = 0.0f;
};

TrackRanges track_ranges(const viz::SoftmaxSeries& ser) {
  TrackRanges r;
  for (const viz::SoftmaxStep& st : ser.steps) {
    if (st.keys == 0) continue;
    r.m_lo = std::min({r.m_lo, st.m, st.tile_max});
    r.m_hi = std::max({r.m_hi, st.m, st.tile_max});
    r.l_hi = std::max(r.l_hi, st.l);
    r.share_hi = std::max(r.share_hi, static_cast<float>(st.share));
  }
  if (!(r.m_hi > r.m_lo)) {
    r.m_lo -= 1.0f;
    r.m_hi += 1.0f;
  }
  r.m_pad = (r.m_hi - r.m_lo) * 0.08f;
  r.m_lo -= r.m_pad;
  r.m_hi += r.m_pad;
  return r;
}

struct Tick {
  float frac;
  char label[16];
};

// Y ticks per track, in the track's units (the share in %), a label a line
// and a half apart at most. Returns the widest label's width: they get a
// column of their own between the tracks' names and the plot.
float track_ticks(const TrackRanges& r, float track_h, std::vector<Tick> (&ticks)[kTracks]) {
  const int max_ticks = std::max(2, static_cast<int>(track_h / (ImGui::GetFontSize() * 1.5f)));
  const float lo[kTracks] = {r.m_lo, 0.0f, 0.0f, 0.0f};
  const float hi[kTracks] = {r.m_hi, r.l_hi > 0 ? r.l_hi : 1.0f, 1.0f, r.share_hi > 0 ? 100.0f * r.share_hi : 100.0f};
  float tick_w = 0.0f;
  for (int k = 0; k < kTracks; ++k) {
    for (const double v : viz::nice_ticks(lo[k], hi[k], max_ticks)) {
      Tick t;
      t.frac = static_cast<float>((v - lo[k]) / (hi[k] - lo[k]));
      std::snprintf(t.label, sizeof t.label, k == 3 ? "%.0f%%" : "%.3g", std::abs(v) < 1e-9 ? 0.0 : v);
      tick_w = std::max(tick_w, ImGui::CalcTextSize(t.label).x);
      ticks[k].push_back(t);
    }
  }
  return tick_w;
}

// Each track's band (tiles the row sees no key of shaded), its name and its range.
void draw_track_bands(ImDrawList* dl, DashboardState& s, const TrackGeometry& g, const TrackRanges& r,
                      const viz::SoftmaxSeries& ser) {
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), muted = ImGui::GetColorU32(palette::kMuted);
  std::vector<bool> has(static_cast<size_t>(g.n_tiles), false);
  for (const viz::SoftmaxStep& st : ser.steps) {
    if (st.kv_tile < g.n_tiles) has[static_cast<size_t>(st.kv_tile)] = st.keys > 0;
  }
  for (int k = 0; k < kTracks; ++k) {
    const float ty = g.top(k);
    dl->AddRectFilled(ImVec2(g.x0, ty), ImVec2(g.x1, ty + g.track_h), IM_COL32(26, 28, 32, 255));
    for (int t = 0; t < g.n_tiles; ++t) {
      if (!has[static_cast<size_t>(t)]) {
        dl->AddRectFilled(ImVec2(g.x0 + t * g.slot, ty), ImVec2(g.x0 + (t + 1) * g.slot, ty + g.track_h),
                          dash::kSkippedFill);
      }
    }
    dl->AddText(ImVec2(g.p.x, ty + 2.0f), text, kTrackInfo[k].name);
    dash::note_label(&s.labels, "softmax_tracks", kTrackInfo[k].name, ImVec2(g.p.x, ty + 2.0f));
    char range[64] = "";
    if (k == 0) std::snprintf(range, sizeof range, "%.2f \xE2\x80\xA6 %.2f", r.m_lo + r.m_pad, r.m_hi - r.m_pad);
    if (k == 1) std::snprintf(range, sizeof range, "0 \xE2\x80\xA6 %.3g", r.l_hi);
    if (k == 2) std::snprintf(range, sizeof range, "0 \xE2\x80\xA6 1");
    if (k == 3) std::snprintf(range, sizeof range, "0 \xE2\x80\xA6 %.0f%%", 100.0f * r.share_hi);
    if (g.track_h >= ImGui::GetTextLineHeight() * 2.0f + 2.0f) {
      dl->AddText(ImVec2(g.p.x, ty + 2.0f + ImGui::GetTextLineHeight()), muted, range);
      dash::note_label(&s.labels, "softmax_tracks", range, ImVec2(g.p.x, ty + 2.0f + ImGui::GetTextLineHeight()));
    }
  }
}

void draw_track_ticks(ImDrawList* dl, DashboardState& s, const TrackGeometry& g,
                      const std::vector<Tick> (&ticks)[kTracks]) {
  const ImU32 muted = ImGui::GetColorU32(palette::kMuted);
  for (int k = 0; k < kTracks; ++k) {
    const float ty = g.top(k);
    for (const Tick& t : ticks[k]) {
      const float y = g.y_in(k, t.frac);
      dl->AddLine(ImVec2(g.x0, y), ImVec2(g.x1, y), IM_COL32(255, 255, 255, 18));
      dl->AddLine(ImVec2(g.x0 - 4.0f, y), ImVec2(g.x0, y), dash::kAxis);
      const ImVec2 size = ImGui::CalcTextSize(t.label);
      // Inside the track's band, so neighbouring tracks' labels never meet.
      const ImVec2 at(g.x0 - 6.0f - size.x, std::clamp(y - size.y * 0.5f, ty, ty + g.track_h - size.y));
      dl->AddText(at, muted, t.label);
      dash::note_label(&s.labels, "softmax_tracks", t.label, at);
    }
  }
}

// m: a step line; each tile's own max as a circle, amber where it raised m.
// l: a polyline through each tile's l.
void draw_m_and_l(ImDrawList* dl, const TrackGeometry& g, const TrackRanges& r, const viz::SoftmaxSeries& ser) {
  bool have_prev = false;
  float prev_y = 0;
  for (const viz::SoftmaxStep& st : ser.steps) {
    if (st.keys == 0) continue;
    const float y = g.y_in(0, (st.m - r.m_lo) / (r.m_hi - r.m_lo));
    const float xa = g.x0 + st.kv_tile * g.slot, xb = xa + g.slot;
    if (have_prev) dl->AddLine(ImVec2(xa, prev_y), ImVec2(xa, y), kMColor, 2.0f);
    dl->AddLine(ImVec2(xa, y), ImVec2(xb, y), kMColor, 2.0f);
    have_prev = true;
    prev_y = y;
    const float ty = g.y_in(0, (st.tile_max - r.m_lo) / (r.m_hi - r.m_lo));
    dl->AddCircle(ImVec2(g.slot_x(st.kv_tile), ty), std::clamp(g.slot * 0.12f, 2.5f, 5.0f),
                  st.max_rose ? kRiseColor : kTileMaxColor, 0, 1.5f);
  }
  std::vector<ImVec2> lp;
  for (const viz::SoftmaxStep& st : ser.steps) {
    if (st.keys > 0) lp.emplace_back(g.slot_x(st.kv_tile), g.y_in(1, r.l_hi > 0 ? st.l / r.l_hi : 0.0f));
  }
  if (lp.size() > 1) dl->AddPolyline(lp.data(), static_cast<int>(lp.size()), kLColor, 0, 2.0f);
  for (const ImVec2& q : lp) dl->AddCircleFilled(q, std::clamp(g.slot * 0.08f, 2.0f, 4.0f), kLColor);
}

// rescale and share: bars.
void draw_rescale_and_share(ImDrawList* dl, const TrackGeometry& g, const TrackRanges& r,
                            const viz::SoftmaxSeries& ser) {
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), muted = ImGui::GetColorU32(palette::kMuted);
  const float bar_w = std::max(1.0f, g.slot * 0.6f);
  for (const viz::SoftmaxStep& st : ser.steps) {
    if (st.keys == 0) continue;
    const float cx = g.slot_x(st.kv_tile);
    const ImU32 rc = st.max_rose ? kRiseColor : kSteadyColor;
    dl->AddRectFilled(ImVec2(cx - bar_w * 0.5f, g.y_in(2, st.rescale)), ImVec2(cx + bar_w * 0.5f, g.y_in(2, 0.0f)),
                      rc);
    if (st.rescale == 0.0f && g.slot > ImGui::CalcTextSize("init").x) {
      dl->AddText(ImVec2(cx - ImGui::CalcTextSize("init").x * 0.5f, g.y_in(2, 0.5f)), muted, "init");
    }
    const float f = r.share_hi > 0 ? static_cast<float>(st.share) / r.share_hi : 0.0f;
    dl->AddRectFilled(ImVec2(cx - bar_w * 0.5f, g.y_in(3, f)), ImVec2(cx + bar_w * 0.5f, g.y_in(3, 0.0f)),
                      dash::to_u32(viz::sample_colormap(viz::ColorMap::kViridis, 0.25f + 0.75f * f)));
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * st.share);
    const float w = ImGui::CalcTextSize(pct).x;
    if (g.slot > w + 4.0f)
      dl->AddText(ImVec2(cx - w * 0.5f, std::max(g.top(3), g.y_in(3, f) - ImGui::GetTextLineHeight())), text, pct);
  }
}

// The x axis: KV tile indices and, for a trace of the model's own attention,
// each tile's first token under it where there is room.
void draw_tile_axis(ImDrawList* dl, const TrackGeometry& g, const Trace& trace) {
  const ImU32 muted = ImGui::GetColorU32(palette::kMuted);
  const float ay = g.p.y + g.height - g.axis_h + 2.0f;
  const int step = std::max(1, static_cast<int>(std::ceil(ImGui::GetFontSize() * 2.0f / g.slot)));
  for (int t = 0; t < g.n_tiles; t += step) {
    char b[16];
    std::snprintf(b, sizeof b, "%d", t);
    dl->AddText(ImVec2(g.slot_x(t) - ImGui::CalcTextSize(b).x * 0.5f, ay), muted, b);
  }
  dl->AddText(ImVec2(g.p.x, ay), muted, "KV tile \xE2\x86\x92");
  const int block_kv = std::max(1, trace.meta.block_kv);
  if (!trace.tokens.empty()) {
    for (int t = 0; t < g.n_tiles; t += step) {
      std::string l = viz::key_token_label(trace, t * block_kv);
      if (l.empty() || ImGui::CalcTextSize(l.c_str()).x > g.slot * step - 6.0f) continue;
      dl->AddText(ImVec2(g.slot_x(t) - ImGui::CalcTextSize(l.c_str()).x * 0.5f, ay + ImGui::GetTextLineHeight()),
                  muted, l.c_str());
    }
  }
}

// The hovered tile: highlighted (live, not baked) and its step in a tooltip;
// a track's name: what the track shows.
void hover_tracks(const TrackGeometry& g, const Trace& trace, const viz::SoftmaxSeries& ser) {
  const int block_kv = std::max(1, trace.meta.block_kv);
  const float mx = ImGui::GetIO().MousePos.x;
  if (mx >= g.x0 && mx < g.x1) {
    const int t = std::clamp(static_cast<int>((mx - g.x0) / g.slot), 0, g.n_tiles - 1);
    ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(g.x0 + t * g.slot, g.p.y),
                                              ImVec2(g.x0 + (t + 1) * g.slot, g.p.y + g.height - g.axis_h),
                                              IM_COL32(255, 255, 255, 28));
    ImGui::BeginTooltip();
    const viz::SoftmaxStep* st = nullptr;
    for (const viz::SoftmaxStep& x : ser.steps) {
      if (x.kv_tile == t) st = &x;
    }
    if (st == nullptr || st->keys == 0) {
      ImGui::Text("KV tile %d: no key visible to this row (causal): state unchanged", t);
    } else {
      ImGui::Text("KV tile %d: %u keys visible", t, st->keys);
      if (!trace.tokens.empty()) {
        const int last = std::min(trace.meta.kv_len, (t + 1) * block_kv) - 1;
        ImGui::Text("tokens %s \xE2\x80\xA6 %s", viz::key_token_label(trace, t * block_kv).c_str(),
                    viz::key_token_label(trace, last).c_str());
      }
      ImGui::Text("tile max %.4f   m %.4f%s", st->tile_max, st->m, st->max_rose ? "  (rose: rescale)" : "");
      ImGui::Text("rescale exp(m_old \xE2\x88\x92 m) = %.4g", st->rescale);
      ImGui::Text("tile sum %.4g   l %.4g", st->tile_sum, st->l);
      ImGui::Text("final share %.2f%%", 100.0 * st->share);
    }
    ImGui::EndTooltip();
  }
  for (int k = 0; k < kTracks; ++k) {
    const float ty = g.top(k);
    if (ImGui::GetIO().MousePos.x < g.x0 && ImGui::GetIO().MousePos.y >= ty &&
        ImGui::GetIO().MousePos.y < ty + g.track_h) {
      ImGui::SetTooltip("%s", kTrackInfo[k].what);
    }
  }
}

// The four tracks over one x axis of KV tiles.
void draw_tracks(DashboardState& s, const Trace& trace, const viz::SoftmaxSeries& ser, int n_tiles, float width,
                 float height) {
  TrackGeometry g;
  g.p = ImGui::GetCursorScreenPos();
  g.width = width;
  g.height = height;
  g.n_tiles = n_tiles;
  const float label_w = ImGui::GetFontSize() * 9.5f;
  g.axis_h = ImGui::GetTextLineHeightWithSpacing() * (trace.tokens.empty() ? 1.0f : 2.0f);
  ImGui::InvisibleButton("##tracks", ImVec2(width, height));
  dash::note_widget(s, "softmax_tracks");
  const bool hovered = ImGui::IsItemHovered();
  // Everything but the hovered tile's highlight is baked: it changes only with the row or the size.
  BakedPicture& picture = s.pictures.get("softmax_tracks");
  ImDrawList* dl = picture.begin(g.p, ImVec2(g.p.x + width, g.p.y + height));
  g.track_h = (height - g.axis_h - g.gap * (kTracks - 1)) / kTracks;

  const TrackRanges r = track_ranges(ser);
  std::vector<Tick> ticks[kTracks];
  const float tick_w = track_ticks(r, g.track_h, ticks);
  g.x0 = g.p.x + label_w + tick_w + ImGui::GetFontSize() * 0.5f;
  g.x1 = g.p.x + width - 4.0f;
  g.slot = (g.x1 - g.x0) / std::max(n_tiles, 1);

  draw_track_bands(dl, s, g, r, ser);
  draw_track_ticks(dl, s, g, ticks);
  draw_m_and_l(dl, g, r, ser);
  draw_rescale_and_share(dl, g, r, ser);
  draw_tile_axis(dl, g, trace);
  picture.end();
  if (hovered) hover_tracks(g, trace, ser);
}

void final_card(const viz::SoftmaxSeries& ser, const UiFonts& fonts) {
  ImGui::PushStyleColor(ImGuiCol_ChildBg, palette::kCard);
  const float h = ImGui::GetTextLineHeightWithSpacing() * 3.0f + ImGui::GetStyle().WindowPadding.y * 2.0f;
  ImGui::BeginChild("##final", ImVec2(0.0f, h), true, ImGuiWindowFlags_NoScrollbar);
  ImGui::PushFont(fonts.mono);
  ImGui::Text("after the last tile:  m = %.4f   l = %.4f", ser.m_final, ser.l_final);
  ImGui::TextColored(palette::kAccent,
                     "epilogue:  O = O_acc \xC3\x97 (1/l) = O_acc \xC3\x97 %.6g      LSE = m + ln l = %.4f", ser.inv_l,
                     ser.lse);
  ImGui::PopFont();
  ImGui::TextColored(palette::kMuted,
                     "m rose on %d tile%s after the first (each rescales the O accumulator) \xC2\xB7 "
                     "l = rescale\xC2\xB7l_old + tile_sum holds to %.1e (relative)",
                     ser.max_rises, ser.max_rises == 1 ? "" : "s", ser.max_recurrence_error);
  ImGui::EndChild();
  ImGui::PopStyleColor();
}

}  // namespace

void tab_online_softmax(DashboardState& s, DashboardContext& ctx) {
  uint64_t version = 0;
  const Trace* t = draw_trace_header(s, ctx, &version);
  if (t == nullptr) return;
  SoftmaxView& v = s.softmax;
  refresh(v, *t, version);
  if (v.rows.empty()) {
    dash::wrapped_muted("This trace follows no rows' softmax state (flashscope-cli trace prefill --rows R,R,...).");
    return;
  }
  const TraceMeta& m = t->meta;
  // The row chooser: the rows the trace followed.
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Row");
  ImGui::SameLine();
  int idx = v.row_index;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 14.0f);
  const uint32_t row = v.rows[static_cast<size_t>(std::clamp(idx, 0, static_cast<int>(v.rows.size()) - 1))];
  char fmt[64];
  // A trace of the model's own attention names the row's token.
  const std::string token = viz::row_token_label(*t, static_cast<int>(row));
  std::snprintf(fmt, sizeof fmt, "query %u %s", row, token.size() <= 40 ? token.c_str() : "");
  bool changed =
      ImGui::SliderInt("##row", &idx, 0, static_cast<int>(v.rows.size()) - 1, fmt, ImGuiSliderFlags_AlwaysClamp);
  ImGui::SameLine();
  if (ImGui::ArrowButton("##prev", ImGuiDir_Left) && idx > 0) {
    --idx;
    changed = true;
  }
  ImGui::SameLine();
  if (ImGui::ArrowButton("##next", ImGuiDir_Right) && idx + 1 < static_cast<int>(v.rows.size())) {
    ++idx;
    changed = true;
  }
  if (changed) {
    v.row_index = idx;
    v.series = viz::build_softmax_series(*t, v.rows[static_cast<size_t>(idx)]);
  }
  const viz::SoftmaxSeries& ser = v.series;
  ImGui::SameLine(0.0f, ImGui::GetFontSize());
  const int visible = m.causal ? std::clamp(static_cast<int>(ser.row) + m.kv_len - m.q_len + 1, 0, m.kv_len) : m.kv_len;
  dash::muted("q-tile %u \xC2\xB7 sees %d keys \xC2\xB7 %zu of %zu followed rows", ser.row / std::max(1, m.block_q),
              visible, static_cast<size_t>(v.row_index + 1), v.rows.size());
  if (!ser.valid) {
    dash::wrapped_muted("This row sees no key (causal, with more queries than keys): its output is 0 and its LSE −∞.");
    return;
  }
  const int n_tiles = std::max((m.kv_len + m.block_kv - 1) / std::max(1, m.block_kv), ser.steps.back().kv_tile + 1);
  const float card_h = ImGui::GetTextLineHeightWithSpacing() * 3.0f + ImGui::GetStyle().WindowPadding.y * 2.0f;
  const float chart_h =
      std::max(ImGui::GetFontSize() * 14.0f, ImGui::GetContentRegionAvail().y - card_h - ImGui::GetFontSize() * 7.5f);
  draw_tracks(s, *t, ser, n_tiles, ImGui::GetContentRegionAvail().x, chart_h);
  final_card(ser, ctx.fonts);
  ImGui::PushFont(ctx.fonts.mono);
  ImGui::TextColored(palette::kMuted,
                     "per KV tile j:  m' = max(m, rowmax(S_j))   l = l\xC2\xB7"
                     "exp(m \xE2\x88\x92 m') + rowsum(exp(S_j \xE2\x88\x92 m'))");
  ImGui::TextColored(
      palette::kMuted,
      "                O = O\xC2\xB7"
      "exp(m \xE2\x88\x92 m') + exp(S_j \xE2\x88\x92 m')\xC2\xB7V_j   m = m'        then O / l once per row");
  ImGui::PopFont();
}

}  // namespace flashscope::app
