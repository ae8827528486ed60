// Headless runs, for tests and screenshots (--frames N, --screenshot PNG,
// --layout JSON; under xvfb-run where there is no display): when the loop
// stops, what the last frame writes, and the report printed at exit.
#pragma once

#include <chrono>
#include <string>

#include "chat/chat_actions.hpp"
#include "chat/conversation.hpp"
#include "chat/engine_worker.hpp"
#include "dashboard/dashboard.hpp"
#include "dashboard/metrics.hpp"
#include "lab/kernel_lab.hpp"
#include "main_window.hpp"
#include "platform/options.hpp"
#include "platform/window.hpp"
#include "traces/trace_sources.hpp"

namespace flashscope::app {

// The app after a frame, as the loop holds it.
struct HeadlessFrame {
  int frames = 0;  // rendered so far, this one included
  int fb_width = 0, fb_height = 0;
  bool prompt_sent = false;
  bool answer_pending = false;  // the chat waits for the engine's answer
  bool capture_busy = false;    // the chat's trace capture is running
  bool switch_sent = false;     // --switch-to was handed to the model picker
  bool quit = false;            // File → Quit or Ctrl+Q in this frame
  const FrameLayout& layout;
  const DashboardState& dashboard;
  const UiFonts& fonts;
  const EngineSnapshot& snap;
  const Conversation& conversation;
  const TraceSources& sources;
  const LabSnapshot& lab;
  const ChatPanelState& chat;
};

class HeadlessRun {
 public:
  explicit HeadlessRun(const AppOptions& opt) : opt_(opt), started_(std::chrono::steady_clock::now()) {}

  // After a frame is rendered, before the swap: whether it is the last —
  // after N frames; with --prompt once the answer and the trace captured
  // after it are on screen; with --switch-to once the switch succeeded or
  // failed; with --run-lab once the lab has timed a few runs and its trace
  // is shown; when the user quit. The last frame is written to --screenshot and
  // --layout.
  bool last_frame(const HeadlessFrame& f);

  // Prints what the run did (frames, OpenGL, the model, the answer with its
  // tokens/s, the UI's frame times while the engine worked, the trace shown,
  // the lab's runs); the exit code: 1 when --replay failed or a file could
  // not be written.
  int report(const HeadlessFrame& f, const AppWindow& window, const Metrics& metrics,
             const std::string& capture_error, bool replay_failed) const;

 private:
  const AppOptions& opt_;
  std::chrono::steady_clock::time_point started_;
  int frames_after_answer_ = 0;
  int frames_after_switch_ = 0;
  int frames_while_switching_ = 0;  // drawn while the engine loaded the next model
  std::string write_error_;
};

// The --layout report: where the panels and the dashboard's widgets were
// drawn, each baked picture's renders and shows, the trace shown and its
// source, a replay error, the lab's runs.
std::string layout_json(const HeadlessFrame& f);

}  // namespace flashscope::app
