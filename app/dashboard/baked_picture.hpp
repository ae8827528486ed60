// Pictures that do not change from frame to frame, rendered once into an
// OpenGL texture and then shown as one textured quad.
//
// Why: without a GPU the window is drawn by Mesa's llvmpipe on one core
// (platform/core_sharing.cpp leaves the others to the engine). There every ImDrawList
// primitive costs about a microsecond to set up and every pixel it covers
// ~10 ns, each frame; the trace views draw thousands of cells, spans and
// CTAs (a tile heatmap: 1024 cells and their marks, twice; the SM chart:
// every CTA over its background, the tail shaded on top), which held the
// tiles and pipeline tabs under 20 fps while the engine generated. A quad
// of the same size costs one primitive and each pixel once.
//
// Use: the view draws as before, into the list begin() returns; end()
// compares that drawing with the one the texture holds (DrawingMemo) and
// renders it into the texture only when they differ, then adds the image to
// the window's draw list. What follows the pointer (hover outlines) is
// drawn by the view after end(), into the window's list. Where
// render-to-texture is unavailable begin() returns the window's list and
// the view draws directly, as it did before.
//
// The texture is opaque: it is cleared to the window's background first, so
// a picture belongs on the window's background (the dashboard's tabs), and
// whatever a drawing puts outside its widget's rectangle is cut off.
#pragma once

#include <imgui.h>

#include <map>
#include <memory>
#include <string>

#include "dashboard/drawing_memo.hpp"

namespace flashscope::app {

struct FramebufferApi;  // the GL 3.0 entry points, in baked_picture.cpp

class BakedPicture {
 public:
  BakedPicture() = default;
  ~BakedPicture();
  BakedPicture(const BakedPicture&) = delete;
  BakedPicture& operator=(const BakedPicture&) = delete;

  // Starts this frame's drawing of the picture over [min, max) in screen
  // coordinates (the widget's rectangle); returns the list to draw into.
  ImDrawList* begin(ImVec2 min, ImVec2 max);
  // Shows what was drawn since begin(): from the texture when it holds this
  // drawing, else rendered into it first.
  void end();
  // Frees the texture (the GL context must be current); the next begin() makes a new one.
  void release();

  int renders() const { return renders_; }  // drawings rendered into the texture
  int shows() const { return shows_; }      // frames it was shown from the texture
  int last_frame() const { return last_frame_; }

 private:
  friend class PictureStore;
  bool ensure_target(const PixelRect& px);
  void render(const PixelRect& px);

  const FramebufferApi* api_ = nullptr;  // null: no framebuffer objects, draw directly
  std::unique_ptr<ImDrawList> list_;
  DrawingMemo memo_;
  PixelRect px_;        // this frame's pixels
  PixelRect baked_px_;  // the pixels the texture's drawing was rendered for
  ImVec2 fb_scale_{1.0f, 1.0f};
  unsigned int texture_ = 0, framebuffer_ = 0;
  int texture_w_ = 0, texture_h_ = 0;
  bool drawing_ = false;      // between begin() and end() on our own list
  bool unsupported_ = false;  // the framebuffer was incomplete: always draw directly
  int renders_ = 0, shows_ = 0, last_frame_ = -1;
};

// The dashboard's pictures by widget name ("tiles_mass", "pipeline_sms"…).
class PictureStore {
 public:
  PictureStore();
  ~PictureStore();
  PictureStore(const PictureStore&) = delete;
  PictureStore& operator=(const PictureStore&) = delete;

  // One widget per name: a picture holds one texture, so two widgets drawn
  // under one name would both show the second's drawing, re-rendered twice a frame.
  BakedPicture& get(const std::string& name);
  // Once a frame: frees the textures of pictures no view drew for a while
  // (their tab is hidden); they are rendered again when shown.
  void collect(int frame);
  // Frees every texture; call while the GL context is still current.
  void release_all();
  const std::map<std::string, BakedPicture>& pictures() const { return pictures_; }

 private:
  std::unique_ptr<FramebufferApi> api_;
  bool api_loaded_ = false;
  std::map<std::string, BakedPicture> pictures_;
};

}  // namespace flashscope::app
