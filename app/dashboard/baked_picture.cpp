#include "dashboard/baked_picture.hpp"

#include <GLFW/glfw3.h>  // glfwGetProcAddress; GL/gl.h and its glext.h types
#include <imgui_impl_opengl3.h>

#include <cstdint>

namespace flashscope::app {

// Framebuffer objects are OpenGL 3.0 (the context platform/window.cpp asks for); the
// system headers declare only GL 1.x functions, so these come through GLFW.
struct FramebufferApi {
  PFNGLGENFRAMEBUFFERSPROC gen = nullptr;
  PFNGLDELETEFRAMEBUFFERSPROC del = nullptr;
  PFNGLBINDFRAMEBUFFERPROC bind = nullptr;
  PFNGLFRAMEBUFFERTEXTURE2DPROC attach = nullptr;
  PFNGLCHECKFRAMEBUFFERSTATUSPROC status = nullptr;

  bool load() {
    gen = reinterpret_cast<PFNGLGENFRAMEBUFFERSPROC>(glfwGetProcAddress("glGenFramebuffers"));
    del = reinterpret_cast<PFNGLDELETEFRAMEBUFFERSPROC>(glfwGetProcAddress("glDeleteFramebuffers"));
    bind = reinterpret_cast<PFNGLBINDFRAMEBUFFERPROC>(glfwGetProcAddress("glBindFramebuffer"));
    attach = reinterpret_cast<PFNGLFRAMEBUFFERTEXTURE2DPROC>(glfwGetProcAddress("glFramebufferTexture2D"));
    status = reinterpret_cast<PFNGLCHECKFRAMEBUFFERSTATUSPROC>(glfwGetProcAddress("glCheckFramebufferStatus"));
    return gen && del && bind && attach && status;
  }
};

namespace {

// A picture's drawing as the bytes that decide its pixels. ImDrawCmd's
// padding is zeroed by its constructor, so commands compare as bytes too.
DrawingPart vertices(const ImDrawList& l) {
  return {l.VtxBuffer.Data, static_cast<size_t>(l.VtxBuffer.Size) * sizeof(ImDrawVert)};
}
DrawingPart indices(const ImDrawList& l) {
  return {l.IdxBuffer.Data, static_cast<size_t>(l.IdxBuffer.Size) * sizeof(ImDrawIdx)};
}
DrawingPart commands(const ImDrawList& l) {
  return {l.CmdBuffer.Data, static_cast<size_t>(l.CmdBuffer.Size) * sizeof(ImDrawCmd)};
}

}  // namespace

BakedPicture::~BakedPicture() { release(); }

void BakedPicture::release() {
  if (api_ != nullptr && framebuffer_ != 0) api_->del(1, &framebuffer_);
  if (texture_ != 0) glDeleteTextures(1, &texture_);
  framebuffer_ = texture_ = 0;
  texture_w_ = texture_h_ = 0;
  memo_.forget();
}

ImDrawList* BakedPicture::begin(ImVec2 min, ImVec2 max) {
  last_frame_ = ImGui::GetFrameCount();
  drawing_ = false;
  if (api_ == nullptr || unsupported_) return ImGui::GetWindowDrawList();
  fb_scale_ = ImGui::GetIO().DisplayFramebufferScale;
  px_ = covering_pixels(min.x, min.y, max.x, max.y, fb_scale_.x, fb_scale_.y);
  if (px_.w <= 0 || px_.h <= 0 || !ensure_target(px_)) return ImGui::GetWindowDrawList();
  if (!list_) list_ = std::make_unique<ImDrawList>(ImGui::GetDrawListSharedData());
  // As ImGui::Begin() prepares a window's list: the font atlas bound, clipped to the picture.
  list_->_ResetForNewFrame();
  list_->PushTextureID(ImGui::GetIO().Fonts->TexID);
  list_->PushClipRect(ImVec2(px_.x / fb_scale_.x, px_.y / fb_scale_.y),
                      ImVec2((px_.x + px_.w) / fb_scale_.x, (px_.y + px_.h) / fb_scale_.y));
  drawing_ = true;
  return list_.get();
}

void BakedPicture::end() {
  if (!drawing_) return;  // drawn directly into the window's list
  drawing_ = false;
  ImDrawList& l = *list_;
  l._PopUnusedDrawCmd();
  if (l.VtxBuffer.Size == 0) return;
  if (px_ != baked_px_ || !memo_.matches({vertices(l), indices(l), commands(l)})) {
    render(px_);
    memo_.remember({vertices(l), indices(l), commands(l)});
    baked_px_ = px_;
    ++renders_;
  } else {
    ++shows_;
  }
  // GL's first texture row is the picture's bottom one: v runs from 1 at the top to 0.
  const ImVec2 a(px_.x / fb_scale_.x, px_.y / fb_scale_.y);
  const ImVec2 b((px_.x + px_.w) / fb_scale_.x, (px_.y + px_.h) / fb_scale_.y);
  ImGui::GetWindowDrawList()->AddImage(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(texture_)), a, b,
                                       ImVec2(0.0f, 1.0f), ImVec2(1.0f, 0.0f));
}

bool BakedPicture::ensure_target(const PixelRect& px) {
  if (texture_ != 0 && texture_w_ == px.w && texture_h_ == px.h) return true;
  GLint max_size = 0;
  glGetIntegerv(GL_MAX_TEXTURE_SIZE, &max_size);
  if (px.w > max_size || px.h > max_size) return false;
  GLint last_texture = 0, last_framebuffer = 0;
  glGetIntegerv(GL_TEXTURE_BINDING_2D, &last_texture);
  glGetIntegerv(GL_FRAMEBUFFER_BINDING, &last_framebuffer);
  if (texture_ == 0) glGenTextures(1, &texture_);
  glBindTexture(GL_TEXTURE_2D, texture_);
  // Nearest: the quad is drawn pixel for pixel over the framebuffer's grid, so each pixel reads its own texel.
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, px.w, px.h, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
  if (framebuffer_ == 0) api_->gen(1, &framebuffer_);
  api_->bind(GL_FRAMEBUFFER, framebuffer_);
  api_->attach(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, texture_, 0);
  const bool complete = api_->status(GL_FRAMEBUFFER) == GL_FRAMEBUFFER_COMPLETE;
  api_->bind(GL_FRAMEBUFFER, static_cast<GLuint>(last_framebuffer));
  glBindTexture(GL_TEXTURE_2D, static_cast<GLuint>(last_texture));
  memo_.forget();
  if (!complete) {
    release();
    unsupported_ = true;  // this driver cannot render into such a texture: draw directly from now on
    return false;
  }
  texture_w_ = px.w;
  texture_h_ = px.h;
  return true;
}

void BakedPicture::render(const PixelRect& px) {
  GLint last_framebuffer = 0;
  glGetIntegerv(GL_FRAMEBUFFER_BINDING, &last_framebuffer);
  GLfloat last_clear[4];
  glGetFloatv(GL_COLOR_CLEAR_VALUE, last_clear);
  const GLboolean last_scissor = glIsEnabled(GL_SCISSOR_TEST);
  api_->bind(GL_FRAMEBUFFER, framebuffer_);
  // The window's background, as main.cpp clears it: the texture then holds
  // exactly the pixels direct drawing would have left there.
  const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  glDisable(GL_SCISSOR_TEST);
  glClearColor(bg.x, bg.y, bg.z, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  glClearColor(last_clear[0], last_clear[1], last_clear[2], last_clear[3]);
  if (last_scissor) glEnable(GL_SCISSOR_TEST);

  ImDrawList* lists[] = {list_.get()};
  ImDrawData data;
  data.Valid = true;
  data.CmdLists = lists;
  data.CmdListsCount = 1;
  data.TotalVtxCount = list_->VtxBuffer.Size;
  data.TotalIdxCount = list_->IdxBuffer.Size;
  data.DisplayPos = ImVec2(px.x / fb_scale_.x, px.y / fb_scale_.y);
  data.DisplaySize = ImVec2(px.w / fb_scale_.x, px.h / fb_scale_.y);
  data.FramebufferScale = fb_scale_;
  ImGui_ImplOpenGL3_RenderDrawData(&data);  // saves and restores the GL state it sets, viewport included
  api_->bind(GL_FRAMEBUFFER, static_cast<GLuint>(last_framebuffer));
}

PictureStore::PictureStore() = default;
PictureStore::~PictureStore() = default;

BakedPicture& PictureStore::get(const std::string& name) {
  if (!api_loaded_) {
    api_loaded_ = true;
    api_ = std::make_unique<FramebufferApi>();
    if (!api_->load()) api_.reset();
  }
  BakedPicture& p = pictures_[name];
  p.api_ = api_.get();
  return p;
}

void PictureStore::collect(int frame) {
  // About two seconds at the frame cap: long enough that flicking between
  // tabs does not re-render, short enough that hidden tabs hold no textures.
  constexpr int kIdleFrames = 150;
  for (auto& [name, p] : pictures_) {
    if (p.texture_ != 0 && frame - p.last_frame_ > kIdleFrames) p.release();
  }
}

void PictureStore::release_all() {
  for (auto& [name, p] : pictures_) p.release();
}

}  // namespace flashscope::app
