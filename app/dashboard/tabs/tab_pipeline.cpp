// Pipeline: one CTA's warps on a timeline — loads, QKᵀ, softmax, PV,
// epilogue — with the K and V stage buffers each tile occupies, so the
// overlap the pipelined kernels (v3..v6) add is visible; then the whole
// launch as SMs × time: occupancy, waves, and the tail where most SMs idle.
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

const char* depth_words(int live) {
  if (live <= 0) return "no loads recorded";
  if (live == 1) return "single-buffered: a tile's loads and math take turns";
  if (live == 2) return "double-buffered: tile t+1 loads while tile t computes";
  return "multi-stage: several tiles in flight";
}

}  // namespace

void tab_pipeline(DashboardState& s, DashboardContext& ctx) {
  uint64_t version = 0;
  const Trace* t = draw_trace_header(s, ctx, &version);
  if (t == nullptr) return;
  PipelineView& v = s.pipeline;
  refresh_pipeline_view(v, *t, version);
  const TraceMeta& m = t->meta;
  const bool cpu = m.backend == "cpu";

  if (v.ctas.empty()) {
    dash::wrapped_muted("This trace has no warp spans (captured without record_spans); the launch chart follows.");
  } else {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("CTA");
    ImGui::SameLine();
    auto cta_label = [&](int i) {
      const uint32_t id = v.ctas[static_cast<size_t>(i)];
      const CtaRecord& c = t->ctas[id];
      char buf[128];
      std::snprintf(buf, sizeof buf, "#%u \xC2\xB7 head %u \xC2\xB7 q-tile %u \xC2\xB7 %u KV tiles \xC2\xB7 %s %u", id,
                    c.head, c.q_tile, c.kv_tiles, cpu ? "thread" : "SM", c.sm);
      return std::string(buf);
    };
    const std::string current = cta_label(v.cta_index);
    ImGui::SetNextItemWidth(ImGui::CalcTextSize(current.c_str()).x + ImGui::GetFrameHeight() +
                            ImGui::GetStyle().FramePadding.x * 3.0f);
    if (ImGui::BeginCombo("##cta", current.c_str())) {
      for (int i = 0; i < static_cast<int>(v.ctas.size()); ++i) {
        if (ImGui::Selectable(cta_label(i).c_str(), i == v.cta_index)) {
          v.cta_index = i;
          v.pipe = viz::build_cta_pipeline(*t, v.ctas[static_cast<size_t>(i)]);
        }
      }
      ImGui::EndCombo();
    }
    ImGui::SameLine();
    dash::muted("%s", viz::format_us(viz::ticks_to_us(m, static_cast<double>(v.pipe.t1 - v.pipe.t0))).c_str());
    draw_span_legend(v.pipe);
    const float avail = ImGui::GetContentRegionAvail().y;
    // Lanes at a readable height where they fit, up to half the space; the launch chart takes the rest.
    const int rows = v.pipe.lanes + std::max(v.pipe.max_live_k, 1) + std::max(v.pipe.max_live_v, 1);
    const float want = rows * ImGui::GetFontSize() + ImGui::GetTextLineHeightWithSpacing() * 2.0f;
    // What the launch chart below needs at least: a pixel per SM, its busy profile, axis, heading and stats.
    const float launch_min = static_cast<float>(v.occupancy.sm_ids.size()) + ImGui::GetFontSize() * 11.5f;
    const float most = std::max(avail * 0.25f, std::min(avail * 0.5f, avail - launch_min));
    draw_warp_timeline(s, *t, v.pipe, std::clamp(want, avail * 0.25f, most), "pipeline_warps");
    dash::muted("stage buffers: K up to %d live (%s) \xC2\xB7 V up to %d live", v.pipe.max_live_k,
                depth_words(v.pipe.max_live_k), v.pipe.max_live_v);
  }

  const viz::Occupancy& o = v.occupancy;
  dash::heading(cpu ? "The whole run: threads \xC3\x97 time" : "The whole launch: SMs \xC3\x97 time", ctx.fonts);
  if (o.bars.empty()) {
    dash::wrapped_muted("This trace has no CTA records.");
    return;
  }
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7.0f);
  int pct = static_cast<int>(v.tail_share * 100.0f + 0.5f);
  if (ImGui::SliderInt("##tail", &pct, 5, 50, "tail %d%%")) {
    v.tail_share = pct / 100.0f;
    v.occupancy = viz::build_occupancy(*t, 160, v.tail_share);
  }
  ImGui::SameLine();
  dash::help_marker(
      "The tail starts when only this share of the SMs that ran work are still busy; its length is the "
      "part of the launch that ran at that width or less.");
  ImGui::SameLine();
  char tail[96];
  if (o.tail_fraction > 0) {
    std::snprintf(tail, sizeof tail, "last %d %s alone for %.0f%% of the time", o.tail_sms,
                  cpu ? (o.tail_sms == 1 ? "thread" : "threads") : (o.tail_sms == 1 ? "SM" : "SMs"),
                  100.0 * o.tail_fraction);
  } else {
    std::snprintf(tail, sizeof tail, "no tail");
  }
  dash::muted("%zu CTAs on %d %s \xC2\xB7 %.1f wave%s \xC2\xB7 utilization %.0f%% \xC2\xB7 %s", t->ctas.size(),
              o.active_sms, cpu ? (o.active_sms == 1 ? "thread" : "threads") : "SMs", o.waves,
              o.waves == 1.0 ? "" : "s", 100.0 * o.utilization, tail);
  if (!o.clock_aligned) {
    ImGui::TextColored(palette::kWarning, "timer: per-SM cycle counters, so positions across SMs are approximate");
  }
  const float legend_h = cpu ? ImGui::GetTextLineHeightWithSpacing() * 2.2f : 0.0f;
  draw_sm_chart(s, *t, o, v.ctas.empty() ? ~0u : v.ctas[static_cast<size_t>(v.cta_index)],
                std::max(ImGui::GetFontSize() * 8.0f, ImGui::GetContentRegionAvail().y - legend_h), "pipeline_sms");
  if (cpu) {
    dash::wrapped_muted(
        "A CPU trace: each \xE2\x80\x9C"
        "CTA\xE2\x80\x9D is one 64-query \xC3\x97 1-head work item on an OpenMP "
        "thread with one \xE2\x80\x9Cwarp\xE2\x80\x9D. Colours are heads; the outlined CTA is the one above.");
  }
}

}  // namespace flashscope::app
