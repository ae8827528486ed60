// The traces the dashboard's trace views (tiles, softmax, pipeline) can
// show, and which one they show. Three sources, each with its provenance:
//   replay  a file opened with --replay or File → Open trace ("replayed from FILE")
//   chat    captured after each answer for the loaded model's shape ("live")
//   lab     the kernel lab's latest capture ("live")
// A new trace replaces its source's previous one. What is shown changes
// only when the person asks (opening a file, pressing Run in the lab, the
// source picker) or when nothing was shown yet, so an answer finishing in
// the background never swaps a replayed trace out from under the reader.
// No ImGui here: tests drive it directly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "flashscope/status.hpp"
#include "flashscope/trace.hpp"

namespace flashscope::app {

enum class TraceOrigin : uint8_t { kNone, kReplay, kChat, kLab };
const char* trace_origin_name(TraceOrigin o);  // "replayed file", "chat capture", "kernel lab"

struct TraceSlot {
  std::shared_ptr<const Trace> trace;  // null: nothing yet
  std::string provenance;              // "replayed from FILE" / "live · …"
  std::string note;                    // what the inputs were, how it was captured
  uint64_t version = 0;                // changes whenever the trace does (views key caches on it)
};

struct TraceSources {
  TraceSlot replay, chat, lab;
  TraceOrigin shown = TraceOrigin::kNone;
  uint64_t next_version = 1;
  std::string replay_error;  // the last failed open, shown until the next open
};

// Reads `path` (read_trace). On success the replay slot holds it and it is
// shown; on failure nothing changes but replay_error, which names the file
// and what is wrong with it. Returns the read's status.
Status open_replay(TraceSources& s, const std::string& path);
void close_replay(TraceSources& s);

// A new live trace for the chat or lab slot.
void set_live_trace(TraceSources& s, TraceOrigin origin, std::shared_ptr<const Trace> trace,
                    const std::string& provenance, const std::string& note);

// Shows `origin` if its slot holds a trace.
void show_origin(TraceSources& s, TraceOrigin origin);

TraceSlot* slot_of(TraceSources& s, TraceOrigin origin);
const TraceSlot* slot_of(const TraceSources& s, TraceOrigin origin);
// The slot shown, or null when nothing is.
const TraceSlot* shown_slot(const TraceSources& s);

}  // namespace flashscope::app
