#include "platform/window.hpp"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_internal.h>
#include <imgui_impl_opengl3.h>

#include <algorithm>
#include <cstdio>

namespace flashscope::app {

namespace {

void glfw_error(int code, const char* message) {
  std::fprintf(stderr, "flashscope: GLFW error %d: %s\n", code, message);
}

// GLFW's key and character callbacks: into the window's queue, for feed_input.
void queue_key(GLFWwindow* glfw, int key, int scancode, int action, int mods) {
  if (action == GLFW_REPEAT) return;  // Dear ImGui makes its own repeats from how long a key is down
  InputEvent e;
  e.key = key;
  e.scancode = scancode;
  e.mods = mods;
  e.press = action == GLFW_PRESS;
  // GLFW numbers the keys that type text below 256; the modifiers type none
  // but change what the next key types, so they do not hold characters back.
  e.control_key = key >= 256 && !(key >= GLFW_KEY_LEFT_SHIFT && key <= GLFW_KEY_RIGHT_SUPER);
  static_cast<AppWindow*>(glfwGetWindowUserPointer(glfw))->input.push(e);
}

void queue_char(GLFWwindow* glfw, unsigned int codepoint) {
  InputEvent e;
  e.kind = InputEvent::Kind::kChar;
  e.codepoint = codepoint;
  static_cast<AppWindow*>(glfwGetWindowUserPointer(glfw))->input.push(e);
}

// A text field is taking the keyboard: SetKeyboardFocusHere (a dialog's
// path field as it opens) is a request Dear ImGui 1.86 resolves at the next
// frame, and the field it activates then ignores the characters of its
// activation frame. Keys wait for both frames, else the first letters typed
// are lost. (Internal state: 1.87+ queues input itself, and this file would
// change with it.)
bool focus_pending() {
  const ImGuiContext& g = *ImGui::GetCurrentContext();
  return g.NavMoveSubmitted || g.NavMoveScoringItems || g.NavActivateInputId != 0 || g.ActiveIdIsJustActivated;
}

}  // namespace

bool open_window(const AppOptions& opt, AppWindow* w, std::string* error) {
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    *error = "cannot open a window (no display?). Without one, run it under xvfb-run -a.";
    return false;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  w->follow_monitor = opt.scale <= 0.0f;
  float scale = opt.scale;
  if (w->follow_monitor) {
    float sx = 1.0f, sy = 1.0f;
    if (GLFWmonitor* monitor = glfwGetPrimaryMonitor()) glfwGetMonitorContentScale(monitor, &sx, &sy);
    scale = std::max(1.0f, sx);
  }
  // The layout's size at the scale in use: --scale 1.5 grows the window by
  // half, so the heatmaps and labels keep the room they have at scale 1.
  w->width = static_cast<int>(opt.width * scale + 0.5f);
  w->height = static_cast<int>(opt.height * scale + 0.5f);
  if (!opt.headless()) {
    // Interactive: inside the monitor's work area.
    if (GLFWmonitor* monitor = glfwGetPrimaryMonitor()) {
      int mx = 0, my = 0, mw = 0, mh = 0;
      glfwGetMonitorWorkarea(monitor, &mx, &my, &mw, &mh);
      if (mw > 0 && mh > 0) {
        w->width = std::min(w->width, mw * 95 / 100);
        w->height = std::min(w->height, mh * 95 / 100);
      }
    }
  }
  w->glfw = glfwCreateWindow(w->width, w->height, "FlashScope", nullptr, nullptr);
  if (!w->glfw) {
    *error = "cannot create an OpenGL 3.0 window";
    glfwTerminate();
    return false;
  }
  glfwMakeContextCurrent(w->glfw);
  glfwSwapInterval(1);
  const char* renderer = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
  const char* version = reinterpret_cast<const char*>(glGetString(GL_VERSION));
  w->gl_renderer = renderer ? renderer : "?";
  w->gl_version = version ? version : "?";
  if (w->follow_monitor) {
    float sx = 1.0f, sy = 1.0f;
    glfwGetWindowContentScale(w->glfw, &sx, &sy);
    scale = std::max(1.0f, sx);
  }
  w->scale = scale;
  w->content_scale = scale;
  glfwSetWindowUserPointer(w->glfw, w);
  glfwSetWindowContentScaleCallback(w->glfw, [](GLFWwindow* glfw, float sx, float) {
    auto* self = static_cast<AppWindow*>(glfwGetWindowUserPointer(glfw));
    self->content_scale = std::max(1.0f, sx);
    self->scale_changed = true;
  });

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the layout is computed every frame; nothing to restore
  ImGui_ImplGlfw_InitForOpenGL(w->glfw, true);
  // The backend's own key and character callbacks would write the key state
  // at once; ours queue the events (feed_input calls the backend's later).
  glfwSetKeyCallback(w->glfw, queue_key);
  glfwSetCharCallback(w->glfw, queue_char);
  ImGui_ImplOpenGL3_Init("#version 130");
  w->fonts = load_fonts(scale);
  apply_style(scale);
  return true;
}

void feed_input(AppWindow& w, bool focus_requested) {
  // At most a few frames in a row, so no state of Dear ImGui's can hold keys forever.
  if (!w.input.empty() && (focus_requested || focus_pending()) && w.input_held_frames < 10) {
    ++w.input_held_frames;
    return;
  }
  w.input_held_frames = 0;
  for (const InputEvent& e : w.input.take_frame()) {
    if (e.kind == InputEvent::Kind::kChar) {
      ImGui_ImplGlfw_CharCallback(w.glfw, e.codepoint);
    } else {
      ImGui_ImplGlfw_KeyCallback(w.glfw, e.key, e.scancode, e.press ? GLFW_PRESS : GLFW_RELEASE, e.mods);
    }
  }
}

bool queue_key_script(AppWindow& w, const std::string& script, std::string* error) {
  auto tap = [&](int key, unsigned codepoint, int mods) {
    queue_key(w.glfw, key, 0, GLFW_PRESS, mods);
    if (codepoint != 0) queue_char(w.glfw, codepoint);
    queue_key(w.glfw, key, 0, GLFW_RELEASE, mods);
  };
  for (std::size_t i = 0; i < script.size(); ++i) {
    const char c = script[i];
    if (c != '<') {
      // Letters' keys are their capitals; other characters are typed through the key of a space.
      const char up = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
      const bool letter_or_digit = (up >= 'A' && up <= 'Z') || (up >= '0' && up <= '9');
      tap(letter_or_digit ? up : GLFW_KEY_SPACE, static_cast<unsigned char>(c), 0);
      continue;
    }
    const std::size_t end = script.find('>', i);
    const std::string name = end == std::string::npos ? script.substr(i) : script.substr(i + 1, end - i - 1);
    if (name == "Enter") tap(GLFW_KEY_ENTER, 0, 0);
    else if (name == "Esc") tap(GLFW_KEY_ESCAPE, 0, 0);
    else if (name == "Tab") tap(GLFW_KEY_TAB, 0, 0);
    else if (name == "Backspace") tap(GLFW_KEY_BACKSPACE, 0, 0);
    else if (name.size() == 6 && name.compare(0, 5, "Ctrl+") == 0 && name[5] >= 'A' && name[5] <= 'Z') {
      queue_key(w.glfw, GLFW_KEY_LEFT_CONTROL, 0, GLFW_PRESS, 0);
      tap(name[5], 0, GLFW_MOD_CONTROL);
      queue_key(w.glfw, GLFW_KEY_LEFT_CONTROL, 0, GLFW_RELEASE, 0);
    } else {
      *error = "--keys: no key named <" + name + "> (<Enter>, <Esc>, <Tab>, <Backspace>, <Ctrl+A>..<Ctrl+Z>)";
      return false;
    }
    i = end == std::string::npos ? script.size() : end;
  }
  return true;
}

void follow_monitor_scale(AppWindow& w) {
  if (!w.scale_changed || !w.follow_monitor) return;
  w.scale_changed = false;
  w.scale = w.content_scale;
  w.fonts = load_fonts(w.scale);
  apply_style(w.scale);
  ImGui_ImplOpenGL3_DestroyFontsTexture();
  ImGui_ImplOpenGL3_CreateFontsTexture();
}

void close_window(AppWindow& w) {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(w.glfw);
  glfwTerminate();
  w.glfw = nullptr;
}

}  // namespace flashscope::app
