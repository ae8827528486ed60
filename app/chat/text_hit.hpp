// Which byte of a wrapped text lies under the pointer: the chat's messages
// are drawn by ImGui::TextUnformatted under PushTextWrapPos, and hovering a
// token there highlights its row in the Attention tab's token view.
#pragma once

#include <imgui.h>

#include <string>

namespace flashscope::app {

// The byte offset of the character of `text` drawn under `mouse`, for text
// drawn at `origin` in the current font wrapped at `wrap_width` pixels as
// ImGui wraps it (words move to the next line, blanks after a wrap are
// skipped, '\n' breaks); -1 when the pointer is over no character.
int wrapped_text_byte_at(const std::string& text, ImVec2 origin, float wrap_width, ImVec2 mouse);

}  // namespace flashscope::app
