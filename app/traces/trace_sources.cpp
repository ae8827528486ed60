#include "traces/trace_sources.hpp"

#include <utility>

namespace flashscope::app {

const char* trace_origin_name(TraceOrigin o) {
  switch (o) {
    case TraceOrigin::kNone:
      return "none";
    case TraceOrigin::kReplay:
      return "replayed file";
    case TraceOrigin::kChat:
      return "chat capture";
    case TraceOrigin::kLab:
      return "kernel lab";
  }
  return "?";
}

TraceSlot* slot_of(TraceSources& s, TraceOrigin origin) {
  switch (origin) {
    case TraceOrigin::kReplay:
      return &s.replay;
    case TraceOrigin::kChat:
      return &s.chat;
    case TraceOrigin::kLab:
      return &s.lab;
    case TraceOrigin::kNone:
      break;
  }
  return nullptr;
}

const TraceSlot* slot_of(const TraceSources& s, TraceOrigin origin) {
  return slot_of(const_cast<TraceSources&>(s), origin);
}

const TraceSlot* shown_slot(const TraceSources& s) {
  const TraceSlot* slot = slot_of(s, s.shown);
  return slot != nullptr && slot->trace ? slot : nullptr;
}

Status open_replay(TraceSources& s, const std::string& path) {
  auto read = read_trace(path);
  if (!read.ok()) {
    s.replay_error = "cannot open " + path + ": " + read.status().to_string();
    return read.status();
  }
  s.replay_error.clear();
  s.replay.trace = std::make_shared<const Trace>(std::move(read).value());
  s.replay.provenance = "replayed from " + path;
  const Trace& t = *s.replay.trace;
  s.replay.note = std::to_string(t.ctas.size()) + " CTAs \xC2\xB7 " + std::to_string(t.spans.size()) +
                  " warp spans \xC2\xB7 " + std::to_string(t.softmax.size()) + " softmax states \xC2\xB7 " +
                  std::to_string(t.tile_mass.size()) + " tile masses \xC2\xB7 " +
                  std::to_string(t.prob_samples.size()) + " probability samples";
  s.replay.version = s.next_version++;
  s.shown = TraceOrigin::kReplay;
  return Status::ok_status();
}

void close_replay(TraceSources& s) {
  s.replay = TraceSlot();
  s.replay_error.clear();
  if (s.shown != TraceOrigin::kReplay) return;
  s.shown = TraceOrigin::kNone;
  for (const TraceOrigin o : {TraceOrigin::kChat, TraceOrigin::kLab}) {
    if (slot_of(s, o)->trace) {
      s.shown = o;
      break;
    }
  }
}

void set_live_trace(TraceSources& s, TraceOrigin origin, std::shared_ptr<const Trace> trace,
                    const std::string& provenance, const std::string& note) {
  TraceSlot* slot = slot_of(s, origin);
  if (slot == nullptr || !trace) return;
  slot->trace = std::move(trace);
  slot->provenance = provenance;
  slot->note = note;
  slot->version = s.next_version++;
  if (shown_slot(s) == nullptr) s.shown = origin;
}

void show_origin(TraceSources& s, TraceOrigin origin) {
  const TraceSlot* slot = slot_of(s, origin);
  if (slot != nullptr && slot->trace) s.shown = origin;
}

}  // namespace flashscope::app
