// Kernel lab: pick a prefill kernel (v1..v6, the Hopper kernel where the
// runtime has it) and a synthetic shape; Run loops it on the lab's thread
// and this tab follows live — throughput per run against SOL, each kernel's
// median on this shape side by side (switch kernels to watch the seed's
// progression), and the pipeline pictures of the latest capture.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "viz/units.hpp"

namespace flashscope::app {

namespace {

struct VersionNote {
  const char* name;
  const char* adds;
};
constexpr VersionNote kVersions[] = {
    {"v1", "mma.m16n8k16 + ldmatrix + cp.async; loads and math do not overlap"},
    {"v2", "+ XOR-swizzled shared memory: no bank conflicts on ldmatrix"},
    {"v3", "+ 2-stage pipeline: the next K/V tile loads while this one computes"},
    {"v4", "+ ldmatrix.x4 for K and V: half the ldmatrix instructions"},
    {"v5", "+ K double buffer, single V buffer, larger KV tile (default at D 64)"},
    {"v6", "+ K and V double-buffered; Q\xC2\xB7K(t+1)\xE1\xB5\x80 runs under softmax(t) (default at D 128)"},
    {"hopper", "sm_90a: wgmma from shared memory, a producer warp, two consumer warpgroups"},
};

const char* version_note(const std::string& name) {
  for (const VersionNote& v : kVersions) {
    if (name == v.name) return v.adds;
  }
  return "";
}

std::string rate_text(double tflops) {
  char buf[48];
  if (tflops >= 1.0)
    std::snprintf(buf, sizeof buf, "%.1f TFLOPS", tflops);
  else
    std::snprintf(buf, sizeof buf, "%.2f GFLOPS", tflops * 1e3);
  return buf;
}

// Puts the next item, `width` wide, on the current line when it fits there.
void flow(float width) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x + width <= right) ImGui::SameLine();
}

// The shape controls; true when anything changed. Each number field is as
// wide as its largest value needs (kv len: 6 digits) beside its − and +
// buttons; *clipped counts fields whose largest value would not fit.
bool shape_controls(SyntheticShape& sh, int* clipped) {
  bool changed = false;
  const ImGuiStyle& style = ImGui::GetStyle();
  bool first = true;
  auto int_field = [&](const char* label, int* v, int step, int fast, int lo, int hi) {
    const float buttons = 2.0f * (ImGui::GetFrameHeight() + style.ItemInnerSpacing.x);
    const float need = ImGui::CalcTextSize(std::to_string(hi).c_str()).x + 2.0f * style.FramePadding.x;
    const float w = need + buttons;
    if (!first) flow(w + style.ItemInnerSpacing.x + ImGui::CalcTextSize(label, nullptr, true).x);
    first = false;
    ImGui::SetNextItemWidth(w);
    if (ImGui::InputInt(label, v, step, fast)) {
      *v = std::clamp(*v, lo, hi);
      changed = true;
    }
    // What the text box got, from the drawn item: its width less the
    // buttons, the label and the spacing before it.
    const float label_w = ImGui::CalcTextSize(label, nullptr, true).x;
    const float box = ImGui::GetItemRectSize().x - buttons - (label_w > 0 ? style.ItemInnerSpacing.x + label_w : 0.0f);
    if (box + 0.5f < need) ++*clipped;
  };
  int_field("batch", &sh.batch, 1, 4, 1, 64);
  int_field("q-heads", &sh.q_heads, 1, 8, 1, 128);
  int_field("kv-heads", &sh.kv_heads, 1, 8, 1, 128);
  int_field("q len", &sh.q_len, 64, 1024, 1, 65536);
  int_field("kv len", &sh.kv_len, 64, 1024, 1, 131072);
  const float radio = ImGui::GetFrameHeight() + style.ItemInnerSpacing.x;
  flow(ImGui::CalcTextSize("head_dim").x + 2.0f * radio + ImGui::CalcTextSize("64128").x + 3.0f * style.ItemSpacing.x);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("head_dim");
  ImGui::SameLine();
  changed |= ImGui::RadioButton("64", &sh.head_dim, 64);
  ImGui::SameLine();
  changed |= ImGui::RadioButton("128", &sh.head_dim, 128);
  flow(radio + ImGui::CalcTextSize("causal").x);
  changed |= ImGui::Checkbox("causal", &sh.causal);
  return changed;
}

// The kernel picker (the CPU path alone without a CUDA device); true when
// the kernel changed.
bool kernel_picker(LabConfig& cfg, bool gpu) {
  bool changed = false;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Kernel");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7.0f);
  ImGui::BeginDisabled(!gpu);
  if (ImGui::BeginCombo("##kernel", gpu ? prefill_kernel_name(cfg.kernel) : "cpu-tiled")) {
    std::vector<PrefillKernel> kernels = lab_kernels();
    kernels.insert(kernels.begin(), PrefillKernel::kAuto);
    for (const PrefillKernel k : kernels) {
      // The Hopper kernel needs an sm_90 device and a build that carries its code.
      const bool runnable = prefill_kernel_runnable(k);
      ImGui::BeginDisabled(!runnable);
      if (ImGui::Selectable(prefill_kernel_name(k), k == cfg.kernel)) {
        cfg.kernel = k;
        changed = true;
      }
      ImGui::EndDisabled();
      if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
        ImGui::SetTooltip(
            "%s%s", runnable ? "" : "not runnable on this device or build \xC2\xB7 ",
            k == PrefillKernel::kAuto ? "what dispatch picks for this shape" : version_note(prefill_kernel_name(k)));
      }
    }
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  return changed;
}

// Run / Stop, and what runs where.
void run_controls(DashboardState& s, DashboardContext& ctx, const LabConfig& cfg, bool gpu) {
  const LabSnapshot& lab = ctx.lab_snap;
  if (!lab.running) {
    ImGui::PushStyleColor(ImGuiCol_Button, ImVec4(0.25f, 0.42f, 0.08f, 1.0f));
    if (ImGui::Button("  Run  ")) {
      ctx.lab.run(cfg);
      s.show_lab_when_ready = true;
    }
    ImGui::PopStyleColor();
  } else if (ImGui::Button("  Stop  ")) {
    ctx.lab.stop();
  }
  ImGui::SameLine();
  if (!gpu) {
    ImGui::TextColored(palette::kWarning, "no CUDA device: the CPU path (cpu-tiled) runs");
    if (!lab.device.empty()) {
      ImGui::SameLine();
      dash::muted("on %s", lab.device.c_str());
    }
  } else {
    dash::muted("%s on %s", lab.running ? ("running " + lab.kernel).c_str() : "stopped",
                lab.device.empty() ? ctx.device.info.name.c_str() : lab.device.c_str());
  }
}

// The seed's shape, the loaded model's and the default config as one click
// each; true when one was taken.
bool shape_presets(LabConfig& cfg, const DashboardContext& ctx, bool gpu) {
  bool changed = false;
  if (ImGui::SmallButton("Seed shape 1\xC3\x97"
                         "8\xC3\x97"
                         "4096\xC3\x97"
                         "8192 D128")) {
    cfg.shape = {1, 8, 8, 4096, 8192, 128, false};
    changed = true;
  }
  ImGui::SameLine();
  if (ctx.snap.state != EngineState::kLoading && ctx.snap.state != EngineState::kFailed) {
    const ModelConfig& mc = ctx.snap.config;
    const std::string label = "Model shape (" + std::to_string(mc.n_heads) + "/" + std::to_string(mc.n_kv_heads) +
                              " heads, D" + std::to_string(mc.head_dim) + ")";
    if (ImGui::SmallButton(label.c_str())) {
      cfg.shape = {1, mc.n_heads, mc.n_kv_heads, 1024, 1024, mc.head_dim, true};
      changed = true;
    }
    ImGui::SameLine();
  }
  if (ImGui::SmallButton("Default")) {
    cfg = default_lab_config(gpu);
    changed = true;
  }
  return changed;
}

// The live numbers: this run's rate against SOL, its history, and each
// kernel's median on this shape side by side (the progression).
void live_numbers(DashboardState& s, DashboardContext& ctx) {
  const LabSnapshot& lab = ctx.lab_snap;
  const viz::Rate r = viz::prefill_rate(lab.flops, lab.last_ms, lab.sol_tflops);
  ImGui::Spacing();
  ImGui::PushFont(ctx.fonts.title);
  ImGui::TextColored(palette::kAccent, "%s", rate_text(lab.tflops.recent_median(10)).c_str());
  ImGui::PopFont();
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  dash::muted(
      "%s \xC2\xB7 %s \xC2\xB7 %s per run \xC2\xB7 %llu runs \xC2\xB7 %s FLOPs each", lab.kernel.c_str(),
      r.has_sol ? (std::to_string(static_cast<int>(r.pct_of_sol + 0.5)) + "% of SOL").c_str() : "no SOL (CPU)",
      viz::format_us(lab.last_ms * 1e3).c_str(), static_cast<unsigned long long>(lab.runs),
      viz::format_si(lab.flops).c_str());
  const float top = std::max(lab.tflops.max(), 1e-9f) * 1.2f;
  dash::line_chart("##lab_history", lab.tflops.values, top, ImGui::GetContentRegionAvail().x,
                   ImGui::GetFontSize() * 4.0f, IM_COL32(118, 186, 0, 255), static_cast<float>(lab.sol_tflops),
                   lab.sol_tflops > 0 ? "SOL" : nullptr, rate_text(top),
                   [&](int i, float v) { return "run " + std::to_string(i + 1) + ": " + rate_text(v); });
  dash::note_widget(s, "lab_history");

  std::vector<std::string> labels;
  std::vector<float> values;
  float vmax = static_cast<float>(lab.sol_tflops);
  for (const LabKernelStats& k : lab.per_kernel) {
    labels.push_back(k.kernel);
    values.push_back(k.tflops.recent_median(10));
    vmax = std::max(vmax, values.back());
  }
  ImGui::TextUnformatted("Median per kernel on this shape");
  ImGui::SameLine();
  dash::help_marker(
      "Switch kernels while the lab runs: each keeps its own runs, so v1..v6 line up here on the same problem.");
  dash::bar_rows("##per_kernel", labels, values, vmax * 1.05f, ImGui::GetContentRegionAvail().x,
                 {IM_COL32(118, 186, 0, 255), IM_COL32(88, 150, 230, 255), IM_COL32(235, 160, 60, 255)}, [&](int i) {
                   std::string t = rate_text(values[static_cast<size_t>(i)]);
                   if (lab.sol_tflops > 0) {
                     char b[24];
                     std::snprintf(b, sizeof b, " (%.0f%%)", 100.0 * values[static_cast<size_t>(i)] / lab.sol_tflops);
                     t += b;
                   }
                   return t;
                 });
  dash::note_widget(s, "lab_kernels");
}

// The latest capture's pipeline: warp timeline and SM chart.
void latest_capture(DashboardState& s, DashboardContext& ctx) {
  const TraceSlot& slot = ctx.sources.lab;
  if (!slot.trace) return;
  dash::heading("Latest capture", ctx.fonts);
  dash::wrapped_muted(slot.provenance + " \xC2\xB7 " + slot.note);
  refresh_pipeline_view(s.lab_pipeline, *slot.trace, slot.version);
  const float h = ImGui::GetContentRegionAvail().y;
  if (!s.lab_pipeline.ctas.empty()) {
    draw_span_legend(s.lab_pipeline.pipe);
    draw_warp_timeline(s, *slot.trace, s.lab_pipeline.pipe, std::max(ImGui::GetFontSize() * 5.0f, h * 0.3f),
                       "lab_warps");
  }
  draw_sm_chart(
      s, *slot.trace, s.lab_pipeline.occupancy,
      s.lab_pipeline.ctas.empty() ? ~0u : s.lab_pipeline.ctas[static_cast<size_t>(s.lab_pipeline.cta_index)],
      std::max(ImGui::GetFontSize() * 7.0f, ImGui::GetContentRegionAvail().y - ImGui::GetFontSize() * 2.0f),
      "lab_sms");
}

}  // namespace

void tab_kernel_lab(DashboardState& s, DashboardContext& ctx) {
  const LabSnapshot& lab = ctx.lab_snap;
  const bool gpu = ctx.device.cuda;
  if (!s.lab_config_set) {
    s.lab_config = default_lab_config(gpu);
    s.lab_config_set = true;
  }
  LabConfig& cfg = s.lab_config;
  bool changed = kernel_picker(cfg, gpu);
  ImGui::SameLine();
  run_controls(s, ctx, cfg, gpu);

  s.lab_fields_clipped = 0;
  changed |= shape_controls(cfg.shape, &s.lab_fields_clipped);
  changed |= shape_presets(cfg, ctx, gpu);
  if (cfg.shape.q_heads % std::max(cfg.shape.kv_heads, 1) != 0) {
    ImGui::TextColored(palette::kError, "q-heads (%d) must be a multiple of kv-heads (%d)", cfg.shape.q_heads,
                       cfg.shape.kv_heads);
  } else if (changed && lab.running) {
    ctx.lab.run(cfg);  // the loop switches to it at its next run
  }
  if (!lab.error.empty()) ImGui::TextColored(palette::kError, "%s", lab.error.c_str());
  if (!lab.limit_note.empty()) dash::wrapped_muted(lab.limit_note);

  if (lab.runs == 0) {
    dash::heading("Not running", ctx.fonts);
    dash::wrapped_muted(gpu ? "Run times the kernel on this shape again and again (CUDA events) and traces it every "
                              "couple of seconds; switch kernels while it runs to compare them on the same problem."
                            : "Run times the CPU path on this shape again and again and traces it every couple of "
                              "seconds. On a machine with a CUDA device the kernel picker selects v1..v6.");
  } else {
    live_numbers(s, ctx);
  }
  latest_capture(s, ctx);
  if (ImGui::CollapsingHeader("What each kernel adds")) {
    for (const VersionNote& v : kVersions) {
      ImGui::PushFont(ctx.fonts.mono);
      ImGui::TextColored(palette::kAccent, "%-6s", v.name);
      ImGui::PopFont();
      ImGui::SameLine();
      ImGui::TextUnformatted(v.adds);
    }
  }
}

}  // namespace flashscope::app
