// Throughput: prefill launches in TFLOPS and % of the tensor SOL (the kernel
// lab's live runs and every trace's run), decode in GB/s and % of the DRAM
// SOL (each answer: weights plus the K/V of the context, per token), and
// how both SOLs and counts are computed for this device; then the chat's
// tokens/s and the UI's own frame times.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "traces/synthetic_problem.hpp"
#include "viz/throughput.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

// TFLOPS where the numbers are GPU-sized, GFLOPS for the CPU.
std::string flops_rate(double tflops) {
  char buf[48];
  if (tflops >= 1.0)
    std::snprintf(buf, sizeof buf, "%.1f TFLOPS", tflops);
  else
    std::snprintf(buf, sizeof buf, "%.2f GFLOPS", tflops * 1e3);
  return buf;
}

std::string sol_text(const viz::Rate& r) {
  if (!r.has_sol) return "no SOL (CPU)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%% of SOL", r.pct_of_sol);
  return buf;
}

// One answer as its decode bandwidth: tokens/s × bytes a step reads at the
// answer's mean context (the cache grows by one token per step).
double answer_gbps(const AnswerStats& a, const EngineSnapshot& snap) {
  const double context = a.context_tokens - a.generated_tokens * 0.5;
  return a.decode_tokens_per_s *
         viz::decode_step_bytes(static_cast<double>(snap.weight_bytes), static_cast<double>(snap.kv_bytes_per_token),
                                context) /
         1e9;
}

void prefill_section(DashboardState& s, DashboardContext& ctx) {
  const LabSnapshot& lab = ctx.lab_snap;
  const double sol = ctx.device.cuda ? ctx.device.info.sol_tflops : 0.0;
  dash::heading("Prefill launches: FLOPs per second against the tensor SOL", ctx.fonts);
  const float w = ImGui::GetContentRegionAvail().x;
  if (lab.runs > 0) {
    const viz::Rate now = viz::prefill_rate(lab.flops, lab.last_ms, lab.sol_tflops);
    const double median = lab.tflops.recent_median(10);
    ImGui::PushFont(ctx.fonts.mono);
    ImGui::TextColored(palette::kAccent, "%s %s", lab.kernel.c_str(), flops_rate(median).c_str());
    ImGui::PopFont();
    ImGui::SameLine();
    char caption[256];
    std::snprintf(caption, sizeof caption,
                  "median of the last 10 runs \xC2\xB7 %s \xC2\xB7 %s per launch \xC2\xB7 %s \xC2\xB7 %s",
                  sol_text(now).c_str(), viz::format_us(lab.last_ms * 1e3).c_str(), shape_label(lab.shape).c_str(),
                  lab.running ? "Kernel lab, live" : "Kernel lab, stopped");
    dash::wrapped_muted(caption);
    const float top =
        std::max(lab.tflops.max(), lab.sol_tflops > 0 ? static_cast<float>(lab.sol_tflops) * 0.1f : 0.0f) * 1.15f;
    dash::line_chart("##lab_tflops", lab.tflops.values, top, w, ImGui::GetFontSize() * 5.0f, IM_COL32(118, 186, 0, 255),
                     static_cast<float>(lab.sol_tflops), lab.sol_tflops > 0 ? "SOL" : nullptr, flops_rate(top),
                     [&](int i, float v) { return "run " + std::to_string(i + 1) + ": " + flops_rate(v); });
    dash::note_widget(s, "throughput_prefill");
  } else {
    dash::wrapped_muted("Kernel lab \xE2\x86\x92 Run times prefill launches continuously; each one lands here.");
  }

  // Every trace's own run (probes included, so a little slower than the plain kernel).
  if (ImGui::BeginTable("##trace_rates", 5,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp)) {
    for (const char* h : {"trace", "kernel", "shape", "run", "rate"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    ImGui::PushFont(ctx.fonts.mono);
    for (const TraceOrigin o : {TraceOrigin::kReplay, TraceOrigin::kChat, TraceOrigin::kLab}) {
      const TraceSlot* slot = slot_of(ctx.sources, o);
      if (!slot->trace) continue;
      const TraceMeta& m = slot->trace->meta;
      // A trace from another machine carries that machine's SOL; a live CPU one has none.
      const viz::Rate r = m.kind == TraceKind::kDecode
                              ? viz::trace_rate(m)
                              : viz::prefill_rate(m.flops, m.elapsed_ms,
                                                  m.sol_tflops > 0 ? m.sol_tflops : (m.backend == "cuda" ? sol : 0.0));
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(trace_origin_name(o));
      ImGui::TableNextColumn();
      ImGui::Text("%s", m.kernel.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d\xC3\x97%d\xC3\x97%d\xC3\x97%d D%d%s", m.batch, m.q_heads, m.q_len, m.kv_len, m.head_dim,
                  m.causal ? " c" : "");
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(m.elapsed_ms > 0 ? viz::format_us(m.elapsed_ms * 1e3).c_str() : "?");
      ImGui::TableNextColumn();
      if (m.kind == TraceKind::kDecode)
        ImGui::Text("%.1f GB/s \xC2\xB7 %s", r.value, sol_text(r).c_str());
      else
        ImGui::Text("%s \xC2\xB7 %s", flops_rate(r.value).c_str(), sol_text(r).c_str());
    }
    ImGui::PopFont();
    ImGui::EndTable();
  }
}

void decode_section(DashboardState& s, DashboardContext& ctx) {
  const EngineSnapshot& snap = ctx.snap;
  const Metrics& m = ctx.metrics;
  const double dram_sol = snap.on_gpu && ctx.device.cuda ? ctx.device.info.sol_dram_gbps : 0.0;
  dash::heading("Decode: bytes per second against the DRAM SOL", ctx.fonts);
  const double per_token_kb = snap.kv_bytes_per_token / 1e3;
  if (snap.state == EngineState::kGenerating) {
    const double gbps = snap.answer_live_tokens_per_s *
                        viz::decode_step_bytes(static_cast<double>(snap.weight_bytes),
                                               static_cast<double>(snap.kv_bytes_per_token), snap.context_used) /
                        1e9;
    ImGui::PushFont(ctx.fonts.mono);
    ImGui::TextColored(palette::kAccent, "generating %.1f tok/s \xE2\x89\x88 %.2f GB/s", snap.answer_live_tokens_per_s,
                       gbps);
    ImGui::PopFont();
  }
  std::vector<float> gbps;
  for (const AnswerStats& a : m.answers) gbps.push_back(static_cast<float>(answer_gbps(a, snap)));
  if (gbps.empty()) {
    dash::wrapped_muted(
        "No answers yet. Each decode step reads every weight once and the K and V of every cached "
        "token of every layer; with tokens/s that is the engine's memory bandwidth.");
  } else {
    const viz::Rate last = viz::bandwidth_rate(gbps.back() * 1e9, 1e3, dram_sol);
    ImGui::PushFont(ctx.fonts.mono);
    ImGui::TextColored(palette::kAccent, "last answer %.2f GB/s", gbps.back());
    ImGui::PopFont();
    ImGui::SameLine();
    char caption[256];
    std::snprintf(caption, sizeof caption,
                  "%s \xC2\xB7 %s engine \xC2\xB7 %.0f MB of weights + %.1f kB of K/V per cached token",
                  last.has_sol ? sol_text(last).c_str() : "no DRAM SOL (CPU engine)", snap.on_gpu ? "CUDA" : "CPU",
                  snap.weight_bytes / 1e6, per_token_kb);
    dash::wrapped_muted(caption);
    float top = 0;
    for (const float v : gbps) top = std::max(top, v);
    dash::line_chart(
        "##decode_gbps", gbps, top * 1.25f, ImGui::GetContentRegionAvail().x, ImGui::GetFontSize() * 4.0f,
        IM_COL32(110, 165, 255, 255), static_cast<float>(dram_sol), dram_sol > 0 ? "DRAM SOL" : nullptr,
        [&] {
          char b[32];
          std::snprintf(b, sizeof b, "%.2f GB/s", top * 1.25f);
          return std::string(b);
        }(),
        [&](int i, float v) {
          const AnswerStats& a = m.answers[static_cast<size_t>(i)];
          char buf[160];
          std::snprintf(buf, sizeof buf, "answer %d: %.2f GB/s\n%.1f tok/s at ~%d tokens of context", i + 1, v,
                        a.decode_tokens_per_s, a.context_tokens);
          return std::string(buf);
        });
    dash::note_widget(s, "throughput_decode");
  }
}

void answers_section(DashboardContext& ctx) {
  const Metrics& m = ctx.metrics;
  if (m.answers.empty()) return;
  dash::heading("Per answer", ctx.fonts);
  const ImGuiTableFlags flags =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("##answers", 6, flags)) return;
  for (const char* h : {"answer", "tokens", "decode tok/s", "GB/s", "prefill", "TTFT"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  ImGui::PushFont(ctx.fonts.mono);
  const int n = static_cast<int>(m.answers.size());
  for (int i = n - 1; i >= 0 && i >= n - 5; --i) {
    const AnswerStats& a = m.answers[static_cast<size_t>(i)];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("#%d", i + 1);
    ImGui::TableNextColumn();
    ImGui::Text("%d", a.generated_tokens);
    ImGui::TableNextColumn();
    ImGui::TextColored(palette::kAccent, "%.1f", a.decode_tokens_per_s);
    ImGui::TableNextColumn();
    ImGui::Text("%.2f", answer_gbps(a, ctx.snap));
    ImGui::TableNextColumn();
    ImGui::Text("%d tok \xC2\xB7 %.0f tok/s", a.prompt_tokens, a.prefill_tokens_per_s);
    ImGui::TableNextColumn();
    ImGui::Text("%.0f ms", a.ttft_ms);
  }
  ImGui::PopFont();
  ImGui::EndTable();
}

void sol_section(DashboardContext& ctx) {
  dash::heading("How SOL is computed here", ctx.fonts);
  ImGui::PushFont(ctx.fonts.mono);
  ImGui::PushTextWrapPos(0.0f);
  if (ctx.device.cuda) {
    ImGui::TextUnformatted(ctx.device.info.sol_formula.c_str());
  } else {
    ImGui::TextColored(palette::kWarning, "no CUDA device: no SOL; CPU rates are shown as measured, without a %%");
  }
  ImGui::TextColored(palette::kMuted,
                     "prefill FLOPs = 4\xC2\xB7"
                     "B\xC2\xB7Hq\xC2\xB7Lq\xC2\xB7Lk\xC2\xB7"
                     "D, halved when causal "
                     "(Q\xC2\xB7K\xE1\xB5\x80 and P\xC2\xB7V; a multiply-add is 2) \xE2\x80\x94 the count of "
                     "PyTorch and FlashAttention");
  ImGui::TextColored(palette::kMuted,
                     "decode bytes/step = weights + 2\xC2\xB7layers\xC2\xB7Hkv\xC2\xB7"
                     "D\xC2\xB7"
                     "2 B per cached token");
  ImGui::PopTextWrapPos();
  ImGui::PopFont();
}

void frames_section(DashboardContext& ctx) {
  const Metrics& m = ctx.metrics;
  dash::heading("UI frame time", ctx.fonts);
  float worst = 0.0f;
  for (const float v : m.frame_ms) worst = std::max(worst, v);
  char overlay[128];
  if (m.busy_frames > 0) {
    std::snprintf(overlay, sizeof overlay, "%.0f fps now \xC2\xB7 while generating: mean %.1f ms, worst %.1f ms",
                  ImGui::GetIO().Framerate, m.busy_frame_ms_sum / m.busy_frames, m.busy_frame_ms_max);
  } else {
    std::snprintf(overlay, sizeof overlay, "%.0f fps now", ImGui::GetIO().Framerate);
  }
  ImGui::PlotLines("##frames", m.frame_ms.data(), Metrics::kFrameWindow, m.frame_ms_next, overlay, 0.0f,
                   std::max(40.0f, worst * 1.2f),
                   ImVec2(ImGui::GetContentRegionAvail().x, ImGui::GetFontSize() * 3.5f));
}

}  // namespace

void tab_throughput(DashboardState& s, DashboardContext& ctx) {
  prefill_section(s, ctx);
  decode_section(s, ctx);
  answers_section(ctx);
  sol_section(ctx);
  frames_section(ctx);
}

}  // namespace flashscope::app
