#include "platform/screenshot.hpp"

#include <GL/gl.h>
#include <stb_image_write.h>

#include <cstring>
#include <fstream>
#include <vector>

namespace flashscope::app {

Status write_framebuffer_png(const std::string& path, int width, int height) {
  if (width <= 0 || height <= 0) return invalid_argument("screenshot: empty framebuffer");
  const size_t row = static_cast<size_t>(width) * 3;
  std::vector<unsigned char> pixels(row * static_cast<size_t>(height));
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);  // rows of width × 3 bytes, no padding
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
  if (const GLenum err = glGetError(); err != GL_NO_ERROR) {
    return device_error("screenshot: glReadPixels failed (GL error " + std::to_string(err) + ")");
  }
  // OpenGL's first row is the bottom one; PNG's is the top.
  std::vector<unsigned char> tmp(row);
  for (int y = 0; y < height / 2; ++y) {
    unsigned char* a = pixels.data() + static_cast<size_t>(y) * row;
    unsigned char* b = pixels.data() + static_cast<size_t>(height - 1 - y) * row;
    std::memcpy(tmp.data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, tmp.data(), row);
  }
  if (!stbi_write_png(path.c_str(), width, height, 3, pixels.data(), static_cast<int>(row))) {
    return {StatusCode::kIoError, "screenshot: cannot write " + path};
  }
  return Status::ok_status();
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return {StatusCode::kIoError, "cannot write " + path};
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!f.flush()) return {StatusCode::kIoError, "cannot write " + path};
  return Status::ok_status();
}

}  // namespace flashscope::app
