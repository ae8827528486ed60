// Colour scales for heatmaps: perceptual colormaps (viridis, magma) sampled
// from 11 anchors each, and a value → [0, 1] mapping, linear or logarithmic.
//
// Why perceptual maps: attention mass and probabilities are read as "how
// much", and viridis/magma rise monotonically in lightness, so a brighter
// cell is always a larger value (a rainbow map would invent bands). Why a
// log option: softmax probabilities span orders of magnitude; on a linear
// scale everything but the few largest blocks is the same dark colour.
#pragma once

#include <cstdint>
#include <vector>

namespace flashscope::viz {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

enum class ColorMap : uint8_t {
  kViridis,  // dark blue → green → yellow: attention mass, probabilities
  kMagma,    // black → purple → orange → pale yellow: time
};

// t is clamped to [0, 1]; NaN gives the map's low end.
Rgb sample_colormap(ColorMap map, float t);

// The anchors (t = 0, 0.1, …, 1) of a map, for checks that a picture uses it.
const std::vector<Rgb>& colormap_anchors(ColorMap map);

// Where values land on the map: lo → 0, hi → 1; with log, positions are
// log(v / lo) / log(hi / lo), so equal ratios take equal steps.
struct ColorScale {
  float lo = 0.0f, hi = 1.0f;
  bool log = false;
};

// A scale covering `values` (non-finite values ignored; with log also
// values ≤ 0). With log, lo is at least hi · min_ratio, so a few tiny
// values do not squeeze the interesting range into one colour.
// No usable value: {0, 1} (linear) or {min_ratio, 1} (log).
ColorScale fit_scale(const std::vector<float>& values, bool log, float min_ratio = 1e-4f);

// A linear scale from 0 to the q-quantile of `values` (q in (0, 1]), so a
// few outliers — a work item the OS preempted, a CTA that waited on a busy
// SM — saturate the top colour instead of turning everything else dark.
// *clipped (optional) says whether any value lies above hi.
ColorScale fit_scale_quantile(std::vector<float> values, float q, bool* clipped = nullptr);

// v's position on the scale, clamped to [0, 1]; values ≤ 0 on a log scale
// and NaN map to 0. A degenerate scale (hi ≤ lo) maps everything to 1.
float scale_position(const ColorScale& s, float v);

// The value at position t (the inverse of scale_position), for colour-bar labels.
float scale_value(const ColorScale& s, float t);

// Relative luminance (0..1, sRGB weights), and the text colour that reads on `bg`.
float luminance(Rgb c);
Rgb text_color_on(Rgb bg);

}  // namespace flashscope::viz
