// flashscope: the desktop app. One window — chat on the left, dashboard on
// the right, a status bar below — drawn with Dear ImGui on OpenGL 3 through
// GLFW. The loop is Dear ImGui's own: poll, new frame, UI, render, swap.
// The model runs on EngineWorker's thread; each frame reads its snapshot.
//
// Beside the engine, two more threads feed the dashboard: LiveCapture traces
// a prefill of the model's shape after each answer, and KernelLab runs the
// lab's kernel while it is on. Both publish through snapshots the loop reads;
// TraceSources decides which trace the trace views show.
//
// Headless (tests, screenshots): --frames N [--screenshot PNG] renders N
// frames and exits; with --prompt it sends the prompt and keeps rendering
// until the answer ends and its trace is captured (or N frames); with
// --run-lab until the lab has runs and a trace. --replay FILE opens a trace
// first. Run it under xvfb-run where there is no display.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

#include "chat/chat_panel.hpp"
#include "chat/conversation.hpp"
#include "chat/engine_worker.hpp"
#include "dashboard/dashboard.hpp"
#include "dashboard/metrics.hpp"
#include "flashscope/model.hpp"
#include "lab/kernel_lab.hpp"
#include "platform/json.hpp"
#include "platform/options.hpp"
#include "platform/paths.hpp"
#include "platform/screenshot.hpp"
#include "platform/ui_theme.hpp"
#include "traces/live_capture.hpp"
#include "traces/trace_sources.hpp"

namespace fs = flashscope::app;

namespace {

// Frames faster than this sleep the rest: with vsync off (Xvfb, some
// drivers) an ImGui loop would otherwise spin a core the engine could use.
constexpr double kMinFrameSeconds = 1.0 / 75.0;

// What GLFW callbacks report; the loop reads it between frames.
struct WindowState {
  float content_scale = 1.0f;
  bool scale_changed = false;
};

// Where the panels were drawn on the last frame, in framebuffer pixels.
struct PanelRect {
  float x = 0, y = 0, w = 0, h = 0;
};
struct FrameLayout {
  float split = 0.42f;  // the chat panel's share of the width; the splitter moves it
  PanelRect chat, dashboard, status_bar;
};

// What the loop keeps for the dashboard's live sources between frames.
struct LiveState {
  bool model_captured = false;  // the example capture once the model has loaded
  size_t answers_captured = 0;  // answers a capture was requested for
  int conversation_tokens = 0;  // of the latest capture request (re-captures for another head reuse it)
  std::string provenance;
  uint64_t lab_trace_serial = 0;
  std::string capture_error;
};

PanelRect current_item_rect() {
  const ImVec2 a = ImGui::GetItemRectMin();
  const ImVec2 b = ImGui::GetItemRectMax();
  const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  return {a.x * fb.x, a.y * fb.y, (b.x - a.x) * fb.x, (b.y - a.y) * fb.y};
}

void draw_status_bar(const fs::EngineSnapshot& snap, const fs::DeviceSummary& device, const fs::TraceSources& sources,
                     const fs::UiFonts& fonts, float scale) {
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::PushFont(fonts.mono);
  ImGui::TextColored(fs::palette::kMuted, "FlashScope %s", FLASHSCOPE_APP_VERSION);
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  const bool slow = io.Framerate < 30.0f;
  ImGui::TextColored(slow ? fs::palette::kWarning : fs::palette::kMuted, "UI %.0f fps (%.1f ms)", io.Framerate,
                     1000.0f / std::max(io.Framerate, 1e-3f));
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  ImGui::TextColored(snap.state == fs::EngineState::kGenerating ? fs::palette::kAccent : fs::palette::kMuted,
                     "engine %s", fs::engine_state_name(snap.state));
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  if (device.cuda) ImGui::TextColored(fs::palette::kMuted, "CUDA: %s", device.info.name.c_str());
  else ImGui::TextColored(fs::palette::kMuted, "CPU backend (no CUDA device)");
  ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  if (const fs::TraceSlot* shown = fs::shown_slot(sources)) {
    ImGui::TextColored(fs::palette::kMuted, "trace: %s", shown->provenance.c_str());
    ImGui::SameLine(0.0f, ImGui::GetFontSize() * 1.5f);
  }
  if (fonts.dejavu) {
    ImGui::TextColored(fs::palette::kMuted, "DejaVu Sans %.0f px · scale %.2f · %.0f×%.0f", fonts.body_px, scale,
                       io.DisplaySize.x, io.DisplaySize.y);
  } else {
    ImGui::TextColored(fs::palette::kWarning, "%s", fonts.note.c_str());
  }
  ImGui::PopFont();
}

// The whole window: one undecorated host window filling the viewport, the
// chat and dashboard as child regions with a draggable splitter between
// them, and the status bar along the bottom.
void draw_main_window(FrameLayout& layout, fs::ChatPanelState& chat, fs::Conversation& conversation,
                      fs::EngineWorker& worker, fs::DashboardState& dashboard, fs::DashboardContext& ctx, float scale,
                      bool* quit) {
  const fs::EngineSnapshot& snap = ctx.snap;
  const fs::UiFonts& fonts = ctx.fonts;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  // No background: glClear already paints it (one full-screen fill less, see ui_theme.cpp).
  const ImGuiWindowFlags host_flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                      ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus |
                                      ImGuiWindowFlags_NoBackground | ImGuiWindowFlags_MenuBar;
  ImGui::Begin("FlashScope", nullptr, host_flags);
  if (ImGui::BeginMenuBar()) {
    fs::draw_file_menu(dashboard, ctx.sources, quit);
    ImGui::EndMenuBar();
  }
  fs::draw_open_trace_dialog(dashboard, ctx.sources);

  const ImGuiStyle& style = ImGui::GetStyle();
  const float status_h = ImGui::GetFrameHeight();
  const float body_h = ImGui::GetContentRegionAvail().y - status_h - style.ItemSpacing.y;
  const float splitter_w = std::round(6.0f * scale);
  const float avail_w = ImGui::GetContentRegionAvail().x - splitter_w - 2.0f * style.ItemSpacing.x;
  layout.split = std::clamp(layout.split, 0.25f, 0.75f);
  const float chat_w = std::round(avail_w * layout.split);

  ImGui::BeginChild("Chat", ImVec2(chat_w, body_h), true);
  fs::draw_chat_panel(chat, conversation, worker, snap, fonts);
  ImGui::EndChild();
  layout.chat = current_item_rect();

  ImGui::SameLine();
  ImGui::InvisibleButton("##splitter", ImVec2(splitter_w, body_h));
  if (ImGui::IsItemHovered() || ImGui::IsItemActive()) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeEW);
  if (ImGui::IsItemActive() && avail_w > 0.0f) layout.split += ImGui::GetIO().MouseDelta.x / avail_w;
  ImGui::SameLine();

  ImGui::BeginChild("Dashboard", ImVec2(0.0f, body_h), true);
  fs::draw_dashboard(dashboard, ctx);
  ImGui::EndChild();
  layout.dashboard = current_item_rect();

  ImGui::BeginGroup();
  draw_status_bar(snap, ctx.device, ctx.sources, fonts, scale);
  ImGui::EndGroup();
  layout.status_bar = current_item_rect();
  ImGui::End();
}

fs::JsonValue rect_json(const PanelRect& r) {
  fs::JsonValue o = fs::JsonValue::make_object();
  o.object["x"] = fs::JsonValue::of(static_cast<double>(r.x));
  o.object["y"] = fs::JsonValue::of(static_cast<double>(r.y));
  o.object["w"] = fs::JsonValue::of(static_cast<double>(r.w));
  o.object["h"] = fs::JsonValue::of(static_cast<double>(r.h));
  return o;
}

// The headless report: panel rectangles and what the run produced.
std::string layout_json(const FrameLayout& layout, const fs::DashboardState& dashboard, const fs::UiFonts& fonts,
                        int width, int height, int frames, const fs::EngineSnapshot& snap,
                        const fs::Conversation& conversation, const fs::TraceSources& sources,
                        const fs::LabSnapshot& lab) {
  fs::JsonValue root = fs::JsonValue::make_object();
  root.object["width"] = fs::JsonValue::of(width);
  root.object["height"] = fs::JsonValue::of(height);
  root.object["frames"] = fs::JsonValue::of(frames);
  root.object["tab"] = fs::JsonValue::of(fs::dashboard_tab_name(dashboard.active));
  root.object["font"] = fs::JsonValue::of(fonts.dejavu ? "DejaVu Sans" : "ImGui default");
  root.object["engine"] = fs::JsonValue::of(fs::engine_state_name(snap.state));
  fs::JsonValue panels = fs::JsonValue::make_object();
  panels.object["chat"] = rect_json(layout.chat);
  panels.object["dashboard"] = rect_json(layout.dashboard);
  panels.object["status_bar"] = rect_json(layout.status_bar);
  root.object["panels"] = std::move(panels);
  // The dashboard's drawn widgets (heatmaps, timelines, charts) of the last frame.
  fs::JsonValue widgets = fs::JsonValue::make_object();
  for (const fs::NamedRect& w : dashboard.widgets) widgets.object[w.name] = rect_json({w.x, w.y, w.w, w.h});
  root.object["widgets"] = std::move(widgets);
  // The baked pictures (baked_picture.hpp): how often each was rendered into
  // its texture, and how many frames it was shown from it unchanged.
  fs::JsonValue pictures = fs::JsonValue::make_object();
  for (const auto& [name, p] : dashboard.pictures.pictures()) {
    fs::JsonValue o = fs::JsonValue::make_object();
    o.object["renders"] = fs::JsonValue::of(p.renders());
    o.object["shows"] = fs::JsonValue::of(p.shows());
    pictures.object[name] = std::move(o);
  }
  root.object["pictures"] = std::move(pictures);
  root.object["messages"] = fs::JsonValue::of(static_cast<int>(conversation.messages.size()));
  const fs::TraceSlot* shown = fs::shown_slot(sources);
  root.object["source"] = fs::JsonValue::of(fs::trace_origin_name(shown ? sources.shown : fs::TraceOrigin::kNone));
  root.object["provenance"] = fs::JsonValue::of(shown ? shown->provenance : std::string());
  root.object["trace_device"] = fs::JsonValue::of(shown ? shown->trace->meta.device_name : std::string());
  root.object["replay_error"] = fs::JsonValue::of(sources.replay_error);
  root.object["lab_runs"] = fs::JsonValue::of(static_cast<double>(lab.runs));
  root.object["lab_kernel"] = fs::JsonValue::of(lab.kernel);
  return fs::json_write(root);
}

// Once per frame: requests the chat's captures (once the model has loaded,
// after each answer, when the traced head changes), and moves finished
// captures — the chat's and the lab's — into the trace sources.
void update_live_traces(LiveState& live, fs::TraceSources& sources, fs::LiveCapture& capture, fs::KernelLab& lab,
                        fs::LabSnapshot& lab_snap, fs::DashboardState& dashboard, const fs::EngineSnapshot& snap,
                        const fs::Metrics& metrics) {
  const bool model_ready = snap.state != fs::EngineState::kLoading && snap.state != fs::EngineState::kFailed;
  if (model_ready) {
    bool want = false;
    if (!live.model_captured) {
      live.model_captured = true;
      live.conversation_tokens = 0;
      live.provenance = "live \xC2\xB7 example once the model loaded";
      want = true;
    }
    if (metrics.answers.size() > live.answers_captured) {
      live.answers_captured = metrics.answers.size();
      live.conversation_tokens = metrics.answers.back().context_tokens;
      live.provenance = "live \xC2\xB7 after answer " + std::to_string(metrics.answers.size());
      want = true;
    }
    if (dashboard.chat_head_changed) {
      dashboard.chat_head_changed = false;
      want = true;
    }
    if (want) {
      capture.request(fs::chat_capture_job(snap.config, snap.model_name, live.conversation_tokens, dashboard.chat_head,
                                           live.provenance));
    }
  }
  fs::LiveCaptureResult done;
  if (capture.poll(&done)) {
    if (done.outcome.status.ok()) {
      char took[64];
      std::snprintf(took, sizeof took, " \xC2\xB7 captured in %.0f ms", done.outcome.wall_ms);
      fs::set_live_trace(sources, fs::TraceOrigin::kChat,
                         std::make_shared<const flashscope::Trace>(std::move(done.outcome.trace)), done.provenance,
                         done.outcome.note + " \xC2\xB7 " + done.note + took);
      live.capture_error.clear();
    } else {
      live.capture_error = done.outcome.status.to_string();
    }
  }
  lab.snapshot(&lab_snap);
  if (lab_snap.trace && lab_snap.trace_serial != live.lab_trace_serial) {
    live.lab_trace_serial = lab_snap.trace_serial;
    fs::set_live_trace(sources, fs::TraceOrigin::kLab, lab_snap.trace,
                       "live \xC2\xB7 kernel lab, capture " + std::to_string(lab_snap.trace_serial),
                       lab_snap.trace_note + " \xC2\xB7 synthetic inputs, " + fs::shape_label(lab_snap.shape));
  }
  if (dashboard.show_lab_when_ready && sources.lab.trace) {
    fs::show_origin(sources, fs::TraceOrigin::kLab);
    dashboard.show_lab_when_ready = false;
  }
}

// Without a GPU, OpenGL is Mesa's llvmpipe, whose rasterizer starts a thread
// per core; on a small machine a heavy dashboard view then takes every core
// from the CPU engine (measured on 2 cores: the pipeline view at 30 fps, the
// answer at 1.5 tokens/s; with one rasterizer thread 21 fps and 25 tokens/s).
// A quarter of the cores for it keeps the chat streaming. Hardware drivers
// ignore the variable, and a value the user set is kept.
void share_cores_with_software_gl() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = std::to_string(std::max(1u, cores / 4));
  setenv("LP_NUM_THREADS", threads.c_str(), /*overwrite=*/0);
}

// GCC's OpenMP lets a thread that reaches a barrier spin (~300k polls)
// before it sleeps. The CPU engine's team is as large as the machine (the
// UI's threads count as its own, see cpu_load.hpp), so on a small machine
// the UI thread or the rasterizer preempts a member at almost every barrier
// while the others spin on the cores those two need. Measured on 2 cores
// while the engine answered (medians of 4 runs per tab, software GL): the
// UI at 28-35 fps and the engine at 19-21 tokens/s as is; 37-55 fps and
// 30-36 tokens/s with OMP_WAIT_POLICY=passive (threads sleep at once). The
// engine alone (flashscope-cli, no window) is ~10% slower with it, so it is
// the app's choice, not the library's. libgomp reads the variable when it
// loads, before main(), so the app sets it and starts itself again. Only
// on up to 4 hardware threads, where it was measured (with cores to spare,
// spinning makes a barrier cheaper), and never over a value the user set.
void prefer_sleeping_openmp_threads(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::thread::hardware_concurrency() > 4) return;
  // The binary's own path, not /proc/self/exe: the process keeps its name (ps, pgrep, perf).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/1);
  execv(self, argv);  // returns only if it failed: then go on as we are
}

void glfw_error(int code, const char* message) { std::fprintf(stderr, "flashscope: GLFW error %d: %s\n", code, message); }

}  // namespace

int main(int argc, char** argv) {
  prefer_sleeping_openmp_threads(argv);
  fs::AppOptions opt;
  std::string error;
  if (!fs::parse_app_options(argc, argv, &opt, &error)) {
    std::fprintf(stderr, "flashscope: %s\n%s", error.c_str(), fs::kAppUsage);
    return 2;
  }
  if (opt.help) {
    std::fputs(fs::kAppUsage, stdout);
    return 0;
  }
  fs::DashboardState dashboard;
  if (!opt.tab.empty() && !fs::parse_dashboard_tab(opt.tab, &dashboard.active)) {
    std::fprintf(stderr, "flashscope: --tab: no tab named '%s' (attention, softmax, pipeline, throughput, lab)\n",
                 opt.tab.c_str());
    return 2;
  }

  share_cores_with_software_gl();
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr, "flashscope: cannot open a window (no display?). Without one, run it under "
                         "xvfb-run -a.\n");
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  float scale = opt.scale;
  if (scale <= 0.0f) {
    float sx = 1.0f, sy = 1.0f;
    if (GLFWmonitor* monitor = glfwGetPrimaryMonitor()) glfwGetMonitorContentScale(monitor, &sx, &sy);
    scale = std::max(1.0f, sx);
  }
  int win_w = opt.width, win_h = opt.height;
  if (!opt.headless()) {
    // Interactive: the default layout at the monitor's scale, inside its work area.
    win_w = static_cast<int>(opt.width * scale);
    win_h = static_cast<int>(opt.height * scale);
    if (GLFWmonitor* monitor = glfwGetPrimaryMonitor()) {
      int mx = 0, my = 0, mw = 0, mh = 0;
      glfwGetMonitorWorkarea(monitor, &mx, &my, &mw, &mh);
      if (mw > 0 && mh > 0) {
        win_w = std::min(win_w, mw * 95 / 100);
        win_h = std::min(win_h, mh * 95 / 100);
      }
    }
  }
  GLFWwindow* window = glfwCreateWindow(win_w, win_h, "FlashScope", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "flashscope: cannot create an OpenGL 3.0 window\n");
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  const char* gl_renderer = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
  const char* gl_version = reinterpret_cast<const char*>(glGetString(GL_VERSION));
  WindowState window_state;
  if (opt.scale <= 0.0f) {
    float sx = 1.0f, sy = 1.0f;
    glfwGetWindowContentScale(window, &sx, &sy);
    scale = std::max(1.0f, sx);
  }
  window_state.content_scale = scale;
  glfwSetWindowUserPointer(window, &window_state);
  glfwSetWindowContentScaleCallback(window, [](GLFWwindow* w, float sx, float) {
    auto* ws = static_cast<WindowState*>(glfwGetWindowUserPointer(w));
    ws->content_scale = std::max(1.0f, sx);
    ws->scale_changed = true;
  });

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed every frame; nothing to restore
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");
  fs::UiFonts fonts = fs::load_fonts(scale);
  fs::apply_style(scale);

  fs::EngineWorker worker;
  fs::EngineWorker::Options wo;
  wo.model_path = opt.model_path.empty() ? flashscope::find_default_model() : opt.model_path;
  if (wo.model_path.empty()) wo.model_path = std::string("assets/models/") + flashscope::kDefaultModelFile;
  wo.threads = opt.threads;
  wo.context = opt.context;
  worker.start(wo);

  // Everything the panels draw from; the loop owns it.
  const fs::DeviceSummary device = fs::query_device_summary();
  fs::Conversation conversation;
  if (opt.max_tokens > 0) conversation.settings.max_tokens = opt.max_tokens;
  if (opt.has_seed) {
    conversation.settings.seed = opt.seed;
    conversation.settings.random_seed = false;
  }
  if (opt.greedy) conversation.settings.temperature = 0.0f;
  fs::ChatPanelState chat;
  chat.focus_input = !opt.headless();
  fs::Metrics metrics;
  fs::EngineSnapshot snap;
  FrameLayout layout;
  fs::TraceSources sources;
  fs::LiveCapture live_capture;
  fs::KernelLab lab;
  fs::LabSnapshot lab_snap;
  LiveState live;

  bool replay_failed = false;
  if (!opt.replay.empty() && !fs::open_replay(sources, opt.replay).ok()) {
    std::fprintf(stderr, "flashscope: --replay: %s\n", sources.replay_error.c_str());
    replay_failed = true;
  }
  if (opt.run_lab) {
    dashboard.lab_config = fs::default_lab_config(device.cuda);
    dashboard.lab_config_set = true;
    dashboard.show_lab_when_ready = true;
    lab.run(dashboard.lab_config);
  }

  bool prompt_sent = false;
  int frames = 0;
  int frames_after_answer = 0;
  auto next_frame = std::chrono::steady_clock::now();
  const auto started = next_frame;
  std::string screenshot_error;

  while (!glfwWindowShouldClose(window)) {
    glfwPollEvents();
    if (window_state.scale_changed && opt.scale <= 0.0f) {
      // Moved to a monitor with another scale: re-rasterize the fonts, rescale the style.
      window_state.scale_changed = false;
      scale = window_state.content_scale;
      fonts = fs::load_fonts(scale);
      fs::apply_style(scale);
      ImGui_ImplOpenGL3_DestroyFontsTexture();
      ImGui_ImplOpenGL3_CreateFontsTexture();
    }

    worker.snapshot(&snap);
    fs::sync_chat_with_engine(chat, conversation, snap, metrics);
    update_live_traces(live, sources, live_capture, lab, lab_snap, dashboard, snap, metrics);
    if (opt.has_prompt && !prompt_sent && snap.state != fs::EngineState::kLoading) {
      fs::send_user_message(chat, conversation, worker, opt.prompt);  // a blank prompt sends nothing
      prompt_sent = true;
    }

    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    // Headless: no pointer, so a cursor parked over a plot draws no tooltip.
    if (opt.headless()) io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
    ImGui::NewFrame();
    fs::DashboardContext ctx{device, snap, metrics, fonts, sources, live_capture.busy(), lab, lab_snap};
    bool quit = false;
    draw_main_window(layout, chat, conversation, worker, dashboard, ctx, scale, &quit);
    if (quit) glfwSetWindowShouldClose(window, GLFW_TRUE);
    ImGui::Render();

    int fb_w = 0, fb_h = 0;
    glfwGetFramebufferSize(window, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
    glClearColor(bg.x, bg.y, bg.z, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    ++frames;

    // Headless: done after N frames, or a couple of frames after the answer
    // (so its final statistics are on screen).
    bool last = false;
    if (opt.headless()) {
      // With --prompt: until the answer and the trace captured after it are on screen.
      if (prompt_sent && chat.pending_id == 0 && !live_capture.busy()) ++frames_after_answer;
      const bool answered = opt.has_prompt && frames_after_answer >= 3;
      // With --run-lab: until the lab has timed a few runs and its trace is shown.
      const bool lab_done = !opt.run_lab || (lab_snap.runs >= 5 && lab_snap.trace && sources.lab.trace);
      last = frames >= opt.frames || (answered && lab_done) || (!opt.has_prompt && opt.run_lab && lab_done);
    }
    if (last && !opt.screenshot.empty()) {
      const flashscope::Status s = fs::write_framebuffer_png(opt.screenshot, fb_w, fb_h);
      if (!s.ok()) screenshot_error = s.to_string();
    }
    if (last && !opt.layout.empty()) {
      const flashscope::Status s = fs::write_text_file(
          opt.layout, layout_json(layout, dashboard, fonts, fb_w, fb_h, frames, snap, conversation, sources, lab_snap));
      if (!s.ok()) screenshot_error = s.to_string();
    }
    glfwSwapBuffers(window);

    const bool engine_busy =
        snap.state == fs::EngineState::kPrefilling || snap.state == fs::EngineState::kGenerating;
    fs::record_frame(metrics, io.DeltaTime * 1000.0f, engine_busy);
    if (last) break;

    next_frame += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(kMinFrameSeconds));
    const auto now = std::chrono::steady_clock::now();
    if (next_frame > now) std::this_thread::sleep_until(next_frame);
    else next_frame = now;
  }

  int rc = 0;
  if (opt.headless()) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("flashscope: %d frames in %.1f s at %dx%d, scale %.2f, font %s, OpenGL %s on %s\n", frames, seconds,
                win_w, win_h, scale, fonts.dejavu ? "DejaVu Sans" : "ImGui default", gl_version ? gl_version : "?",
                gl_renderer ? gl_renderer : "?");
    if (snap.state == fs::EngineState::kFailed) {
      std::printf("flashscope: model: %s\n", snap.load_error.c_str());
    } else {
      std::printf("flashscope: model: %s (%s)\n", snap.model_name.c_str(), fs::engine_state_name(snap.state));
    }
    if (opt.has_prompt) {
      const fs::Message* answer = conversation.messages.empty() ? nullptr : &conversation.messages.back();
      if (answer && answer->role == "assistant" && answer->stats.valid) {
        const fs::AnswerStats& s = answer->stats;
        std::printf("flashscope: answer: %d tokens, %.1f tok/s decode, prefill %d tokens in %.0f ms, stop %s\n",
                    s.generated_tokens, s.decode_tokens_per_s, s.prompt_tokens, s.prefill_ms, s.stop_reason.c_str());
        std::printf("flashscope: answer text: %s\n", answer->content.c_str());
      } else if (answer && !answer->error.empty()) {
        std::printf("flashscope: answer failed: %s\n", answer->error.c_str());
      } else {
        std::printf("flashscope: answer: not finished after %d frames\n", frames);
      }
      if (metrics.busy_frames > 0) {
        std::printf("flashscope: UI while the engine worked: %d frames, mean %.1f ms (%.0f fps), worst %.1f ms\n",
                    metrics.busy_frames, metrics.busy_frame_ms_sum / metrics.busy_frames,
                    1000.0 * metrics.busy_frames / metrics.busy_frame_ms_sum, metrics.busy_frame_ms_max);
      }
    }
    if (const fs::TraceSlot* shown = fs::shown_slot(sources)) {
      std::printf("flashscope: trace shown: %s (%s, kernel %s)\n", shown->provenance.c_str(),
                  shown->trace->meta.device_name.c_str(), shown->trace->meta.kernel.c_str());
    }
    if (opt.run_lab) {
      std::printf("flashscope: kernel lab: %llu runs of %s, last %.2f ms%s\n",
                  static_cast<unsigned long long>(lab_snap.runs), lab_snap.kernel.c_str(), lab_snap.last_ms,
                  lab_snap.error.empty() ? "" : (", error: " + lab_snap.error).c_str());
    }
    if (!live.capture_error.empty()) std::printf("flashscope: trace capture failed: %s\n", live.capture_error.c_str());
    if (replay_failed) rc = 1;
    if (!opt.screenshot.empty()) {
      if (screenshot_error.empty()) {
        std::printf("flashscope: wrote %s\n", opt.screenshot.c_str());
      } else {
        std::fprintf(stderr, "flashscope: %s\n", screenshot_error.c_str());
        rc = 1;
      }
    }
  }

  dashboard.pictures.release_all();  // their textures, while the context is current
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return rc;
}
