// Checks a headless screenshot of the app: the PNG has the window's size,
// is really drawn (many distinct colours, not one flat fill), and the chat
// panel and the dashboard — where the app's layout JSON says it drew them —
// sit left and right, fill the window, and each contain drawn content
// (text and widgets: ink that differs from the panel's background, in many
// shades, in the panel's top part where its header always is).
//
// Optionally, per dashboard widget the layout names (heatmaps, timelines,
// charts): it lies inside the dashboard, is drawn, and at least MIN% of its
// pixels are colours of the palette it must use — viridis (attention mass,
// probabilities), magma (time), spans (the timeline's span kinds), any (no
// palette check) — taken from viz/ itself, so a view drawn with the wrong
// scale, or not at all, fails. And layout fields that must hold a value
// (the trace's source, say). And per floating window the layout names (the
// model picker): it lies inside the image and is drawn, as a panel is.
// And per widget whose labels must fit (--labels WIDGET:MIN: colour bars,
// lane names): at least MIN labels, none overlapping another, each within
// the dashboard's width; and named labels that must be drawn (--label WIDGET:TEXT);
// and widgets' least size (--min-size WIDGET:WxH: a heatmap not a sliver).
// And per baked picture (app/dashboard/baked_picture.hpp:
// a view rendered into a texture once, then shown from it) that the run
// rendered it, then showed it unchanged from its texture in most frames
// rather than rendering it again each frame; the widget's palette check
// says the texture shows the view.
//
// usage: flashscope-check-screenshot SHOT.png LAYOUT.json WIDTH HEIGHT
//            [--widget NAME:PALETTE:MIN%]... [--expect KEY=VALUE]... [--baked NAME]... [--window NAME]...
//            [--labels WIDGET:MIN]... [--label WIDGET:TEXT]... [--min-size WIDGET:WxH]...
//        flashscope-check-screenshot --self-test   (flat images must fail, a drawn heatmap pass)
// Exit 0 when every check passes, 1 with the failed checks listed.
#include <stb_image.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "platform/json.hpp"
#include "viz/color_scale.hpp"
#include "viz/trace_label.hpp"

using flashscope::app::Json;
using flashscope::app::json_member;
using flashscope::app::json_number;
using flashscope::app::json_parse;
using flashscope::app::json_string;

namespace {

struct Image {
  int w = 0, h = 0;
  const unsigned char* rgb = nullptr;
  uint32_t at(int x, int y) const {
    const unsigned char* p = rgb + (static_cast<size_t>(y) * w + x) * 3;
    return (uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2];
  }
};

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

int failures = 0;
using viz_rgb = flashscope::viz::Rgb;

void check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

int channel_distance(uint32_t a, uint32_t b) {
  int d = 0;
  for (int s = 0; s < 24; s += 8) d += std::abs(int((a >> s) & 0xff) - int((b >> s) & 0xff));
  return d;
}

struct RegionStats {
  size_t distinct = 0;
  double ink = 0.0;  // fraction of pixels far from the most common colour
};

RegionStats region_stats(const Image& img, const Rect& r) {
  std::unordered_map<uint32_t, size_t> counts;
  for (int y = r.y; y < r.y + r.h; ++y) {
    for (int x = r.x; x < r.x + r.w; ++x) ++counts[img.at(x, y)];
  }
  uint32_t background = 0;
  size_t best = 0;
  for (const auto& [c, n] : counts) {
    if (n > best) {
      best = n;
      background = c;
    }
  }
  size_t ink = 0;
  for (const auto& [c, n] : counts) {
    if (channel_distance(c, background) > 48) ink += n;
  }
  RegionStats s;
  s.distinct = counts.size();
  s.ink = r.w * r.h > 0 ? double(ink) / (double(r.w) * r.h) : 0.0;
  return s;
}

Rect panel_rect(const Json& layout, const char* name, const char* group = "panels") {
  Rect r;
  const auto* panels = json_member(layout, group);
  const auto* p = panels ? json_member(*panels, name) : nullptr;
  if (!p) return r;
  r.x = static_cast<int>(json_number(*p, "x", 0));
  r.y = static_cast<int>(json_number(*p, "y", 0));
  r.w = static_cast<int>(json_number(*p, "w", 0));
  r.h = static_cast<int>(json_number(*p, "h", 0));
  return r;
}

void check_panel(const Image& img, const char* name, const Rect& r) {
  char buf[256];
  const bool inside = r.w > 0 && r.h > 0 && r.x >= 0 && r.y >= 0 && r.x + r.w <= img.w && r.y + r.h <= img.h;
  std::snprintf(buf, sizeof buf, "%s panel at (%d, %d) size %dx%d lies inside the image", name, r.x, r.y, r.w, r.h);
  check(inside, buf);
  if (!inside) return;
  const RegionStats all = region_stats(img, r);
  std::snprintf(buf, sizeof buf, "%s panel is drawn: %zu distinct colours (want >= 48), %.1f%% ink (want >= 1%%)", name,
                all.distinct, 100.0 * all.ink);
  check(all.distinct >= 48 && all.ink >= 0.01, buf);
  const Rect top{r.x, r.y, r.w, r.h / 4};
  const RegionStats head = region_stats(img, top);
  std::snprintf(buf, sizeof buf, "%s panel's top quarter has its header: %zu colours, %.1f%% ink", name, head.distinct,
                100.0 * head.ink);
  check(head.distinct >= 24 && head.ink >= 0.01, buf);
}

uint32_t pack(viz_rgb c) { return (uint32_t(c.r) << 16) | (uint32_t(c.g) << 8) | c.b; }

// The colours a widget drawn with `name` uses; empty for "any".
std::vector<uint32_t> palette_colors(const std::string& name) {
  namespace viz = flashscope::viz;
  std::vector<uint32_t> out;
  if (name == "viridis" || name == "magma") {
    const viz::ColorMap map = name == "magma" ? viz::ColorMap::kMagma : viz::ColorMap::kViridis;
    for (int i = 0; i < 256; ++i) out.push_back(pack(viz::sample_colormap(map, i / 255.0f)));
  } else if (name == "spans") {
    for (uint32_t k = 0; k < flashscope::kSpanKindCount; ++k)
      out.push_back(pack(viz::span_kind_color(static_cast<flashscope::SpanKind>(k))));
  }
  return out;
}

// Share of the rectangle's pixels within `tolerance` (summed channel
// difference) of some palette colour.
double palette_share(const Image& img, const Rect& r, const std::vector<uint32_t>& palette, int tolerance) {
  std::unordered_map<uint32_t, bool> memo;
  size_t hits = 0;
  for (int y = r.y; y < r.y + r.h; ++y) {
    for (int x = r.x; x < r.x + r.w; ++x) {
      const uint32_t c = img.at(x, y);
      auto it = memo.find(c);
      if (it == memo.end()) {
        bool near = false;
        for (const uint32_t p : palette) near = near || channel_distance(c, p) <= tolerance;
        it = memo.emplace(c, near).first;
      }
      hits += it->second;
    }
  }
  return r.w * r.h > 0 ? double(hits) / (double(r.w) * r.h) : 0.0;
}

Rect widget_rect(const Json& layout, const std::string& name, bool* found) {
  Rect r;
  const auto* widgets = json_member(layout, "widgets");
  const auto* w = widgets ? json_member(*widgets, name) : nullptr;
  *found = w != nullptr;
  if (!w) return r;
  r.x = static_cast<int>(json_number(*w, "x", 0));
  r.y = static_cast<int>(json_number(*w, "y", 0));
  r.w = static_cast<int>(json_number(*w, "w", 0));
  r.h = static_cast<int>(json_number(*w, "h", 0));
  return r;
}

// "NAME:PALETTE:MIN%": the widget is there, inside the dashboard, drawn, in its palette.
void check_widget(const Image& img, const Json& layout, const std::string& spec) {
  const size_t a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || b == a) {
    check(false, "widget spec '" + spec + "' is NAME:PALETTE:MIN%");
    return;
  }
  const std::string name = spec.substr(0, a), palette = spec.substr(a + 1, b - a - 1);
  const double min_pct = std::atof(spec.c_str() + b + 1);
  bool found = false;
  const Rect r = widget_rect(layout, name, &found);
  char buf[256];
  std::snprintf(buf, sizeof buf, "widget %s was drawn (in the layout's widgets)", name.c_str());
  check(found, buf);
  if (!found) return;
  const Rect dash = panel_rect(layout, "dashboard");
  const bool inside = r.w >= 40 && r.h >= 20 && r.x >= dash.x && r.y >= dash.y && r.x + r.w <= dash.x + dash.w + 1 &&
                      r.y + r.h <= dash.y + dash.h + 1 && r.x + r.w <= img.w && r.y + r.h <= img.h;
  std::snprintf(buf, sizeof buf, "widget %s at (%d, %d) size %dx%d lies inside the dashboard, at least 40x20",
                name.c_str(), r.x, r.y, r.w, r.h);
  check(inside, buf);
  if (!inside) return;
  const RegionStats st = region_stats(img, r);
  std::snprintf(buf, sizeof buf, "widget %s is drawn: %zu colours (want >= 8), %.1f%% ink (want >= 3%%)", name.c_str(),
                st.distinct, 100.0 * st.ink);
  check(st.distinct >= 8 && st.ink >= 0.03, buf);
  const std::vector<uint32_t> colors = palette_colors(palette);
  if (palette == "any") return;
  if (colors.empty()) {
    check(false, "unknown palette '" + palette + "' (viridis, magma, spans, any)");
    return;
  }
  const double share = palette_share(img, r, colors, 12);
  std::snprintf(buf, sizeof buf, "widget %s uses %s: %.1f%% of its pixels (want >= %.0f%%)", name.c_str(),
                palette.c_str(), 100.0 * share, min_pct);
  check(100.0 * share >= min_pct, buf);
}

// "KEY=VALUE": a string field of the layout holds VALUE.
void check_expect(const Json& layout, const std::string& spec) {
  const size_t eq = spec.find('=');
  const std::string key = spec.substr(0, eq), want = eq == std::string::npos ? "" : spec.substr(eq + 1);
  const std::string got = json_string(layout, key, "(absent)");
  check(got == want, "layout " + key + " is '" + got + "' (want '" + want + "')");
}

// "NAME": the picture was rendered into its texture, and then shown from it
// unchanged — rendered in at most half of the run's frames, shown in one at least.
void check_baked(const Json& layout, const std::string& name) {
  const auto* pictures = json_member(layout, "pictures");
  const auto* p = pictures ? json_member(*pictures, name) : nullptr;
  const double renders = p ? json_number(*p, "renders", -1) : -1, shows = p ? json_number(*p, "shows", -1) : -1;
  const double frames = json_number(layout, "frames", 0);
  char buf[200];
  std::snprintf(buf, sizeof buf, "picture %s: rendered %.0f times, shown unchanged %.0f times in %.0f frames",
                name.c_str(), renders, shows, frames);
  check(renders >= 1 && shows >= 1 && renders <= frames / 2, buf);
}

// "NAME": a floating window of the layout's "windows", at least 200x100, drawn like a panel.
void check_window(const Image& img, const Json& layout, const std::string& name) {
  const Rect r = panel_rect(layout, name.c_str(), "windows");
  char buf[200];
  std::snprintf(buf, sizeof buf, "window %s was drawn (in the layout's windows), at least 200x100: %dx%d", name.c_str(),
                r.w, r.h);
  check(r.w >= 200 && r.h >= 100, buf);
  if (r.w >= 200 && r.h >= 100) check_panel(img, (name + " window").c_str(), r);
}

// "WIDGET:MIN": the layout's labels of WIDGET number at least MIN, lie within
// the dashboard panel's width and overlap none of the others.
void check_labels(const Json& layout, const std::string& spec) {
  const size_t colon = spec.rfind(':');
  const std::string widget = spec.substr(0, colon);
  const int min = colon == std::string::npos ? 1 : std::atoi(spec.c_str() + colon + 1);
  const Rect dash = panel_rect(layout, "dashboard");
  struct Label {
    std::string text;
    double x, y, w, h;
  };
  std::vector<Label> labels;
  if (const Json* all = json_member(layout, "labels"); all && all->is_array()) {
    for (const Json& l : *all) {
      if (json_string(l, "widget") != widget) continue;
      labels.push_back({json_string(l, "text"), json_number(l, "x", 0), json_number(l, "y", 0), json_number(l, "w", 0),
                        json_number(l, "h", 0)});
    }
  }
  char buf[300];
  std::snprintf(buf, sizeof buf, "%s: %zu labels drawn (want >= %d)", widget.c_str(), labels.size(), min);
  check(static_cast<int>(labels.size()) >= min, buf);
  int outside = 0, overlaps = 0;
  std::string example;
  for (size_t i = 0; i < labels.size(); ++i) {
    const Label& a = labels[i];
    // Across, within the dashboard (it does not scroll sideways); down, a
    // label below it is in the part of a tab that scrolls.
    if (a.x < dash.x || a.x + a.w > dash.x + dash.w) {
      ++outside;
      if (example.empty()) example = "'" + a.text + "' outside the dashboard";
    }
    for (size_t j = i + 1; j < labels.size(); ++j) {
      const Label& b = labels[j];
      // Touching is fine; a pixel of overlap (anti-aliasing) too.
      if (a.x + a.w > b.x + 1 && b.x + b.w > a.x + 1 && a.y + a.h > b.y + 1 && b.y + b.h > a.y + 1) {
        ++overlaps;
        if (example.empty()) example = "'" + a.text + "' over '" + b.text + "'";
      }
    }
  }
  std::snprintf(buf, sizeof buf, "%s: labels apart and within the dashboard's width (%d overlapping, %d outside%s%s)",
                widget.c_str(), overlaps, outside, example.empty() ? "" : ": ", example.c_str());
  check(overlaps == 0 && outside == 0, buf);
}

// "NAME:WxH": the widget was drawn at least W wide and H tall (framebuffer pixels).
void check_min_size(const Json& layout, const std::string& spec) {
  const size_t colon = spec.rfind(':');
  const std::string name = spec.substr(0, colon);
  int w = 0, h = 0;
  std::sscanf(spec.c_str() + colon + 1, "%dx%d", &w, &h);
  const Rect r = panel_rect(layout, name.c_str(), "widgets");
  char buf[200];
  std::snprintf(buf, sizeof buf, "widget %s is %dx%d (want at least %dx%d)", name.c_str(), r.w, r.h, w, h);
  check(r.w >= w && r.h >= h, buf);
}

// "WIDGET:TEXT": that label is drawn.
void check_label(const Json& layout, const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string widget = spec.substr(0, colon), text = spec.substr(colon + 1);
  bool found = false;
  if (const Json* all = json_member(layout, "labels"); all && all->is_array()) {
    for (const Json& l : *all) found |= json_string(l, "widget") == widget && json_string(l, "text") == text;
  }
  check(found, widget + ": label '" + text + "' drawn");
}

}  // namespace

// Every check on one image; returns the number that failed.
int check_image(const Image& img, const Json& layout, int want_w, int want_h,
                const std::vector<std::string>& widgets = {}, const std::vector<std::string>& expects = {},
                const std::vector<std::string>& baked = {}, const std::vector<std::string>& windows = {},
                const std::vector<std::string>& label_sets = {}, const std::vector<std::string>& named_labels = {},
                const std::vector<std::string>& min_sizes = {}) {
  failures = 0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "size %dx%d (want %dx%d)", img.w, img.h, want_w, want_h);
  check(img.w == want_w && img.h == want_h, buf);
  std::unordered_set<uint32_t> colours;
  for (int y = 0; y < img.h; ++y) {
    for (int x = 0; x < img.w; ++x) colours.insert(img.at(x, y));
  }
  std::snprintf(buf, sizeof buf, "not blank: %zu distinct colours (want >= 128)", colours.size());
  check(colours.size() >= 128, buf);

  const Rect chat = panel_rect(layout, "chat");
  const Rect dash = panel_rect(layout, "dashboard");
  check_panel(img, "chat", chat);
  check_panel(img, "dashboard", dash);
  check(chat.x + chat.w <= dash.x, "chat is left of the dashboard");
  std::snprintf(buf, sizeof buf, "panels share the width sensibly: chat %.0f%%, dashboard %.0f%%",
                100.0 * chat.w / img.w, 100.0 * dash.w / img.w);
  check(chat.w >= img.w / 4 && dash.w >= img.w * 35 / 100 && chat.w + dash.w >= img.w * 9 / 10, buf);
  check(chat.h >= img.h * 8 / 10 && dash.h >= img.h * 8 / 10, "both panels span most of the height");
  std::snprintf(buf, sizeof buf, "font: %s", json_string(layout, "font").c_str());
  check(json_string(layout, "font") == "DejaVu Sans", buf);
  for (const std::string& w : widgets) check_widget(img, layout, w);
  for (const std::string& e : expects) check_expect(layout, e);
  for (const std::string& b : baked) check_baked(layout, b);
  for (const std::string& w : windows) check_window(img, layout, w);
  for (const std::string& l : label_sets) check_labels(layout, l);
  for (const std::string& l : named_labels) check_label(layout, l);
  for (const std::string& m : min_sizes) check_min_size(layout, m);
  return failures;
}

// The checks must be able to fail: a flat image with a plausible layout
// has to be rejected for being blank and for its empty panels.
int self_test() {
  const int w = 1600, h = 1000;
  std::vector<unsigned char> flat(static_cast<size_t>(w) * h * 3, 30);
  Image img{w, h, flat.data()};
  Json layout;
  std::string error;
  const char* json = R"({"font": "DejaVu Sans", "panels": {
      "chat": {"x": 12, "y": 10, "w": 653, "h": 947}, "dashboard": {"x": 687, "y": 10, "w": 901, "h": 947}}})";
  if (!json_parse(json, &layout, &error)) return 1;
  std::printf("self-test: a flat %dx%d image must fail\n", w, h);
  const int failed = check_image(img, layout, w, h);
  std::printf("self-test: %d checks failed (want at least 5: blank, two panels x two)\n", failed);
  if (failed < 5) return 1;

  // A drawn viridis heatmap in a flat dashboard: the widget checks pass
  // for viridis and fail for magma, a missing widget and a wrong field.
  const char* with_widget = R"({"font": "DejaVu Sans", "source": "replayed file", "panels": {
      "chat": {"x": 12, "y": 10, "w": 653, "h": 947}, "dashboard": {"x": 687, "y": 10, "w": 901, "h": 947}},
      "widgets": {"tiles_mass": {"x": 700, "y": 100, "w": 256, "h": 256}}})";
  if (!json_parse(with_widget, &layout, &error)) return 1;
  for (int y = 0; y < 256; ++y) {
    for (int x = 0; x < 256; ++x) {
      const viz_rgb c =
          flashscope::viz::sample_colormap(flashscope::viz::ColorMap::kViridis, ((x / 32) * 8 + y / 32) / 63.0f);
      unsigned char* p = flat.data() + (static_cast<size_t>(100 + y) * w + 700 + x) * 3;
      p[0] = c.r;
      p[1] = c.g;
      p[2] = c.b;
    }
  }
  std::printf("self-test: a viridis heatmap must pass as viridis\n");
  failures = 0;
  check_widget(img, layout, "tiles_mass:viridis:60");
  check_expect(layout, "source=replayed file");
  if (failures != 0) return 1;
  std::printf("self-test: and fail as magma, when missing, and with another source\n");
  check_widget(img, layout, "tiles_mass:magma:60");
  check_widget(img, layout, "tiles_time:magma:60");
  check_expect(layout, "source=chat capture");
  if (failures != 3) return 1;

  // Baked pictures: one rendered once and then shown passes; one rendered
  // every frame, one never shown from its texture, and a missing one fail.
  const char* with_pictures = R"({"frames": 8, "pictures": {"tiles_mass": {"renders": 1, "shows": 7},
      "tiles_time": {"renders": 8, "shows": 0}, "tiles_probs": {"renders": 1, "shows": 0}}})";
  if (!json_parse(with_pictures, &layout, &error)) return 1;
  std::printf("self-test: a picture rendered once and shown after must pass\n");
  failures = 0;
  check_baked(layout, "tiles_mass");
  if (failures != 0) return 1;
  std::printf("self-test: and one rendered each frame, never shown, or absent fail\n");
  check_baked(layout, "tiles_time");
  check_baked(layout, "tiles_probs");
  check_baked(layout, "pipeline_sms");
  if (failures != 3) return 1;
  std::printf("self-test: a floating window that is flat, or absent from the layout, fails\n");
  failures = 0;
  const Image flat_img{w, h, flat.data()};  // the heatmap above lies right of and above the window
  if (!json_parse(R"({"windows": {"model_picker": {"x": 100, "y": 500, "w": 500, "h": 300}}})", &layout, &error))
    return 1;
  check_window(flat_img, layout, "model_picker");
  const int flat_failed = failures;
  check_window(flat_img, layout, "other");
  if (flat_failed < 1 || failures <= flat_failed) return 1;

  std::printf("self-test: labels apart pass; run together, outside the dashboard or missing, they fail\n");
  const char* with_labels = R"({"panels": {"dashboard": {"x": 687, "y": 10, "w": 901, "h": 947}}, "labels": [
      {"widget": "bar", "text": "0%", "x": 700, "y": 100, "w": 20, "h": 16},
      {"widget": "bar", "text": "50%", "x": 740, "y": 100, "w": 28, "h": 16},
      {"widget": "run", "text": "0%", "x": 700, "y": 200, "w": 20, "h": 16},
      {"widget": "run", "text": "50", "x": 712, "y": 200, "w": 20, "h": 16},
      {"widget": "out", "text": "far", "x": 1580, "y": 200, "w": 30, "h": 16}]})";
  if (!json_parse(with_labels, &layout, &error)) return 1;
  failures = 0;
  check_labels(layout, "bar:2");
  check_label(layout, "bar:50%");
  if (failures != 0) return 1;
  check_labels(layout, "run:2");
  check_labels(layout, "out:1");
  check_labels(layout, "bar:3");
  check_label(layout, "bar:100%");
  return failures == 4 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--self-test") return self_test();
  std::vector<std::string> widgets, expects, baked, windows, label_sets, named_labels, min_sizes;
  bool bad_args = argc < 5 || (argc - 5) % 2 != 0;
  for (int i = 5; !bad_args && i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--widget")
      widgets.push_back(argv[i + 1]);
    else if (flag == "--expect")
      expects.push_back(argv[i + 1]);
    else if (flag == "--baked")
      baked.push_back(argv[i + 1]);
    else if (flag == "--window")
      windows.push_back(argv[i + 1]);
    else if (flag == "--labels")
      label_sets.push_back(argv[i + 1]);
    else if (flag == "--label")
      named_labels.push_back(argv[i + 1]);
    else if (flag == "--min-size")
      min_sizes.push_back(argv[i + 1]);
    else
      bad_args = true;
  }
  if (bad_args) {
    std::fprintf(stderr,
                 "usage: %s SHOT.png LAYOUT.json WIDTH HEIGHT [--widget NAME:PALETTE:MIN%%]... "
                 "[--expect KEY=VALUE]... [--baked NAME]... [--window NAME]... [--labels WIDGET:MIN]... "
                 "[--label WIDGET:TEXT]... [--min-size WIDGET:WxH]... | --self-test\n",
                 argv[0]);
    return 2;
  }
  Image img;
  int channels = 0;
  unsigned char* data = stbi_load(argv[1], &img.w, &img.h, &channels, 3);
  if (!data) {
    std::printf("  [FAIL] cannot read %s as an image: %s\n", argv[1], stbi_failure_reason());
    return 1;
  }
  img.rgb = data;
  std::ifstream f(argv[2]);
  std::stringstream text;
  text << f.rdbuf();
  Json layout;
  std::string error;
  if (!f || !json_parse(text.str(), &layout, &error)) {
    std::printf("  [FAIL] cannot read the layout %s: %s\n", argv[2], error.c_str());
    stbi_image_free(data);
    return 1;
  }
  std::printf("%s\n", argv[1]);
  const int failed = check_image(img, layout, std::atoi(argv[3]), std::atoi(argv[4]), widgets, expects, baked,
                                 windows, label_sets, named_labels, min_sizes);
  stbi_image_free(data);
  std::printf("%s\n", failed ? "screenshot check FAILED" : "screenshot check passed");
  return failed ? 1 : 0;
}
