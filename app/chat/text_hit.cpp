// wrapped_text_byte_at (chat/text_hit.hpp): the walk of ImFont::RenderText
// over the same text, with positions instead of glyphs.
#include "chat/text_hit.hpp"

#include <imgui_internal.h>

namespace flashscope::app {

int wrapped_text_byte_at(const std::string& text, ImVec2 origin, float wrap_width, ImVec2 mouse) {
  ImFont* font = ImGui::GetFont();
  if (font == nullptr || text.empty()) return -1;
  const float size = ImGui::GetFontSize(), scale = size / font->FontSize;
  const char* const begin = text.c_str();
  const char* const end = begin + text.size();
  const char* s = begin;
  const char* eol = nullptr;
  float x = origin.x, y = origin.y;
  while (s < end) {
    if (mouse.y < y) return -1;  // above the line being walked: between lines or above the text
    if (eol == nullptr) {
      eol = font->CalcWordWrapPositionA(scale, s, end, wrap_width - (x - origin.x));
      if (eol == s) ++eol;  // too narrow for anything: one character anyway, as ImGui does
    }
    if (s >= eol) {
      x = origin.x;
      y += size;
      eol = nullptr;
      while (s < end) {
        if (ImCharIsBlankA(*s)) {
          ++s;
        } else if (*s == '\n') {
          ++s;
          break;
        } else {
          break;
        }
      }
      continue;
    }
    const char* at = s;
    unsigned int c = static_cast<unsigned char>(*s);
    if (c < 0x80) s += 1;
    else s += ImTextCharFromUtf8(&c, s, end);
    if (c == 0) break;
    if (c == '\n') {
      x = origin.x;
      y += size;
      continue;
    }
    if (c == '\r') continue;
    const ImFontGlyph* glyph = font->FindGlyph(static_cast<ImWchar>(c));
    if (glyph == nullptr) continue;
    const float w = glyph->AdvanceX * scale;
    if (mouse.y >= y && mouse.y < y + size && mouse.x >= x && mouse.x < x + w) return static_cast<int>(at - begin);
    x += w;
  }
  return -1;
}

}  // namespace flashscope::app
