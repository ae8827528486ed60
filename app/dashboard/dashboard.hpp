// The dashboard: the device and its speed of light (SOL) on top, then one tab
// per view of the kernels:
//   Attention tiles  q-tile × kv-tile heatmaps of attention mass and time per
//                    tile, causal skips marked; click a tile for its softmax
//                    probabilities
//   Online softmax   one row's m, l and rescale factor across the KV tiles,
//                    each tile's share, the final 1/l and LSE
//   Pipeline         one CTA's warps on a timeline with its stage buffers in
//                    flight; the launch on an SM × time chart with its tail
//   Throughput       TFLOPS / % of SOL per prefill, GB/s / % of DRAM SOL for
//                    decode, histories, and how SOL is computed
//   Kernel lab       a kernel and a synthetic shape, run continuously, its
//                    throughput and pipeline updating live
// The first three draw the trace TraceSources shows (a replayed file, the
// chat's live capture, the lab's) and always say where it came from.
//
// The caller owns every piece of state: DashboardState (selections and the
// views' caches, keyed on the trace's version) and what DashboardContext
// points at. The views' arithmetic lives in viz/ (no GL, tested there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/engine_worker.hpp"
#include "dashboard/baked_picture.hpp"
#include "dashboard/metrics.hpp"
#include "dashboard/token_view.hpp"
#include "flashscope/device.hpp"
#include "lab/kernel_lab.hpp"
#include "platform/ui_theme.hpp"
#include "traces/trace_sources.hpp"
#include "viz/occupancy.hpp"
#include "viz/pipeline.hpp"
#include "viz/prob_block.hpp"
#include "viz/softmax_series.hpp"
#include "viz/tile_grid.hpp"

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
  std::string why_not;    // when not: why, in words (what query_device's status means)
  std::string why_not_status;  // and the status itself, on hover
  unsigned cpu_threads = 0;
  std::string cpu_name;   // /proc/cpuinfo's model name, when readable
};
DeviceSummary query_device_summary();
// Why query_device's status `why` leaves the app on the CPU, in a sentence a user can act on.
std::string device_unavailable_words(const Status& why, bool cuda_available);

// A widget's rectangle in framebuffer pixels, for the headless layout report.
struct NamedRect {
  std::string name;
  float x = 0, y = 0, w = 0, h = 0;
};

struct TilesView {
  uint64_t version = 0;  // of the trace the caches below were built from
  viz::TileGrid grid;
  bool log_scale = false;      // mass colour scale
  int sel_q = -1, sel_k = -1;  // the clicked (or default) tile
  viz::ProbBlock block;        // its probabilities
  int block_row = -1;          // the block's row the key table lists (-1: the one with most mass)
};

struct SoftmaxView {
  uint64_t version = 0;
  std::vector<uint32_t> rows;  // rows with records
  int row_index = -1;          // into rows
  viz::SoftmaxSeries series;
};

struct PipelineView {
  uint64_t version = 0;
  std::vector<uint32_t> ctas;  // CTAs with spans
  int cta_index = -1;          // into ctas
  viz::CtaPipeline pipe;
  viz::Occupancy occupancy;
  float tail_share = 0.1f;
};

struct DashboardState {
  DashboardTab active = DashboardTab::kThroughput;
  bool select_active = true;  // make `active` the selected tab on the next frame (--tab, start-up)

  TilesView tiles;
  TokenView tokens;  // the Attention tab on a trace of the model's own attention
  SoftmaxView softmax;
  PipelineView pipeline;
  PipelineView lab_pipeline;  // the lab tab's small copy of the pictures

  // The chat capture's traced head and layer; the main loop re-captures when they change.
  int chat_head = 0;
  bool chat_head_changed = false;
  int chat_layer = 0;

  LabConfig lab_config;
  bool lab_config_set = false;       // false until the device's default is taken
  bool show_lab_when_ready = false;  // Run pressed: show the lab's trace once it has one
  int lab_fields_clipped = 0;        // the lab's number fields too narrow for their largest value (last drawn)

  // File → Open trace…
  bool open_dialog_requested = false;
  std::string open_path = "assets/traces/cpu-example.fstrace";
  float open_dialog_rect[4] = {0, 0, 0, 0};  // where it was drawn last frame (w 0: closed), framebuffer pixels
  bool open_buttons_visible = false;          // its Open and Cancel buttons were in view

  std::vector<NamedRect> widgets;  // drawn this frame (cleared by draw_dashboard)
  std::string device_note;         // the device card's line under its title, as drawn
  // Labels whose fit matters (colour bars, lane names), drawn this frame;
  // name "WIDGET:TEXT". The layout report checks they stay apart.
  std::vector<NamedRect> labels;
  PictureStore pictures;           // the views' baked pictures, by widget name
};

// Everything the dashboard reads, and the two things it drives.
struct DashboardContext {
  const DeviceSummary& device;
  const EngineSnapshot& snap;
  const Metrics& metrics;
  const UiFonts& fonts;
  TraceSources& sources;
  bool chat_capture_busy = false;
  KernelLab& lab;
  const LabSnapshot& lab_snap;
};

void draw_dashboard(DashboardState& state, DashboardContext& ctx);

// The File menu (in the window's menu bar) and its "Open trace" dialog.
void draw_file_menu(DashboardState& state, TraceSources& sources, bool* quit);
void draw_open_trace_dialog(DashboardState& state, TraceSources& sources);

}  // namespace flashscope::app
