// What a baked picture (baked_picture.hpp) decides without a window: which
// framebuffer pixels a widget's rectangle covers, and whether this frame's
// drawing is the one its texture already holds.
//
// The memo keeps the drawing byte for byte rather than a hash or a key the
// views would build: a picture is re-rendered exactly when what it would
// draw differs — a new trace, scale, selection, size or position — so it can
// never show stale content, and comparing (a memcmp of at most a few hundred
// KB) costs far less than rendering under software OpenGL.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

namespace flashscope::app {

// A rectangle of whole framebuffer pixels: top-left pixel (x, y), w × h.
struct PixelRect {
  int x = 0, y = 0, w = 0, h = 0;
  bool operator==(const PixelRect& o) const { return x == o.x && y == o.y && w == o.w && h == o.h; }
  bool operator!=(const PixelRect& o) const { return !(*this == o); }
};

// The framebuffer pixels that the rectangle [x0, x1) × [y0, y1), in window
// units, touches at framebuffer scale (sx, sy): from the pixel holding its
// top-left corner through the one holding its bottom-right, partly covered
// edge pixels included, so a texture of that size lines up with the
// framebuffer's own pixel grid. An empty or inverted rectangle gives w or h 0.
PixelRect covering_pixels(float x0, float y0, float x1, float y1, float sx, float sy);

// One part of a drawing as bytes (vertices, indices, commands).
struct DrawingPart {
  const void* data;
  size_t bytes;
};

// The drawing a texture holds, copied; matches() says whether a new one is
// the same, part for part and byte for byte.
class DrawingMemo {
 public:
  bool matches(std::initializer_list<DrawingPart> parts) const;
  void remember(std::initializer_list<DrawingPart> parts);
  void forget();
  bool empty() const { return !valid_; }

 private:
  std::vector<std::vector<unsigned char>> parts_;
  bool valid_ = false;
};

}  // namespace flashscope::app
