#include "platform/window.hpp"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <algorithm>
#include <cstdio>

namespace flashscope::app {

namespace {

void glfw_error(int code, const char* message) {
  std::fprintf(stderr, "flashscope: GLFW error %d: %s\n", code, message);
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
  w->width = opt.width;
  w->height = opt.height;
  if (!opt.headless()) {
    // Interactive: the default layout at the monitor's scale, inside its work area.
    w->width = static_cast<int>(opt.width * scale);
    w->height = static_cast<int>(opt.height * scale);
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
  ImGui_ImplOpenGL3_Init("#version 130");
  w->fonts = load_fonts(scale);
  apply_style(scale);
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
