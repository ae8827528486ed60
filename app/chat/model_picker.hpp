// The model picker: a window listing the installed models (model_catalog)
// with the facts their headers give — architecture, parameters, file size,
// weight types, context, chat template or plain completion, tokenizer — and
// a path field for any other GGUF. Choosing one asks the engine worker to
// load it on its own thread (switch_model); the UI keeps drawing, and a file
// that fails leaves the running model in place with the error shown here.
#pragma once

#include "chat/chat_actions.hpp"
#include "chat/engine_worker.hpp"
#include "platform/ui_theme.hpp"

namespace flashscope::app {

// Draws the picker window while state.picker.open; lists the models the
// first time it opens (and on Rescan).
void draw_model_picker(ChatPanelState& state, EngineWorker& worker, const EngineSnapshot& snap, const UiFonts& fonts);

}  // namespace flashscope::app
