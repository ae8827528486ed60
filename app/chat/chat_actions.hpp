// What the chat panel's buttons do, apart from drawing them: the chat's UI
// state, the requests sent to the engine worker, and the per-frame sync of
// the streamed answer into the conversation. No ImGui here, so the tests
// drive these exactly as the panel does, without a window.
//
// Invariant: while pending_id != 0, the conversation's last message is the
// assistant answer that request streams into, and nothing reorders the
// messages (edit, regenerate, load refuse or stop first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/conversation.hpp"
#include "chat/engine_worker.hpp"
#include "chat/model_catalog.hpp"
#include "dashboard/metrics.hpp"

namespace flashscope::app {

// The model picker's window (chat/model_picker.hpp).
struct ModelPickerState {
  bool open = false;
  bool listed = false;                // `models` holds the folders' listing
  std::vector<CatalogEntry> models;
  std::string selected;               // the path of the highlighted row
  std::string path_input;             // the path field
  std::string path_error;             // why the typed path cannot be loaded
  std::string last_request;           // the path the latest switch asked for
  float rect[4] = {0, 0, 0, 0};       // where the window was drawn (framebuffer pixels; tests)
  int frames_open = 0;                // frames since it opened
};

// Everything the chat panel keeps between frames; the caller owns it.
struct ChatPanelState {
  std::string input;                 // the message being typed
  uint64_t next_request_id = 1;      // ids for EngineRequest, increasing
  uint64_t pending_id = 0;           // the answer streaming into the last message; 0: none
  bool stop_requested = false;       // Stop pressed, waiting for the engine to confirm
  bool editing = false;              // the last user message is open for editing
  std::string edit_text;
  std::string file_path = "conversation.json";
  std::string file_message;          // result of the last save / load
  bool file_message_is_error = false;
  bool focus_input = true;           // give the input keyboard focus next frame
  // Frames left until a focus request has made the input active. Dear ImGui
  // 1.86 activates a field the frame after SetKeyboardFocusHere (or later)
  // and drops the characters of its activation frame, so keys wait until
  // it is active (keyboard_waits_for_input).
  int focus_frames_left = 0;
  bool follow_output = true;         // keep the transcript scrolled to the newest text
  bool model_defaults_applied = false;  // system prompt taken from the model's template
  uint64_t model_generation = 0;     // the engine's model the defaults were taken from
  std::string model_default_prompt;  // and its default system prompt
  // and its sampling (default_sampling): settings still equal to it take the next model's
  SamplingParams model_sampling = engine_sampling_defaults();
  ModelPickerState picker;
  // The message text under the pointer and the byte of it (-1: none), each
  // frame: the Attention tab's token view highlights that token's row.
  std::string hovered_text;
  int hovered_byte = -1;
  int copied_message = -1;           // "Copied" feedback: which message, and when
  double copied_at = 0.0;
};

// True when `text` is empty or only whitespace.
bool is_blank(const std::string& text);

// Appends a user message and asks the engine to answer it. False (nothing
// changes) when an answer is still streaming or the text is blank.
bool send_user_message(ChatPanelState& state, Conversation& conversation, EngineWorker& worker, const std::string& text);

// Drops the last answer and asks for a new one (a fresh seed when random_seed).
bool regenerate_last_answer(ChatPanelState& state, Conversation& conversation, EngineWorker& worker);

// Replaces the last user message with `text`, drops what followed it and
// asks for a new answer. The engine keeps its cache up to the first changed token.
bool edit_last_user_message(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                            const std::string& text);

// Stops the streaming answer; what arrived so far is kept.
void stop_answer(ChatPanelState& state, EngineWorker& worker);

// Forgets the conversation (messages and the engine's cache); settings stay.
void new_chat(ChatPanelState& state, Conversation& conversation, EngineWorker& worker);

// Replaces the conversation with one loaded from `path` (after new_chat).
Status load_conversation_into(ChatPanelState& state, Conversation& conversation, EngineWorker& worker,
                              const std::string& path);

// Stops a streaming answer and asks the engine to load `path` instead of
// its model (on its thread; the old model stays when the file fails). The
// conversation stays: the new model prefills it on the next message.
void switch_model(ChatPanelState& state, EngineWorker& worker, const std::string& path);

// What the model picker does with a chosen file: reads its header first
// (cheap), so a file that is not a model is refused at once with the
// reader's words in state.picker.path_error; else lists it in the picker if
// it is not there and calls switch_model. False when the header failed.
bool pick_model(ChatPanelState& state, EngineWorker& worker, const std::string& path);

// Once per frame: copies the streamed text of the pending answer into the
// conversation and, when it finished, its statistics (into metrics too).
// Also takes the model's default system prompt once a model has loaded
// (at start and after a switch), unless the person changed the prompt: a
// prompt that is the previous model's default follows the new model's.
void sync_chat_with_engine(ChatPanelState& state, Conversation& conversation, const EngineSnapshot& snapshot,
                           Metrics& metrics);

}  // namespace flashscope::app
