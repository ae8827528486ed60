// The window's layout: the menu bar, the chat panel and the dashboard side
// by side with a draggable splitter between them, the status bar below.
#pragma once

#include "chat/chat_panel.hpp"
#include "chat/conversation.hpp"
#include "chat/engine_worker.hpp"
#include "dashboard/dashboard.hpp"

namespace flashscope::app {

// Where the panels were drawn on the last frame, in framebuffer pixels.
struct PanelRect {
  float x = 0, y = 0, w = 0, h = 0;
};
struct FrameLayout {
  float split = 0.42f;  // the chat panel's share of the width; the splitter moves it
  PanelRect chat, dashboard, status_bar;
};

// Draws the whole window for one frame: one undecorated host window filling
// the viewport, the panels as its children. *quit: File → Quit was chosen.
void draw_main_window(FrameLayout& layout, ChatPanelState& chat, Conversation& conversation, EngineWorker& worker,
                      DashboardState& dashboard, DashboardContext& ctx, float scale, bool* quit);

}  // namespace flashscope::app
