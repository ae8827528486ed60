#include "dashboard/drawing_memo.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace flashscope::app {

PixelRect covering_pixels(float x0, float y0, float x1, float y1, float sx, float sy) {
  PixelRect r;
  r.x = static_cast<int>(std::floor(x0 * sx));
  r.y = static_cast<int>(std::floor(y0 * sy));
  r.w = std::max(0, static_cast<int>(std::ceil(x1 * sx)) - r.x);
  r.h = std::max(0, static_cast<int>(std::ceil(y1 * sy)) - r.y);
  if (!(x1 > x0)) r.w = 0;
  if (!(y1 > y0)) r.h = 0;
  return r;
}

bool DrawingMemo::matches(std::initializer_list<DrawingPart> parts) const {
  if (!valid_ || parts.size() != parts_.size()) return false;
  size_t i = 0;
  for (const DrawingPart& p : parts) {
    const std::vector<unsigned char>& kept = parts_[i++];
    if (p.bytes != kept.size()) return false;
    if (p.bytes > 0 && std::memcmp(p.data, kept.data(), p.bytes) != 0) return false;
  }
  return true;
}

void DrawingMemo::remember(std::initializer_list<DrawingPart> parts) {
  parts_.resize(parts.size());
  size_t i = 0;
  for (const DrawingPart& p : parts) {
    const auto* bytes = static_cast<const unsigned char*>(p.data);
    parts_[i++].assign(bytes, bytes + p.bytes);
  }
  valid_ = true;
}

void DrawingMemo::forget() {
  parts_.clear();
  valid_ = false;
}

}  // namespace flashscope::app
