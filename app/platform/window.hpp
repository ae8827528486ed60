// The app's one window: GLFW with an OpenGL 3.0 context, Dear ImGui on its
// GLFW and OpenGL 3 backends, the fonts and style at the window's scale.
// main() opens it, runs Dear ImGui's loop on it and closes it.
#pragma once

#include <string>

#include "platform/input_queue.hpp"
#include "platform/options.hpp"
#include "platform/ui_theme.hpp"

struct GLFWwindow;

namespace flashscope::app {

struct AppWindow {
  GLFWwindow* glfw = nullptr;
  int width = 0, height = 0;  // as created, in screen coordinates
  float scale = 1.0f;         // the UI scale in use
  bool follow_monitor = true; // no --scale: the scale follows the monitor the window is on
  UiFonts fonts;
  std::string gl_renderer, gl_version;
  // Set by GLFW's content-scale callback; follow_monitor_scale() applies it between frames.
  float content_scale = 1.0f;
  bool scale_changed = false;
  // Key and character events from GLFW's callbacks, handed to Dear ImGui a
  // frame's worth at a time by feed_input() (platform/input_queue.hpp says why).
  InputQueue input;
  int input_held_frames = 0;  // frames feed_input held the queue while a field took the keyboard
};

// Opens the window for `opt` (interactive: the default size at the monitor's
// scale inside its work area; headless: --size as given) and sets up Dear
// ImGui on it. False with *error when there is no display or no OpenGL 3.0.
// `window` must stay where it is while open (GLFW's callbacks point at it).
bool open_window(const AppOptions& opt, AppWindow* window, std::string* error);

// Hands Dear ImGui the next frame's key and character events; call after
// glfwPollEvents, before the new frame. They wait (a few frames at most)
// while a text field is taking the keyboard: `focus_requested` while the
// app's own request is under way (the chat box: keyboard_waits_for_input),
// or while Dear ImGui resolves one.
// While events wait, the loop should draw the next frame at once (input_pending).
void feed_input(AppWindow& window, bool focus_requested = false);
inline bool input_pending(const AppWindow& window) { return !window.input.empty(); }

// Headless tests: queues SCRIPT's events through the window's own key and
// character callbacks, all at once, as if one poll had delivered them (the
// fastest typist). Plain characters are typed (key press, character,
// release); <Enter>, <Esc>, <Tab>, <Backspace> tap that key; <Ctrl+X> taps X
// with Ctrl held. False with *error on a name it does not know.
bool queue_key_script(AppWindow& window, const std::string& script, std::string* error);

// Moved to a monitor with another scale: re-rasterizes the fonts and
// rescales the style. Call between frames.
void follow_monitor_scale(AppWindow& window);

// Shuts Dear ImGui's backends down and closes the window (GL objects the
// app made must be released before, while the context is current).
void close_window(AppWindow& window);

}  // namespace flashscope::app
