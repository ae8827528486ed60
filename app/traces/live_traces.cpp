#include "traces/live_traces.hpp"

#include <cstdio>
#include <memory>
#include <utility>

namespace flashscope::app {

void update_live_traces(LiveState& live, TraceSources& sources, LiveCapture& capture, KernelLab& lab,
                        LabSnapshot& lab_snap, DashboardState& dashboard, const EngineSnapshot& snap,
                        const Metrics& metrics) {
  const bool model_ready = snap.state != EngineState::kLoading && snap.state != EngineState::kFailed;
  if (model_ready) {
    bool want = false;
    if (live.model_captured != snap.model_generation) {
      live.model_captured = snap.model_generation;
      live.conversation_tokens = 0;
      live.provenance = "live \xC2\xB7 example once the model loaded";
      want = true;
    }
    // After an answer the engine captures the model's own attention
    // (EngineSnapshot::attention_trace); synthetic inputs stand in only
    // where its capture fails (a GPU build without the probed kernels).
    const bool own_attention = snap.attention_error.empty();
    if (metrics.answers.size() > live.answers_captured) {
      live.answers_captured = metrics.answers.size();
      live.conversation_tokens = metrics.answers.back().context_tokens;
      live.provenance = "live \xC2\xB7 after answer " + std::to_string(metrics.answers.size());
      want = !own_attention;
    }
    if (dashboard.chat_head_changed) {
      dashboard.chat_head_changed = false;
      want = !own_attention || snap.attention_serial == 0;
    }
    if (want) {
      capture.request(chat_capture_job(snap.config, snap.model_name, live.conversation_tokens, dashboard.chat_head,
                                           live.provenance));
    }
  }
  if (snap.attention_trace && snap.attention_serial != live.attention_serial) {
    live.attention_serial = snap.attention_serial;
    set_live_trace(sources, TraceOrigin::kChat, snap.attention_trace, live.provenance, snap.attention_note);
    live.capture_error.clear();
  }
  LiveCaptureResult done;
  if (capture.poll(&done)) {
    if (done.outcome.status.ok()) {
      char took[64];
      std::snprintf(took, sizeof took, " \xC2\xB7 captured in %.0f ms", done.outcome.wall_ms);
      set_live_trace(sources, TraceOrigin::kChat,
                         std::make_shared<const flashscope::Trace>(std::move(done.outcome.trace)), done.provenance,
                         done.outcome.note + " \xC2\xB7 " + done.note + took);
      live.capture_error.clear();
    } else {
      live.capture_error = done.outcome.status.to_string();
    }
  }
  lab.snapshot(&lab_snap);
  if (lab_snap.trace && lab_snap.trace_serial != live.lab_trace_serial) {
    live.lab_trace_serial = lab_snap.trace_serial;
    set_live_trace(sources, TraceOrigin::kLab, lab_snap.trace,
                       "live \xC2\xB7 kernel lab, capture " + std::to_string(lab_snap.trace_serial),
                       lab_snap.trace_note + " \xC2\xB7 synthetic inputs, " + shape_label(lab_snap.shape));
  }
  if (dashboard.show_lab_when_ready && sources.lab.trace) {
    show_origin(sources, TraceOrigin::kLab);
    dashboard.show_lab_when_ready = false;
  }
}

}  // namespace flashscope::app
