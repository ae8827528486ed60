// The timelines the Pipeline tab and the kernel lab draw: one CTA's warps
// and stage buffers over time, and the whole launch as SMs × time.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "viz/trace_label.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

// CTA colours by head: eight hues that stay apart on the dark background.
constexpr ImU32 kHeadColors[] = {
    IM_COL32(88, 150, 230, 255), IM_COL32(118, 186, 0, 255),  IM_COL32(235, 160, 60, 255), IM_COL32(180, 110, 220, 255),
    IM_COL32(60, 190, 170, 255), IM_COL32(225, 95, 110, 255), IM_COL32(200, 200, 90, 255), IM_COL32(150, 150, 160, 255),
};

ImU32 with_alpha(ImU32 c, int a) { return (c & 0x00FFFFFFu) | (static_cast<ImU32>(a) << 24); }

// What both time charts set up the same way: a widget `used_h` tall across
// the content width (hover, the layout report's rectangle), its baked
// picture's draw list, and ticks [t0, t1] mapped onto the plot right of the
// row labels.
struct TimeChart {
  ImVec2 o;
  float x0 = 0, x1 = 0;
  bool hovered = false;
  ImVec2 mouse;
  BakedPicture* picture = nullptr;
  ImDrawList* dl = nullptr;
  uint64_t t0 = 0;
  double span = 1.0;
  float x_of(uint64_t tick) const { return x0 + static_cast<float>(static_cast<double>(tick - t0) / span) * (x1 - x0); }
};

TimeChart begin_time_chart(DashboardState& s, const char* widget, float used_h, const TraceMeta& m, uint64_t t0,
                           uint64_t t1, float label_w = 0.0f) {
  TimeChart c;
  label_w = std::max(label_w, ImGui::CalcTextSize(m.sm_count > 0 ? "busy SMs" : "busy threads").x) +
            ImGui::GetFontSize();
  const float width = ImGui::GetContentRegionAvail().x;
  c.o = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(widget, ImVec2(width, used_h));
  dash::note_widget(s, widget);
  c.hovered = ImGui::IsItemHovered();
  c.mouse = ImGui::GetIO().MousePos;
  c.picture = &s.pictures.get(widget);
  c.dl = c.picture->begin(c.o, ImVec2(c.o.x + width, c.o.y + used_h));
  c.x0 = c.o.x + label_w;
  c.x1 = c.o.x + width - 6.0f;
  c.t0 = t0;
  c.span = std::max<double>(1.0, static_cast<double>(t1 - t0));
  return c;
}

// A lane's name. The Hopper kernel's warps have roles by warpgroup (four
// warps each; hopper_prefill_kernel.cuh): warpgroup 0 produces (its first
// warp issues the copies), warpgroups 1+ are consumers 0, 1, ...; the
// mma.sync kernels' warps all do the same work; the CPU's one "warp" is a thread.
std::string warp_lane_name(const TraceMeta& m, uint32_t warp) {
  if (m.backend == "cpu") return "thread";
  char buf[40];
  if (m.kernel.rfind("hopper", 0) == 0) {
    if (warp < 4) std::snprintf(buf, sizeof buf, "producer \xC2\xB7 warp %u", warp);
    else std::snprintf(buf, sizeof buf, "consumer %u \xC2\xB7 warp %u", warp / 4 - 1, warp % 4);
  } else {
    std::snprintf(buf, sizeof buf, "warp %u", warp);
  }
  return buf;
}

bool starts_warpgroup(const TraceMeta& m, uint32_t warp) { return m.kernel.rfind("hopper", 0) == 0 && warp % 4 == 0; }

}  // namespace

void refresh_pipeline_view(PipelineView& v, const Trace& t, uint64_t version) {
  if (v.version == version) return;
  v.version = version;
  v.ctas = viz::ctas_with_spans(t);
  v.cta_index = -1;
  uint32_t most = 0;
  for (size_t i = 0; i < v.ctas.size(); ++i) {
    const uint32_t tiles = v.ctas[i] < t.ctas.size() ? t.ctas[v.ctas[i]].kv_tiles : 0;
    if (v.cta_index < 0 || tiles > most) {
      most = tiles;
      v.cta_index = static_cast<int>(i);
    }
  }
  v.pipe = v.cta_index >= 0 ? viz::build_cta_pipeline(t, v.ctas[static_cast<size_t>(v.cta_index)]) : viz::CtaPipeline();
  v.occupancy = viz::build_occupancy(t, 160, v.tail_share);
}

void draw_span_legend(const viz::CtaPipeline& p) {
  double total = 0;
  for (const double us : p.kind_us) total += us;
  for (uint32_t k = 0; k < kSpanKindCount; ++k) {
    if (p.kind_us[k] <= 0) continue;
    char label[64];
    std::snprintf(label, sizeof label, "%s %.0f%%", viz::span_kind_label(static_cast<SpanKind>(k)),
                  total > 0 ? 100.0 * p.kind_us[k] / total : 0.0);
    dash::swatch(dash::to_u32(viz::span_kind_color(static_cast<SpanKind>(k))), label);
    if (ImGui::GetContentRegionAvail().x < ImGui::GetFontSize() * 10.0f) ImGui::NewLine();
  }
  ImGui::NewLine();
}

void draw_warp_timeline(DashboardState& s, const Trace& t, const viz::CtaPipeline& p, float height,
                        const char* widget) {
  const TraceMeta& m = t.meta;
  // Buffers stacked into rows per operand, so overlapping ones (a deeper pipeline) do not hide each other.
  struct BufRow {
    const viz::StageBuffer* b;
    int row;
  };
  std::vector<BufRow> bufs;
  int rows_k = 0, rows_v = 0;
  for (const char op : {'K', 'V'}) {
    std::vector<uint64_t> ends;
    for (const viz::StageBuffer& b : p.buffers) {
      if (b.operand != op) continue;
      size_t r = 0;
      while (r < ends.size() && ends[r] > b.issue) ++r;
      if (r == ends.size()) ends.push_back(0);
      ends[r] = b.released;
      bufs.push_back({&b, static_cast<int>(r)});
    }
    (op == 'K' ? rows_k : rows_v) = static_cast<int>(ends.size());
  }
  const int total_rows = p.lanes + rows_k + rows_v;
  const float axis_h = ImGui::GetTextLineHeightWithSpacing() + 4.0f;
  const float sep = 8.0f;
  const float row_h = std::clamp((height - axis_h - sep) / std::max(total_rows, 1), 6.0f, ImGui::GetFontSize() * 1.5f);
  const float used_h = row_h * total_rows + sep + axis_h;
  float names_w = 0.0f;
  for (const viz::WarpLanes& w : p.warps)
    names_w = std::max(names_w, ImGui::CalcTextSize(warp_lane_name(m, w.warp).c_str()).x);
  // Baked but for the warps' labels (it changes with the CTA, the trace or the size); hover only sets the tooltip.
  const TimeChart chart = begin_time_chart(s, widget, used_h, m, p.t0, p.t1, names_w);
  const ImVec2 o = chart.o, mouse = chart.mouse;
  const bool hovered = chart.hovered;
  ImDrawList* dl = chart.dl;
  const float x0 = chart.x0, x1 = chart.x1;
  const double span = chart.span;
  auto x_of = [&chart](uint64_t tick) { return chart.x_of(tick); };
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), muted = ImGui::GetColorU32(palette::kMuted);
  const float fs = ImGui::GetFontSize();
  const bool small_font_fits = row_h >= fs * 0.95f;
  std::string tip;

  // Lane backgrounds; their labels go over the picture after it (a label
  // centred on a lane thinner than the font reaches above the first one).
  // Lanes thinner than the font get their names a size smaller, down to
  // 70%; thinner still, a warp is named where its label clears the last
  // one, and a warpgroup's first warp displaces a plain warp's or moves
  // down by up to half a lane.
  const float label_px = std::clamp(row_h, fs * 0.7f, fs);
  struct Label {
    ImVec2 at;
    std::string text;
    bool group = false;  // a warpgroup's first warp
  };
  std::vector<Label> labels;
  float free_y = -1e30f;  // below the last label
  for (const viz::WarpLanes& w : p.warps) {
    for (int l = 0; l < w.lanes; ++l) {
      const float y = o.y + (w.first_lane + l) * row_h;
      dl->AddRectFilled(ImVec2(x0, y), ImVec2(x1, y + row_h - 1.0f), IM_COL32(28, 30, 34, 255));
    }
    float y = o.y + w.first_lane * row_h + (std::min(row_h * w.lanes, label_px) - label_px) * 0.5f;
    const bool group = starts_warpgroup(m, w.warp);
    // A warpgroup's first warp right after another's (the producer's one
    // lane, then consumer 0) is named a little low rather than not at all.
    if (group && y < free_y && free_y - y <= row_h * 0.5f) y = free_y;
    if (y < free_y && group && !labels.empty() && !labels.back().group) {
      labels.pop_back();  // the warpgroup's first warp takes the place of the label it would overlap
      free_y = y;         // (the one before lies above the one removed)
    }
    if (y >= free_y - 0.5f) {
      labels.push_back({ImVec2(o.x, y), warp_lane_name(m, w.warp), group});
      free_y = y + label_px;
    }
  }
  for (const viz::LaneSpan& ls : p.spans) {
    const WarpSpanRecord& sp = t.spans[ls.span];
    const float y = o.y + ls.lane * row_h;
    const float a = x_of(sp.start), b = std::max(x_of(sp.end), a + 1.0f);
    dl->AddRectFilled(ImVec2(a, y + 1.0f), ImVec2(b, y + row_h - 2.0f), dash::to_u32(viz::span_kind_color(sp.kind)));
    if (sp.kv_tile >= 0 && small_font_fits) {
      char lab[16];
      std::snprintf(lab, sizeof lab, "%d", sp.kv_tile);
      if (b - a > ImGui::CalcTextSize(lab).x + 4.0f)
        dl->AddText(ImVec2(a + 2.0f, y + (row_h - fs) * 0.5f), IM_COL32(15, 15, 18, 255), lab);
    }
    if (hovered && mouse.x >= a && mouse.x < b && mouse.y >= y && mouse.y < y + row_h) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s, KV tile %d, %s\n%s \xE2\x86\x92 %s (%s)", viz::span_kind_label(sp.kind),
                    sp.kv_tile, warp_lane_name(m, sp.warp).c_str(),
                    viz::format_us(viz::ticks_to_us(m, static_cast<double>(sp.start - p.t0))).c_str(),
                    viz::format_us(viz::ticks_to_us(m, static_cast<double>(sp.end - p.t0))).c_str(),
                    viz::format_us(viz::ticks_to_us(m, static_cast<double>(sp.end - sp.start))).c_str());
      tip = buf;
    }
  }
  // Stage buffers: in flight (issued, not yet waited for) light, resident solid.
  const float buf_top = o.y + p.lanes * row_h + sep;
  for (const char op : {'K', 'V'}) {
    const int first = op == 'K' ? 0 : rows_k;
    const int n = op == 'K' ? rows_k : rows_v;
    const float y = buf_top + first * row_h;
    dl->AddRectFilled(ImVec2(x0, y), ImVec2(x1, y + n * row_h - 1.0f), IM_COL32(24, 26, 30, 255));
    char lab[32];
    std::snprintf(lab, sizeof lab, "%c buffers", op);
    if (n > 0) dl->AddText(ImVec2(o.x, y + (std::min(row_h * n, fs * 1.4f) - fs) * 0.5f), muted, lab);
  }
  for (const BufRow& br : bufs) {
    const viz::StageBuffer& b = *br.b;
    const int first = b.operand == 'K' ? 0 : rows_k;
    const float y = buf_top + (first + br.row) * row_h;
    const ImU32 c =
        dash::to_u32(viz::span_kind_color(b.operand == 'K' ? SpanKind::kLoadIssueK : SpanKind::kLoadIssueV));
    const float a = x_of(b.issue), l = x_of(b.landed), r = std::max(x_of(b.released), a + 1.0f);
    dl->AddRectFilled(ImVec2(a, y + 1.0f), ImVec2(std::max(l, a + 1.0f), y + row_h - 2.0f), with_alpha(c, 90));
    dl->AddRectFilled(ImVec2(l, y + 1.0f), ImVec2(r, y + row_h - 2.0f), with_alpha(c, 210));
    char lab[16];
    std::snprintf(lab, sizeof lab, "%c%d", b.operand, b.kv_tile);
    if (small_font_fits && r - a > ImGui::CalcTextSize(lab).x + 4.0f)
      dl->AddText(ImVec2(a + 2.0f, y + (row_h - fs) * 0.5f), text, lab);
    if (hovered && mouse.x >= a && mouse.x < r && mouse.y >= y && mouse.y < y + row_h) {
      char buf[240];
      std::snprintf(
          buf, sizeof buf,
          "%c tile %d's buffer\nin flight %s (issue \xE2\x86\x92 landed)\nresident %s (landed \xE2\x86\x92 last use)",
          b.operand, b.kv_tile, viz::format_us(viz::ticks_to_us(m, static_cast<double>(b.landed - b.issue))).c_str(),
          viz::format_us(viz::ticks_to_us(m, static_cast<double>(b.released - b.landed))).c_str());
      tip = buf;
    }
  }
  dash::time_axis(dl, x0, x1, o.y + row_h * total_rows + sep + 2.0f, 0.0, viz::ticks_to_us(m, span));
  chart.picture->end();
  for (const Label& lab : labels) {
    ImGui::GetWindowDrawList()->AddText(ImGui::GetFont(), label_px, lab.at, muted, lab.text.c_str());
    dash::note_label(&s.labels, widget, lab.text, lab.at, label_px);
  }
  if (!tip.empty()) ImGui::SetTooltip("%s", tip.c_str());
}

void draw_sm_chart(DashboardState& s, const Trace& t, const viz::Occupancy& occ, uint32_t highlight_cta, float height,
                   const char* widget) {
  const TraceMeta& m = t.meta;
  const int rows = static_cast<int>(occ.sm_ids.size());
  const float axis_h = ImGui::GetTextLineHeightWithSpacing() + 4.0f;
  // The busy profile gives up height first when the rows need it.
  const float busy_h = std::clamp(std::min(height * 0.18f, height - axis_h - 6.0f - rows), ImGui::GetFontSize() * 1.2f,
                                  ImGui::GetFontSize() * 3.5f);
  // Few rows (CPU threads) get tall bars; 132 SMs get a pixel or two each.
  const float row_h = std::clamp((height - axis_h - busy_h - 6.0f) / std::max(rows, 1), 1.0f,
                                 ImGui::GetFontSize() * (rows <= 8 ? 2.2f : 1.4f));
  const float chart_h = row_h * rows;
  const float used_h = chart_h + 6.0f + busy_h + axis_h;
  // Baked but for the highlighted CTA's outline, drawn over it: on the chart's edge the outline reaches past it.
  const TimeChart chart = begin_time_chart(s, widget, used_h, m, occ.t0, occ.t1);
  const ImVec2 o = chart.o, mouse = chart.mouse;
  const bool hovered = chart.hovered;
  ImDrawList* dl = chart.dl;
  const float x0 = chart.x0, x1 = chart.x1;
  const double span = chart.span;
  auto x_of = [&chart](uint64_t tick) { return chart.x_of(tick); };
  const ImU32 muted = ImGui::GetColorU32(palette::kMuted);
  const float fs = ImGui::GetFontSize();
  const bool cpu = m.sm_count <= 0;

  dl->AddRectFilled(ImVec2(x0, o.y), ImVec2(x1, o.y + chart_h), IM_COL32(28, 30, 34, 255));
  const int label_step = std::max(1, static_cast<int>(std::ceil(fs * 1.1f / row_h)));
  for (int r = 0; r < rows; r += label_step) {
    char b[32];
    std::snprintf(b, sizeof b, cpu ? "thread %u" : "SM %u", occ.sm_ids[static_cast<size_t>(r)]);
    dl->AddText(ImVec2(o.x, o.y + r * row_h + (std::min(row_h * label_step, fs * 1.2f) - fs) * 0.5f), muted, b);
  }
  const float slot_h = row_h / std::max(occ.max_slots, 1);
  const float gap = row_h >= 4.0f ? 1.0f : 0.0f;
  std::string tip;
  const CtaRecord* hi = nullptr;
  ImVec2 hi_a, hi_b;
  for (const viz::CtaBar& b : occ.bars) {
    const CtaRecord& c = t.ctas[b.cta];
    const float y = o.y + b.row * row_h + b.slot * slot_h;
    const float a = x_of(b.start), e = std::max(x_of(b.end), a + 1.0f);
    dl->AddRectFilled(ImVec2(a, y), ImVec2(e - gap, y + slot_h - gap), kHeadColors[c.head % 8]);
    if (b.cta == highlight_cta) {
      hi = &c;
      hi_a = ImVec2(a, y);
      hi_b = ImVec2(e, y + slot_h);
    }
    if (hovered && mouse.x >= a && mouse.x < e && mouse.y >= y && mouse.y < y + slot_h) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "CTA %u: head %u, q-tile %u%s, %u KV tiles\n%s %u, %s \xE2\x86\x92 %s (%s)", b.cta,
                    c.head, c.q_tile, m.batch > 1 ? (", sequence " + std::to_string(c.batch)).c_str() : "", c.kv_tiles,
                    cpu ? "thread" : "SM", c.sm,
                    viz::format_us(viz::ticks_to_us(m, static_cast<double>(b.start - occ.t0))).c_str(),
                    viz::format_us(viz::ticks_to_us(m, static_cast<double>(b.end - occ.t0))).c_str(),
                    viz::format_us(viz::ticks_to_us(m, static_cast<double>(b.end - b.start))).c_str());
      tip = buf;
    }
  }
  // The tail: from when only the last tail_share of the SMs still run, to the end.
  const float tx = x_of(occ.tail_start);
  if (occ.tail_fraction > 0) {
    dl->AddRectFilled(ImVec2(tx, o.y), ImVec2(x1, o.y + chart_h + 6.0f + busy_h), dash::kTail);
    dl->AddLine(ImVec2(tx, o.y), ImVec2(tx, o.y + chart_h + 6.0f + busy_h), IM_COL32(255, 110, 110, 200), 1.5f);
    if (x1 - tx > ImGui::CalcTextSize("tail").x + 6.0f)
      dl->AddText(ImVec2(tx + 3.0f, o.y + 1.0f), IM_COL32(255, 160, 160, 255), "tail");
  }

  // Busy SMs over time, as a filled profile under the chart.
  const float by = o.y + chart_h + 6.0f;
  dl->AddRectFilled(ImVec2(x0, by), ImVec2(x1, by + busy_h), IM_COL32(24, 26, 30, 255));
  dl->AddText(ImVec2(o.x, by + (busy_h - fs) * 0.5f), muted, cpu ? "busy threads" : "busy SMs");
  const int nb = static_cast<int>(occ.busy_sms.size());
  for (int i = 0; i < nb; ++i) {
    const float f = std::clamp(occ.busy_sms[static_cast<size_t>(i)] / std::max(rows, 1), 0.0f, 1.0f);
    const float a = x0 + (x1 - x0) * i / nb, e = x0 + (x1 - x0) * (i + 1) / nb;
    dl->AddRectFilled(ImVec2(a, by + busy_h * (1.0f - f)), ImVec2(e + 0.5f, by + busy_h), IM_COL32(118, 186, 0, 200));
  }
  dash::time_axis(dl, x0, x1, by + busy_h + 2.0f, 0.0, viz::ticks_to_us(m, span));
  chart.picture->end();
  if (hi != nullptr) {
    ImGui::GetWindowDrawList()->AddRect(ImVec2(hi_a.x - 1, hi_a.y - 1), ImVec2(hi_b.x + 1, hi_b.y + 1), dash::kSelect,
                                        0.0f, 0, 2.0f);
  }
  if (!tip.empty()) ImGui::SetTooltip("%s", tip.c_str());
}

}  // namespace flashscope::app
