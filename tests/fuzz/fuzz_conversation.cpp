// The app's conversation files on arbitrary text: what loads writes back out
// and loads again to the same messages and settings.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/conversation.hpp"

using namespace flashscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  app::Conversation c;
  if (!app::conversation_from_json(text, &c).ok()) return 0;
  app::Conversation back;
  if (!app::conversation_from_json(app::conversation_to_json(c), &back).ok()) __builtin_trap();
  if (back.messages.size() != c.messages.size() || back.system_prompt != c.system_prompt ||
      back.settings.top_k != c.settings.top_k || back.settings.seed != c.settings.seed) {
    __builtin_trap();
  }
  return 0;
}
