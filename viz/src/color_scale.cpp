#include "viz/color_scale.hpp"

#include <algorithm>
#include <cmath>

namespace flashscope::viz {

namespace {

// matplotlib's viridis and magma at t = 0, 0.1, …, 1 (sRGB); linear
// interpolation between neighbouring anchors keeps lightness monotonic.
const std::vector<Rgb> kViridis = {
    {0x44, 0x01, 0x54}, {0x48, 0x24, 0x75}, {0x41, 0x44, 0x87}, {0x35, 0x5f, 0x8d},
    {0x2a, 0x78, 0x8e}, {0x21, 0x91, 0x8c}, {0x22, 0xa8, 0x84}, {0x44, 0xbf, 0x70},
    {0x7a, 0xd1, 0x51}, {0xbd, 0xdf, 0x26}, {0xfd, 0xe7, 0x25},
};
const std::vector<Rgb> kMagma = {
    {0x00, 0x00, 0x04}, {0x14, 0x0e, 0x36}, {0x3b, 0x0f, 0x70}, {0x64, 0x1a, 0x80},
    {0x8c, 0x29, 0x81}, {0xb7, 0x37, 0x79}, {0xde, 0x49, 0x68}, {0xf7, 0x70, 0x5c},
    {0xfe, 0x9f, 0x6d}, {0xfe, 0xcf, 0x92}, {0xfc, 0xfd, 0xbf},
};

uint8_t lerp8(uint8_t a, uint8_t b, float f) {
  return static_cast<uint8_t>(std::lround(a + (static_cast<float>(b) - a) * f));
}

}  // namespace

const std::vector<Rgb>& colormap_anchors(ColorMap map) { return map == ColorMap::kMagma ? kMagma : kViridis; }

Rgb sample_colormap(ColorMap map, float t) {
  const std::vector<Rgb>& a = colormap_anchors(map);
  if (!(t > 0.0f)) return a.front();  // also NaN
  if (t >= 1.0f) return a.back();
  const float x = t * static_cast<float>(a.size() - 1);
  const size_t i = static_cast<size_t>(x);
  const float f = x - static_cast<float>(i);
  return {lerp8(a[i].r, a[i + 1].r, f), lerp8(a[i].g, a[i + 1].g, f), lerp8(a[i].b, a[i + 1].b, f)};
}

ColorScale fit_scale(const std::vector<float>& values, bool log, float min_ratio) {
  float lo = INFINITY, hi = -INFINITY;
  for (const float v : values) {
    if (!std::isfinite(v) || (log && v <= 0.0f)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!(hi >= lo)) return log ? ColorScale{min_ratio, 1.0f, true} : ColorScale{0.0f, 1.0f, false};
  if (log) return {std::max(lo, hi * min_ratio), hi, true};
  // Linear scales of non-negative data start at 0, so colour reads as a fraction of the largest value.
  return {std::min(lo, 0.0f), hi, false};
}

ColorScale fit_scale_quantile(std::vector<float> values, float q, bool* clipped) {
  values.erase(std::remove_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); }), values.end());
  if (clipped != nullptr) *clipped = false;
  if (values.empty()) return {0.0f, 1.0f, false};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const size_t at = std::min(n - 1, static_cast<size_t>(std::ceil(std::clamp(q, 0.0f, 1.0f) * n)) - (q > 0.0f ? 1 : 0));
  const float hi = values[at] > 0.0f ? values[at] : values.back();
  if (clipped != nullptr) *clipped = values.back() > hi;
  return {std::min(values.front(), 0.0f), hi, false};
}

float scale_position(const ColorScale& s, float v) {
  if (std::isnan(v)) return 0.0f;
  if (!(s.hi > s.lo)) return 1.0f;
  float t;
  if (s.log) {
    if (v <= 0.0f || s.lo <= 0.0f) return 0.0f;
    t = static_cast<float>(std::log(double{v} / s.lo) / std::log(double{s.hi} / s.lo));
  } else {
    t = (v - s.lo) / (s.hi - s.lo);
  }
  return std::clamp(t, 0.0f, 1.0f);
}

float scale_value(const ColorScale& s, float t) {
  t = std::clamp(t, 0.0f, 1.0f);
  if (s.log && s.lo > 0.0f && s.hi > s.lo) return static_cast<float>(s.lo * std::pow(double{s.hi} / s.lo, t));
  return s.lo + (s.hi - s.lo) * t;
}

float luminance(Rgb c) {
  auto lin = [](uint8_t v) {
    const float x = v / 255.0f;
    return x <= 0.04045f ? x / 12.92f : std::pow((x + 0.055f) / 1.055f, 2.4f);
  };
  return 0.2126f * lin(c.r) + 0.7152f * lin(c.g) + 0.0722f * lin(c.b);
}

Rgb text_color_on(Rgb bg) {
  // 0.18: the luminance where black and white text have equal contrast (WCAG ratios).
  return luminance(bg) > 0.18f ? Rgb{10, 10, 12} : Rgb{245, 245, 245};
}

}  // namespace flashscope::viz
