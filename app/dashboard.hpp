// The dashboard: the device and its speed of light (SOL) on top, then one tab
// per view of the kernels — Attention tiles, Online softmax, Pipeline,
// Throughput, Kernel lab.
//
// The trace-driven views (tiles, softmax state, pipeline spans, the lab's
// live runs) wait on the probe traces; until then each tab says exactly
// what it will show and draws what can already be computed: the causal tile
// map of the last prefill, the online-softmax recurrence, the pipeline's
// stage legend, tokens/s of every answer, the kernel family v1..v6.
#pragma once

#include <string>

#include "engine_worker.hpp"
#include "flashscope/device.hpp"
#include "metrics.hpp"
#include "ui_theme.hpp"

namespace flashscope::app {

enum class DashboardTab : int {
  kAttentionTiles = 0,
  kOnlineSoftmax,
  kPipeline,
  kThroughput,
  kKernelLab,
  kCount,
};

const char* dashboard_tab_name(DashboardTab tab);
// Accepts any spelling that matches a tab's name with case, spaces, '-' and
// '_' ignored, or a unique prefix of it: "throughput", "kernel-lab", "lab",
// "Online softmax", "softmax" (a word of it).
bool parse_dashboard_tab(const std::string& text, DashboardTab* out);

// The device as the dashboard shows it; queried once at start-up.
struct DeviceSummary {
  bool cuda = false;
  DeviceInfo info;        // when cuda
  std::string why_not;    // when not: query_device's message
  unsigned cpu_threads = 0;
  std::string cpu_name;   // /proc/cpuinfo's model name, when readable
};
DeviceSummary query_device_summary();

struct DashboardState {
  DashboardTab active = DashboardTab::kThroughput;
  bool select_active = true;  // make `active` the selected tab on the next frame (--tab, start-up)
};

void draw_dashboard(DashboardState& state, const DeviceSummary& device, const EngineSnapshot& snapshot,
                    const Metrics& metrics, const UiFonts& fonts);

}  // namespace flashscope::app
