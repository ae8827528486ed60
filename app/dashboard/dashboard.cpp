#include "dashboard/dashboard.hpp"

#include <imgui.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "dashboard/dash_draw.hpp"
#include "dashboard/tabs/tabs.hpp"
#include "viz/trace_label.hpp"

namespace flashscope::app {

namespace {

constexpr const char* kTabNames[] = {"Attention tiles", "Online softmax", "Pipeline", "Throughput", "Kernel lab"};

std::string normalized(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

constexpr const char* kSolExplainer =
    "With a GPU this card shows its speed of light, read off the device: SOL TFLOPS = SMs × max SM clock × "
    "tensor FLOPs/clock/SM (BF16 dense, FP32 accumulate); DRAM GB/s = memory clock × 2 × bus width / 8.";

// The device and its SOL: a title line, one line of numbers, and the
// formula (GPU) or what is missing and why (CPU). Sized to its text.
void draw_device_card(const DeviceSummary& device, const UiFonts& fonts) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float wrap = ImGui::GetContentRegionAvail().x - 2.0f * style.WindowPadding.x;
  ImGui::PushFont(fonts.title);
  const float title_h = ImGui::GetTextLineHeight();
  ImGui::PopFont();
  ImGui::PushFont(fonts.mono);
  const float mono_h = ImGui::GetTextLineHeight();
  const float formula_h = device.cuda ? ImGui::CalcTextSize(device.info.sol_formula.c_str(), nullptr, false, wrap).y : 0;
  ImGui::PopFont();
  const float body_h =
      device.cuda ? mono_h + formula_h : ImGui::CalcTextSize(device.why_not.c_str(), nullptr, false, wrap).y;
  const int lines = device.cuda ? 3 : 2;
  const float h = title_h + body_h + (lines - 1) * style.ItemSpacing.y + 2.0f * style.WindowPadding.y;

  ImGui::PushStyleColor(ImGuiCol_ChildBg, palette::kCard);
  ImGui::BeginChild("##device", ImVec2(0.0f, h), true, ImGuiWindowFlags_NoScrollbar);
  if (device.cuda) {
    const DeviceInfo& d = device.info;
    ImGui::PushFont(fonts.title);
    ImGui::TextColored(palette::kAccent, "%s", d.name.c_str());
    ImGui::PopFont();
    ImGui::SameLine();
    ImGui::TextColored(palette::kMuted, "sm_%d%d · %d SMs · %.2f GHz · %.0f GiB · L2 %d MiB", d.cc_major, d.cc_minor,
                       d.sm_count, d.sm_clock_ghz, d.global_mem_gib, d.l2_mib);
    ImGui::PushFont(fonts.mono);
    ImGui::Text("SOL tensor %.1f TFLOPS (BF16 dense, FP32 accumulate)   SOL DRAM %.0f GB/s", d.sol_tflops,
                d.sol_dram_gbps);
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kMuted);
    ImGui::TextWrapped("%s", d.sol_formula.c_str());
    ImGui::PopStyleColor();
    ImGui::PopFont();
  } else {
    ImGui::PushFont(fonts.title);
    ImGui::TextColored(palette::kWarning, "CPU backend: no CUDA device");
    ImGui::PopFont();
    ImGui::SameLine();
    ImGui::TextColored(palette::kMuted, "%s · %u hardware threads", device.cpu_name.empty() ? "CPU" :
                       device.cpu_name.c_str(), device.cpu_threads);
    ImGui::SameLine();
    dash::help_marker(kSolExplainer);  // on hover: a short window has no lines to spare for it
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(device.why_not.c_str());
    ImGui::PopTextWrapPos();
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("query_device(0): %s", device.why_not_status.c_str());
  }
  ImGui::EndChild();
  ImGui::PopStyleColor();
}

ImVec4 provenance_color(TraceOrigin o) { return o == TraceOrigin::kReplay ? palette::kUser : palette::kAccent; }

void no_trace_card(DashboardContext& ctx) {
  ImGui::PushStyleColor(ImGuiCol_ChildBg, palette::kCard);
  const float h = ImGui::GetTextLineHeightWithSpacing() * 5.5f + ImGui::GetStyle().WindowPadding.y * 2.0f;
  ImGui::BeginChild("##no_trace", ImVec2(0.0f, h), true, ImGuiWindowFlags_NoScrollbar);
  ImGui::PushFont(ctx.fonts.title);
  ImGui::TextColored(palette::kWarning, "%s", ctx.chat_capture_busy ? "Capturing a trace…" : "No trace to show yet");
  ImGui::PopFont();
  ImGui::BulletText("Chat: after each answer the app traces a prefill of the model's attention shape.");
  ImGui::BulletText(
      "File \xE2\x86\x92 Open trace\xE2\x80\xA6 (or --replay FILE): a trace saved by flashscope-cli trace, "
      "from this machine or a GPU server.");
  ImGui::BulletText("Kernel lab \xE2\x86\x92 Run: a kernel on a synthetic shape, traced every few seconds.");
  ImGui::EndChild();
  ImGui::PopStyleColor();
}

}  // namespace

const Trace* draw_trace_header(DashboardState&, DashboardContext& ctx, uint64_t* version) {
  TraceSources& src = ctx.sources;
  if (!src.replay_error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kError);
    ImGui::PushTextWrapPos(ImGui::GetContentRegionAvail().x - ImGui::GetFontSize() * 4.0f);
    ImGui::TextUnformatted(src.replay_error.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
    ImGui::SameLine();
    if (ImGui::SmallButton("Dismiss")) src.replay_error.clear();
  }
  const TraceSlot* shown = shown_slot(src);
  // The picker lists the sources that hold a trace.
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Data");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 9.0f);
  if (ImGui::BeginCombo("##source", shown ? trace_origin_name(src.shown) : "none")) {
    for (const TraceOrigin o : {TraceOrigin::kReplay, TraceOrigin::kChat, TraceOrigin::kLab}) {
      const TraceSlot* slot = slot_of(src, o);
      ImGui::BeginDisabled(!slot->trace);
      if (ImGui::Selectable(trace_origin_name(o), src.shown == o)) show_origin(src, o);
      ImGui::EndDisabled();
    }
    ImGui::EndCombo();
  }
  if (!shown) {
    no_trace_card(ctx);
    return nullptr;
  }
  const TraceMeta& m = shown->trace->meta;
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  ImGui::TextColored(provenance_color(src.shown), "%s%s", src.shown == TraceOrigin::kReplay ? "" : "\xE2\x97\x8F ",
                     shown->provenance.c_str());
  ImGui::PushFont(ctx.fonts.mono);
  ImGui::TextUnformatted(viz::trace_source_line(m).c_str());
  ImGui::PopFont();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("device · backend · kernel%s", m.producer.empty() ? "" : " · producer");
  dash::muted("%s", viz::trace_shape_line(m).c_str());
  if (!shown->note.empty()) dash::wrapped_muted(shown->note);
  *version = shown->version;
  return shown->trace.get();
}

const char* dashboard_tab_name(DashboardTab tab) {
  const int i = static_cast<int>(tab);
  return i >= 0 && i < static_cast<int>(DashboardTab::kCount) ? kTabNames[i] : "?";
}

bool parse_dashboard_tab(const std::string& text, DashboardTab* out) {
  const std::string want = normalized(text);
  if (want.empty()) return false;
  int match = -1;
  for (int i = 0; i < static_cast<int>(DashboardTab::kCount); ++i) {
    const std::string name = kTabNames[i];
    bool hit = normalized(name).rfind(want, 0) == 0;  // a prefix of the whole name
    for (size_t start = 0; !hit && start < name.size();) {  // or of one of its words
      const size_t end = name.find(' ', start);
      hit = normalized(name.substr(start, end == std::string::npos ? std::string::npos : end - start)).rfind(want, 0) == 0;
      start = end == std::string::npos ? name.size() : end + 1;
    }
    if (!hit) continue;
    if (match >= 0) return false;  // ambiguous
    match = i;
  }
  if (match < 0) return false;
  *out = static_cast<DashboardTab>(match);
  return true;
}

std::string device_unavailable_words(const Status& why, bool cuda_available) {
  // query_device's status names the call and the code; the card says what that means for the user.
  if (why.code() == StatusCode::kUnsupported && why.message().find("no CUDA backend") != std::string::npos) {
    return "This build has no CUDA code (built without nvcc, or with -DFLASHSCOPE_CUDA=OFF): the model, the "
           "traces and the kernel lab run on the CPU.";
  }
  if (why.code() == StatusCode::kUnsupported || !cuda_available) {
    return "No NVIDIA GPU was found (or its driver is not loaded; nvidia-smi lists what the driver sees): the "
           "model, the traces and the kernel lab run on the CPU.";
  }
  return "The GPU could not be queried (" + why.message() +
         "): the model, the traces and the kernel lab run on the CPU.";
}

DeviceSummary query_device_summary() {
  DeviceSummary s;
  s.cpu_threads = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) s.cpu_name = line.substr(line.find_first_not_of(" \t", colon + 1));
    break;
  }
  auto info = query_device(0);
  if (info.ok() && cuda_available()) {
    s.cuda = true;
    s.info = info.value();
    return s;
  }
  s.why_not_status = info.ok() ? "a device, but the runtime reports CUDA unavailable" : info.status().to_string();
  s.why_not = device_unavailable_words(info.ok() ? Status(StatusCode::kUnsupported, "") : info.status(),
                                       cuda_available());
  return s;
}

void draw_dashboard(DashboardState& state, DashboardContext& ctx) {
  state.widgets.clear();
  state.labels.clear();
  state.pictures.collect(ImGui::GetFrameCount());
  ImGui::PushFont(ctx.fonts.title);
  ImGui::TextUnformatted("Dashboard");
  ImGui::PopFont();
  draw_device_card(ctx.device, ctx.fonts);
  state.device_note = ctx.device.cuda ? ctx.device.info.name : ctx.device.why_not;
  if (!ImGui::BeginTabBar("##dashboard_tabs")) return;
  const int requested = state.select_active ? static_cast<int>(state.active) : -1;
  for (int i = 0; i < static_cast<int>(DashboardTab::kCount); ++i) {
    const auto tab = static_cast<DashboardTab>(i);
    const ImGuiTabItemFlags flags = i == requested ? ImGuiTabItemFlags_SetSelected : 0;
    if (!ImGui::BeginTabItem(kTabNames[i], nullptr, flags)) continue;
    state.active = tab;
    ImGui::BeginChild("##tab", ImVec2(0.0f, 0.0f), false);
    switch (tab) {
      case DashboardTab::kAttentionTiles:
        tab_attention_tiles(state, ctx);
        break;
      case DashboardTab::kOnlineSoftmax:
        tab_online_softmax(state, ctx);
        break;
      case DashboardTab::kPipeline:
        tab_pipeline(state, ctx);
        break;
      case DashboardTab::kThroughput:
        tab_throughput(state, ctx);
        break;
      case DashboardTab::kKernelLab:
        tab_kernel_lab(state, ctx);
        break;
      case DashboardTab::kCount: break;
    }
    ImGui::EndChild();
    ImGui::EndTabItem();
  }
  state.select_active = false;
  ImGui::EndTabBar();
}

}  // namespace flashscope::app
