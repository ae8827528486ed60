// Keyboard events between the window system and Dear ImGui, one frame's
// worth at a time.
//
// Why: Debian's Dear ImGui 1.86 has no input queue (io.AddKeyEvent came in
// 1.87). Its GLFW backend writes a key's state into io.KeysDown as the event
// arrives, and NewFrame samples that state once. A press and its release
// that arrive between two frames (a quick Enter or Esc tap, most taps while
// the kernel lab keeps frames long) cancel out, and the UI never sees the
// key. So the window's key and character callbacks write here, and each
// frame hands ImGui only events that cannot hide or reorder one another;
// the rest wait for the next frame, which the loop draws without pausing.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

namespace flashscope::app {

struct InputEvent {
  enum class Kind { kKey, kChar };
  Kind kind = Kind::kKey;
  // kKey: as GLFW reports it (key code, scancode, press or release, modifiers).
  int key = 0, scancode = 0, mods = 0;
  bool press = false;
  // kKey: the key types no character and is not a modifier (Enter, Esc,
  // Tab, Backspace, the arrows): a character after its press belongs after
  // it, so not in the same frame, where a text field reads characters first.
  bool control_key = false;
  unsigned codepoint = 0;  // kChar
};

class InputQueue {
 public:
  void push(const InputEvent& e) { events_.push_back(e); }
  bool empty() const { return events_.empty(); }
  std::size_t size() const { return events_.size(); }

  // The next frame's events, in arrival order: from the front up to, not
  // including, the first that would undo or overtake one already taken —
  // a second change of the same key (its press and release in one frame
  // cancel out), or a character after a control key's press.
  std::vector<InputEvent> take_frame();

 private:
  std::deque<InputEvent> events_;
};

}  // namespace flashscope::app
