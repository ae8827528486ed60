#include "platform/input_queue.hpp"

#include <algorithm>

namespace flashscope::app {

std::vector<InputEvent> InputQueue::take_frame() {
  std::vector<InputEvent> frame;
  std::vector<int> changed;  // keys pressed or released in this frame
  bool control_pressed = false;
  while (!events_.empty()) {
    const InputEvent& e = events_.front();
    if (e.kind == InputEvent::Kind::kKey) {
      if (std::find(changed.begin(), changed.end(), e.key) != changed.end()) break;
      changed.push_back(e.key);
      control_pressed |= e.press && e.control_key;
    } else if (control_pressed) {
      break;
    }
    frame.push_back(e);
    events_.pop_front();
  }
  return frame;
}

}  // namespace flashscope::app
