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

// The command line, and the dashboard's starting tab and attention head.
// Returns -1 to go on, else the exit code (0 after --help, 2 for bad options).
int read_options(int argc, char** argv, fs::AppOptions* opt, fs::DashboardState* dashboard) {
  std::string error;
  if (!fs::parse_app_options(argc, argv, opt, &error)) {
    std::fprintf(stderr, "flashscope: %s\n%s", error.c_str(), fs::kAppUsage);
    return 2;
  }
  if (opt->help) {
    std::fputs(fs::kAppUsage, stdout);
    return 0;
  }
  if (!opt->tab.empty() && !fs::parse_dashboard_tab(opt->tab, &dashboard->active)) {
    std::fprintf(stderr, "flashscope: --tab: no tab named '%s' (attention, softmax, pipeline, throughput, lab)\n",
                 opt->tab.c_str());
    return 2;
  }
  dashboard->chat_layer = opt->attention_layer;
  dashboard->chat_head = opt->attention_head;
  return -1;
}

// The model the engine loads first and how: --model, else the default model.
fs::EngineWorker::Options engine_options(const fs::AppOptions& opt) {
  fs::EngineWorker::Options wo;
  wo.model_path = opt.model_path.empty() ? flashscope::find_default_model() : opt.model_path;
  if (wo.model_path.empty()) wo.model_path = std::string("assets/models/") + flashscope::kDefaultModelFile;
  wo.threads = opt.threads;
  wo.weights = opt.weights;
  wo.context = opt.context;
  wo.chat_template_path = opt.chat_template;
  return wo;
}

// The sampler settings the command line gives the conversation.
void apply_sampling_options(const fs::AppOptions& opt, fs::Conversation* conversation) {
  if (opt.max_tokens > 0) conversation->settings.max_tokens = opt.max_tokens;
  if (opt.has_seed) {
    conversation->settings.seed = opt.seed;
    conversation->settings.random_seed = false;
  }
  if (opt.greedy) conversation->settings.temperature = 0.0f;
  if (opt.dry_multiplier >= 0.0f) conversation->settings.dry_multiplier = opt.dry_multiplier;
}

// The command line's scripted input, each part sent once.
struct Script {
  bool keys_sent = false, keys_failed = false;
  bool prompt_sent = false, switch_sent = false;
};

// --keys, queued once the engine is idle; false when the script cannot be
// read (*error says why).
bool send_key_script(const fs::AppOptions& opt, const fs::EngineSnapshot& snap, fs::AppWindow& window, Script* s,
                     std::string* error) {
  if (opt.keys.empty() || s->keys_sent || snap.state != fs::EngineState::kIdle) return true;
  if (!fs::queue_key_script(window, opt.keys, error)) {
    s->keys_failed = true;
    return false;
  }
  s->keys_sent = true;
  return true;
}

// --prompt and --switch-to, each sent once the first model has loaded.
void send_scripted_turns(const fs::AppOptions& opt, const fs::EngineSnapshot& snap, fs::ChatPanelState& chat,
                         fs::Conversation& conversation, fs::EngineWorker& worker, Script* s) {
  if (opt.has_prompt && !s->prompt_sent && snap.state != fs::EngineState::kLoading) {
    fs::send_user_message(chat, conversation, worker, opt.prompt);  // a blank prompt sends nothing
    s->prompt_sent = true;
  }
  if (!opt.switch_to.empty() && !s->switch_sent && snap.state != fs::EngineState::kLoading) {
    fs::pick_model(chat, worker, opt.switch_to);  // a bad file: the picker shows why
    s->switch_sent = true;
  }
}

// ImGui's draw data over the window's background colour; *fb_w, *fb_h: the
// framebuffer's size.
void render_frame(const fs::AppWindow& window, int* fb_w, int* fb_h) {
  glfwGetFramebufferSize(window.glfw, fb_w, fb_h);
  glViewport(0, 0, *fb_w, *fb_h);
  const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  glClearColor(bg.x, bg.y, bg.z, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

// Sleeps until *next_frame, kMinFrameSeconds after the last one; keys still
// queued draw the next frame at once, so a burst is not held back at the cap.
void pace_frame(const fs::AppWindow& window, std::chrono::steady_clock::time_point* next_frame) {
  *next_frame += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(kMinFrameSeconds));
  const auto now = std::chrono::steady_clock::now();
  if (*next_frame > now && !fs::input_pending(window)) std::this_thread::sleep_until(*next_frame);
  else *next_frame = now;
}

}  // namespace

int main(int argc, char** argv) {
  fs::prefer_sleeping_openmp_threads(argv);
  fs::AppOptions opt;
  fs::DashboardState dashboard;
  if (const int rc = read_options(argc, argv, &opt, &dashboard); rc >= 0) return rc;

  fs::share_cores_with_software_gl();
  fs::AppWindow window;
  std::string error;
  if (!fs::open_window(opt, &window, &error)) {
    std::fprintf(stderr, "flashscope: %s\n", error.c_str());
    return 1;
  }
  ImGuiIO& io = ImGui::GetIO();

  fs::EngineWorker worker;
  worker.start(engine_options(opt));

  // Everything the panels draw from; the loop owns it.
  const fs::DeviceSummary device = fs::query_device_summary();
  fs::Conversation conversation;
  apply_sampling_options(opt, &conversation);
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
  Script script;
  bool quit = false;
  int frames = 0;
  int fb_w = 0, fb_h = 0;
  auto headless_frame = [&] {
    return fs::HeadlessFrame{frames, fb_w, fb_h, script.prompt_sent, chat.pending_id != 0, live_capture.busy(),
                             script.switch_sent, quit, layout, dashboard, window.fonts, snap, conversation, sources,
                             lab_snap, chat};
  };
  auto next_frame = std::chrono::steady_clock::now();

  while (!glfwWindowShouldClose(window.glfw)) {
    glfwPollEvents();
    fs::follow_monitor_scale(window);

    worker.snapshot(&snap);
    if (!send_key_script(opt, snap, window, &script, &error)) {
      std::fprintf(stderr, "flashscope: %s\n", error.c_str());
      break;
    }
    fs::feed_input(window, fs::keyboard_waits_for_input(chat));
    fs::sync_chat_with_engine(chat, conversation, snap, metrics);
    fs::update_live_traces(live, sources, live_capture, lab, lab_snap, dashboard, snap, metrics);
    worker.set_attention_target(dashboard.chat_layer, dashboard.chat_head);
    send_scripted_turns(opt, snap, chat, conversation, worker, &script);

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
    render_frame(window, &fb_w, &fb_h);
    ++frames;
    const bool last = opt.headless() && headless.last_frame(headless_frame());  // before the swap: it reads the frame
    glfwSwapBuffers(window.glfw);

    const bool engine_busy =
        snap.state == fs::EngineState::kPrefilling || snap.state == fs::EngineState::kGenerating;
    fs::record_frame(metrics, io.DeltaTime * 1000.0f, engine_busy);
    if (last) break;
    pace_frame(window, &next_frame);
  }

  int rc = opt.headless() ? headless.report(headless_frame(), window, metrics, live.capture_error, replay_failed) : 0;
  if (script.keys_failed) rc = 2;
  dashboard.pictures.release_all();  // their textures, while the context is current
  fs::close_window(window);
  return rc;
}
