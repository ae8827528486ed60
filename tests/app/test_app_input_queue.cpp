// The app's keyboard queue (app/platform/input_queue.hpp): Dear ImGui 1.86
// samples key state once a frame, so each frame must get events that do not
// cancel or overtake one another, and every event must get through in order.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "platform/input_queue.hpp"

namespace {

using flashscope::app::InputEvent;
using flashscope::app::InputQueue;

// GLFW's codes: letters are their ASCII capitals, Enter 257, left Ctrl 341.
constexpr int kEnter = 257, kCtrl = 341;

InputEvent key(int code, bool press, bool control = false) {
  InputEvent e;
  e.key = code;
  e.press = press;
  e.control_key = control;
  return e;
}

InputEvent ch(char c) {
  InputEvent e;
  e.kind = InputEvent::Kind::kChar;
  e.codepoint = static_cast<unsigned>(c);
  return e;
}

// Each frame as text: "+K" a press of key K, "-K" a release, "'c" a character.
std::vector<std::string> frames_of(InputQueue& q) {
  std::vector<std::string> out;
  while (!q.empty()) {
    std::string f;
    for (const InputEvent& e : q.take_frame()) {
      if (!f.empty()) f += ' ';
      if (e.kind == InputEvent::Kind::kChar) f += std::string("'") + static_cast<char>(e.codepoint);
      else f += (e.press ? "+" : "-") + (e.key == kEnter ? std::string("Enter") : e.key == kCtrl ? std::string("Ctrl")
                                                                               : std::string(1, static_cast<char>(e.key)));
    }
    REQUIRE(!f.empty());  // every frame takes at least one event: the queue always drains
    out.push_back(f);
  }
  return out;
}

}  // namespace

TEST_CASE("input queue: a tap that arrives between two frames is seen pressed in one and released in the next") {
  InputQueue q;
  q.push(key(kEnter, true, true));
  q.push(key(kEnter, false, true));
  CHECK(frames_of(q) == std::vector<std::string>{"+Enter", "-Enter"});
}

TEST_CASE("input queue: typing keeps each character with its key and in order, about a frame a key") {
  InputQueue q;
  for (char c : std::string("HI")) {
    q.push(key(c, true));
    q.push(ch(static_cast<char>(c + 32)));
    q.push(key(c, false));
  }
  CHECK(frames_of(q) == std::vector<std::string>{"+H 'h", "-H +I 'i", "-I"});
}

TEST_CASE("input queue: a character after Enter waits for the next frame; characters before it share Enter's") {
  InputQueue q;
  q.push(ch('a'));
  q.push(key(kEnter, true, true));
  q.push(key(kEnter, false, true));
  q.push(key('X', true));
  q.push(ch('x'));
  q.push(key('X', false));
  CHECK(frames_of(q) == std::vector<std::string>{"'a +Enter", "-Enter +X 'x", "-X"});
}

TEST_CASE("input queue: a shortcut's modifier and letter arrive together, so the letter is pressed with Ctrl down") {
  InputQueue q;
  q.push(key(kCtrl, true));
  q.push(key('Q', true));
  q.push(key('Q', false));
  q.push(key(kCtrl, false));
  CHECK(frames_of(q) == std::vector<std::string>{"+Ctrl +Q", "-Q -Ctrl"});
}
