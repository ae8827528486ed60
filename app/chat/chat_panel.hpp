// The chat panel: the conversation with the model, streamed as it is
// generated, and everything that steers it — system prompt, sampling
// settings, stop / regenerate / edit the last message, copy, save and load,
// the context meter and each answer's tokens/s.
//
// The caller owns every piece of state (ChatPanelState, the Conversation,
// Metrics) and calls, once per frame:
//   sync_chat_with_engine(state, conversation, snapshot, metrics);  // streamed text in
//   draw_chat_panel(state, conversation, worker, snapshot, fonts);   // UI, requests out
// The buttons' actions live in chat_actions.hpp, without ImGui, so tests
// drive them directly.
#pragma once

#include "chat/chat_actions.hpp"
#include "chat/conversation.hpp"
#include "chat/engine_worker.hpp"
#include "platform/ui_theme.hpp"

namespace flashscope::app {

// While the chat input is taking the keyboard (at start, after Enter sent a
// message): the loop then holds queued keys back, which would be lost.
inline bool keyboard_waits_for_input(const ChatPanelState& state) {
  return state.focus_input || state.focus_frames_left > 0;
}

void draw_chat_panel(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                     const EngineSnapshot& snapshot, const UiFonts& fonts);

}  // namespace flashscope::app
