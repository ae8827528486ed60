// Headless output: the rendered frame as a PNG, and where each panel was
// drawn as JSON, so a test can check the picture without a person.
#pragma once

#include <string>

#include "flashscope/status.hpp"

namespace flashscope::app {

// Reads the bound framebuffer's back buffer (call after rendering, before
// the swap) of width × height pixels and writes it as an RGB PNG, top row first.
Status write_framebuffer_png(const std::string& path, int width, int height);

// Writes `text` to `path` (the layout JSON). kIoError on failure.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace flashscope::app
