// What decides when a baked picture (app/dashboard/baked_picture.hpp) is rendered
// again, without a window: the framebuffer pixels its rectangle covers,
// and the memory of the drawing its texture holds. A picture must never
// show a stale drawing — any byte that differs re-renders it — and must
// not be re-rendered while the drawing stays the same.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "dashboard/drawing_memo.hpp"

namespace app = flashscope::app;

TEST_CASE("covering_pixels: every pixel a widget's rectangle touches, on the framebuffer's grid") {
  SUBCASE("whole pixels map to themselves") {
    const app::PixelRect r = app::covering_pixels(10, 20, 110, 70, 1, 1);
    CHECK(r == app::PixelRect{10, 20, 100, 50});
  }
  SUBCASE("partly covered edge pixels are included") {
    // [10.3, 20.7) touches pixels 10..20; [5.5, 6.25) pixels 5 and 6.
    const app::PixelRect r = app::covering_pixels(10.3f, 5.5f, 20.7f, 6.25f, 1, 1);
    CHECK(r == app::PixelRect{10, 5, 11, 2});
  }
  SUBCASE("HiDPI: window units times the framebuffer scale") {
    const app::PixelRect r = app::covering_pixels(10.25f, 4, 20.5f, 8, 2, 2);
    CHECK(r == app::PixelRect{20, 8, 21, 8});
  }
  SUBCASE("an empty or inverted rectangle covers nothing") {
    CHECK(app::covering_pixels(10, 10, 10, 30, 1, 1).w == 0);
    CHECK(app::covering_pixels(10, 30, 40, 20, 1, 1).h == 0);
  }
}

TEST_CASE("DrawingMemo: the same drawing matches, any change does not") {
  std::vector<float> vtx = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<uint16_t> idx = {0, 1, 2};
  app::DrawingMemo memo;
  CHECK(memo.empty());
  CHECK_FALSE(memo.matches({{vtx.data(), vtx.size() * sizeof(float)}, {idx.data(), idx.size() * sizeof(uint16_t)}}));

  memo.remember({{vtx.data(), vtx.size() * sizeof(float)}, {idx.data(), idx.size() * sizeof(uint16_t)}});
  CHECK_FALSE(memo.empty());
  // An equal drawing in other buffers (next frame's) matches.
  const std::vector<float> vtx2 = vtx;
  const std::vector<uint16_t> idx2 = idx;
  CHECK(memo.matches({{vtx2.data(), vtx2.size() * sizeof(float)}, {idx2.data(), idx2.size() * sizeof(uint16_t)}}));

  SUBCASE("it keeps a copy: editing the remembered buffers later is a change") {
    vtx[2] = 3.5f;
    CHECK_FALSE(memo.matches({{vtx.data(), vtx.size() * sizeof(float)}, {idx.data(), idx.size() * sizeof(uint16_t)}}));
  }
  SUBCASE("one changed byte, a longer part, or another number of parts is a change") {
    std::vector<uint16_t> moved = idx;
    moved[1] = 3;
    CHECK_FALSE(
        memo.matches({{vtx.data(), vtx.size() * sizeof(float)}, {moved.data(), moved.size() * sizeof(uint16_t)}}));
    std::vector<float> longer = vtx;
    longer.push_back(5.0f);
    CHECK_FALSE(
        memo.matches({{longer.data(), longer.size() * sizeof(float)}, {idx.data(), idx.size() * sizeof(uint16_t)}}));
    CHECK_FALSE(memo.matches({{vtx.data(), vtx.size() * sizeof(float)}}));
  }
  SUBCASE("forget: nothing matches until a drawing is remembered again") {
    memo.forget();
    CHECK(memo.empty());
    CHECK_FALSE(memo.matches({{vtx.data(), vtx.size() * sizeof(float)}, {idx.data(), idx.size() * sizeof(uint16_t)}}));
  }
}
