// The loop's hand-off between the threads that capture live traces
// (LiveCapture for the chat, KernelLab) and the trace sources the views show.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/engine_worker.hpp"
#include "dashboard/dashboard.hpp"
#include "dashboard/metrics.hpp"
#include "lab/kernel_lab.hpp"
#include "traces/live_capture.hpp"
#include "traces/trace_sources.hpp"

namespace flashscope::app {

// What the loop keeps for the dashboard's live sources between frames.
struct LiveState {
  uint64_t model_captured = 0;  // the model (EngineSnapshot::model_generation) the example capture was made for
  size_t answers_captured = 0;  // answers a capture was requested for
  int conversation_tokens = 0;  // of the latest capture request (re-captures for another head reuse it)
  std::string provenance;
  uint64_t attention_serial = 0;  // the engine's latest own-attention trace shown (EngineSnapshot)
  uint64_t lab_trace_serial = 0;
  std::string capture_error;
};

// Once per frame: requests the chat's captures (once a model has loaded,
// at start and after each switch; after each answer; when the traced head
// changes), and moves finished
// captures — the chat's and the lab's — into the trace sources.
void update_live_traces(LiveState& live, TraceSources& sources, LiveCapture& capture, KernelLab& lab,
                        LabSnapshot& lab_snap, DashboardState& dashboard, const EngineSnapshot& snap,
                        const Metrics& metrics);

}  // namespace flashscope::app
