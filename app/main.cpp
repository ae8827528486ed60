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
// Headless (tests, screenshots: --frames, --screenshot; headless.hpp) the
// same loop runs until HeadlessRun says the last frame is drawn.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <cfloat>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "chat/chat_actions.hpp"
#include "chat/chat_panel.hpp"
#include "chat/conversation.hpp"
#include "chat/engine_worker.hpp"
#include "dashboard/dashboard.hpp"
#include "dashboard/metrics.hpp"
#include "flashscope/model.hpp"
#include "headless.hpp"
#include "lab/kernel_lab.hpp"
#include "main_window.hpp"
#include "platform/core_sharing.hpp"
#include "platform/options.hpp"
#include "platform/window.hpp"
#include "traces/live_capture.hpp"
#include "traces/live_traces.hpp"
#include "traces/trace_sources.hpp"

namespace fs = flashscope::app;

namespace {

// Frames faster than this sleep the rest: with vsync off (Xvfb, some
// drivers) an ImGui loop would otherwise spin a core the engine could use.
constexpr double kMinFrameSeconds = 1.0 / 75.0;

}  // namespace

int main(int argc, char** argv) {
  fs::prefer_sleeping_openmp_threads(argv);
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

  dashboard.chat_layer = opt.attention_layer;
  dashboard.chat_head = opt.attention_head;

  fs::share_cores_with_software_gl();
  fs::AppWindow window;
  if (!fs::open_window(opt, &window, &error)) {
    std::fprintf(stderr, "flashscope: %s\n", error.c_str());
    return 1;
  }
  ImGuiIO& io = ImGui::GetIO();

  fs::EngineWorker worker;
  fs::EngineWorker::Options wo;
  wo.model_path = opt.model_path.empty() ? flashscope::find_default_model() : opt.model_path;
  if (wo.model_path.empty()) wo.model_path = std::string("assets/models/") + flashscope::kDefaultModelFile;
  wo.threads = opt.threads;
  wo.weights = opt.weights;
  wo.context = opt.context;
  wo.chat_template_path = opt.chat_template;
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
  if (opt.dry_multiplier >= 0.0f) conversation.settings.dry_multiplier = opt.dry_multiplier;
  fs::ChatPanelState chat;
  chat.focus_input = !opt.headless() || !opt.keys.empty();
  chat.picker.open = opt.open_models;
  fs::Metrics metrics;
  fs::EngineSnapshot snap;
  fs::FrameLayout layout;
  fs::TraceSources sources;
  fs::LiveCapture live_capture;
  fs::KernelLab lab;
  fs::LabSnapshot lab_snap;
  fs::LiveState live;

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

  if (!opt.conversation.empty()) {
    chat.file_path = opt.conversation;  // Save writes back to it
    const flashscope::Status s = fs::load_conversation_into(chat, conversation, worker, opt.conversation);
    if (!s.ok()) std::fprintf(stderr, "flashscope: --conversation: %s\n", s.to_string().c_str());
  }

  fs::HeadlessRun headless(opt);
  bool prompt_sent = false;
  bool switch_sent = false;
  bool keys_sent = false, keys_failed = false;
  bool quit = false;
  int frames = 0;
  int fb_w = 0, fb_h = 0;
  auto headless_frame = [&] {
    return fs::HeadlessFrame{frames, fb_w, fb_h, prompt_sent, chat.pending_id != 0, live_capture.busy(), switch_sent,
                             quit, layout, dashboard, window.fonts, snap, conversation, sources, lab_snap, chat};
  };
  auto next_frame = std::chrono::steady_clock::now();

  while (!glfwWindowShouldClose(window.glfw)) {
    glfwPollEvents();
    fs::follow_monitor_scale(window);

    worker.snapshot(&snap);
    if (!opt.keys.empty() && !keys_sent && snap.state == fs::EngineState::kIdle) {
      if (!fs::queue_key_script(window, opt.keys, &error)) {
        std::fprintf(stderr, "flashscope: %s\n", error.c_str());
        keys_failed = true;
        break;
      }
      keys_sent = true;
    }
    fs::feed_input(window, fs::keyboard_waits_for_input(chat));
    fs::sync_chat_with_engine(chat, conversation, snap, metrics);
    fs::update_live_traces(live, sources, live_capture, lab, lab_snap, dashboard, snap, metrics);
    worker.set_attention_target(dashboard.chat_layer, dashboard.chat_head);
    if (opt.has_prompt && !prompt_sent && snap.state != fs::EngineState::kLoading) {
      fs::send_user_message(chat, conversation, worker, opt.prompt);  // a blank prompt sends nothing
      prompt_sent = true;
    }
    if (!opt.switch_to.empty() && !switch_sent && snap.state != fs::EngineState::kLoading) {
      fs::pick_model(chat, worker, opt.switch_to);  // a bad file: the picker shows why
      switch_sent = true;
    }

    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    // Headless: no pointer, so a cursor parked over a plot draws no tooltip; --mouse puts one.
    if (opt.headless()) io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
    if (opt.has_mouse) io.MousePos = ImVec2(opt.mouse_x, opt.mouse_y);
    ImGui::NewFrame();
    fs::DashboardContext ctx{device, snap, metrics, window.fonts, sources, live_capture.busy(), lab, lab_snap};
    fs::draw_main_window(layout, chat, conversation, worker, dashboard, ctx, window.scale, &quit);
    if (quit) glfwSetWindowShouldClose(window.glfw, GLFW_TRUE);
    ImGui::Render();

    glfwGetFramebufferSize(window.glfw, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
    glClearColor(bg.x, bg.y, bg.z, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    ++frames;
    const bool last = opt.headless() && headless.last_frame(headless_frame());  // before the swap: it reads the frame
    glfwSwapBuffers(window.glfw);

    const bool engine_busy =
        snap.state == fs::EngineState::kPrefilling || snap.state == fs::EngineState::kGenerating;
    fs::record_frame(metrics, io.DeltaTime * 1000.0f, engine_busy);
    if (last) break;

    next_frame += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(kMinFrameSeconds));
    const auto now = std::chrono::steady_clock::now();
    // Keys still queued: the next frame at once, so a burst is not held back at the frame cap.
    if (next_frame > now && !fs::input_pending(window)) std::this_thread::sleep_until(next_frame);
    else next_frame = now;
  }

  int rc = opt.headless() ? headless.report(headless_frame(), window, metrics, live.capture_error, replay_failed) : 0;
  if (keys_failed) rc = 2;
  dashboard.pictures.release_all();  // their textures, while the context is current
  fs::close_window(window);
  return rc;
}
