#include "headless.hpp"

#include <cstdio>

#include "platform/json.hpp"
#include "platform/screenshot.hpp"

namespace flashscope::app {

namespace {

Json rect_json(float x, float y, float w, float h) { return {{"x", x}, {"y", y}, {"w", w}, {"h", h}}; }
Json rect_json(const PanelRect& r) { return rect_json(r.x, r.y, r.w, r.h); }

}  // namespace

std::string layout_json(const HeadlessFrame& f) {
  // The dashboard's drawn widgets (heatmaps, timelines, charts) of the last frame.
  Json widgets = Json::object();
  for (const NamedRect& w : f.dashboard.widgets) widgets[w.name] = rect_json(w.x, w.y, w.w, w.h);
  // Labels whose fit matters: {"widget", "text"} and where.
  Json labels = Json::array();
  for (const NamedRect& l : f.dashboard.labels) {
    const size_t colon = l.name.find(':');
    Json j = rect_json(l.x, l.y, l.w, l.h);
    j["widget"] = l.name.substr(0, colon);
    j["text"] = colon == std::string::npos ? std::string() : l.name.substr(colon + 1);
    labels.push_back(std::move(j));
  }
  // The baked pictures (dashboard/baked_picture.hpp): how often each was
  // rendered into its texture, and how many frames it was shown from it unchanged.
  Json pictures = Json::object();
  for (const auto& [name, p] : f.dashboard.pictures.pictures()) {
    pictures[name] = {{"renders", p.renders()}, {"shows", p.shows()}};
  }
  // The model picker, when open: where, its rows with the facts they show, the path's error.
  Json picker = Json::object();
  Json windows = Json::object();
  const ModelPickerState& mp = f.chat.picker;
  if (mp.open) {
    Json rows = Json::array();
    for (const CatalogEntry& e : mp.models) {
      const ModelFacts& m = e.facts;
      rows.push_back({{"file", m.file_name},
                      {"architecture", m.architecture},
                      {"parameters", parameter_label(m.parameters)},
                      {"weights", weight_types_label(m)},
                      {"context", m.context_length},
                      {"chat_template", m.has_chat_template},
                      {"tokenizer", tokenizer_kind_label(m.tokenizer)},
                      {"error", e.error}});
    }
    picker = {{"models", std::move(rows)}};
    windows["model_picker"] = rect_json(mp.rect[0], mp.rect[1], mp.rect[2], mp.rect[3]);
  }
  if (f.dashboard.open_dialog_rect[2] > 0.0f) {
    const float* r = f.dashboard.open_dialog_rect;
    windows["open_trace"] = rect_json(r[0], r[1], r[2], r[3]);
  }
  const TraceSlot* shown = shown_slot(f.sources);
  const Json root = {
      {"width", f.fb_width},
      {"height", f.fb_height},
      {"frames", f.frames},
      {"tab", dashboard_tab_name(f.dashboard.active)},
      {"font", f.fonts.dejavu ? "DejaVu Sans" : "ImGui default"},
      {"engine", engine_state_name(f.snap.state)},
      {"device_note", f.dashboard.device_note},
      {"panels",
       {{"chat", rect_json(f.layout.chat)},
        {"dashboard", rect_json(f.layout.dashboard)},
        {"status_bar", rect_json(f.layout.status_bar)}}},
      {"widgets", std::move(widgets)},
      {"labels", std::move(labels)},
      {"windows", std::move(windows)},
      {"pictures", std::move(pictures)},
      {"messages", f.conversation.messages.size()},
      {"first_message", f.conversation.messages.empty() ? std::string() : f.conversation.messages.front().content},
      {"chat_input", f.chat.input},
      {"quit", f.quit},
      {"chat_format", f.snap.state == EngineState::kIdle ? chat_format_kind_name(f.snap.chat_format) : ""},
      {"chat_notice", f.snap.chat_format_notice},
      {"source", trace_origin_name(shown ? f.sources.shown : TraceOrigin::kNone)},
      {"provenance", shown ? shown->provenance : std::string()},
      {"trace_note", shown ? shown->note : std::string()},
      {"trace_device", shown ? shown->trace->meta.device_name : std::string()},
      {"replay_error", f.sources.replay_error},
      {"open_trace_buttons_visible", f.dashboard.open_dialog_rect[2] > 0.0f && f.dashboard.open_buttons_visible},
      {"model", f.snap.state == EngineState::kFailed ? std::string() : f.snap.model_name},
      {"switch_error", f.snap.switch_error},
      {"picker", std::move(picker)},
      {"picker_error", mp.path_error},
      {"token_labels", f.dashboard.tokens.labels_drawn},
      {"decode_steps", f.dashboard.tokens.steps_drawn},
      {"decode_steps_own_trace", f.dashboard.tokens.steps_own},
      {"head_summaries", f.dashboard.tokens.heads_drawn},
      {"hovered_token", f.dashboard.tokens.hover_label},
      {"attention_layer", f.snap.attention_trace ? f.snap.attention_trace->tokens.layer : -1},
      {"attention_head", f.snap.attention_trace ? f.snap.attention_trace->meta.traced_head : -1},
      {"lab_runs", f.lab.runs},
      {"lab_fields_clipped", f.dashboard.lab_fields_clipped},
      {"lab_kernel", f.lab.kernel}};
  return json_write(root);
}

bool HeadlessRun::last_frame(const HeadlessFrame& f) {
  // After the answer the engine captures the model's own attention: the
  // last frames show it (or why it failed).
  const bool attention_done = f.snap.attention_serial > 0 || !f.snap.attention_error.empty();
  if (f.prompt_sent && !f.answer_pending && !f.capture_busy && attention_done) ++frames_after_answer_;
  // A couple of frames after the answer, so its final statistics are on screen.
  const bool answered = opt_.has_prompt && frames_after_answer_ >= 3;
  const bool lab_done = !opt_.run_lab || (f.lab.runs >= 5 && f.lab.trace && f.sources.lab.trace);
  // The switch is under way from the frame after it was asked for until the
  // worker ends it, and then the example trace of the new model is captured.
  if (!f.snap.switching_to.empty()) ++frames_while_switching_;
  if (f.switch_sent && f.snap.switching_to.empty() && !f.capture_busy) ++frames_after_switch_;
  else frames_after_switch_ = 0;
  const bool switched = !opt_.switch_to.empty() && frames_after_switch_ >= 3;
  const bool last = f.frames >= opt_.frames || f.quit || (answered && lab_done) ||
                    (!opt_.has_prompt && opt_.run_lab && lab_done) ||
                    (switched && !opt_.has_prompt && !opt_.run_lab);
  if (!last) return false;
  if (!opt_.screenshot.empty()) {
    const Status s = write_framebuffer_png(opt_.screenshot, f.fb_width, f.fb_height);
    if (!s.ok()) write_error_ = s.to_string();
  }
  if (!opt_.layout.empty()) {
    const Status s = write_text_file(opt_.layout, layout_json(f));
    if (!s.ok()) write_error_ = s.to_string();
  }
  return true;
}

int HeadlessRun::report(const HeadlessFrame& f, const AppWindow& window, const Metrics& metrics,
                        const std::string& capture_error, bool replay_failed) const {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::printf("flashscope: %d frames in %.1f s at %dx%d, scale %.2f, font %s, OpenGL %s on %s\n", f.frames, seconds,
              window.width, window.height, window.scale, f.fonts.dejavu ? "DejaVu Sans" : "ImGui default",
              window.gl_version.c_str(), window.gl_renderer.c_str());
  if (f.snap.state == EngineState::kFailed) {
    std::printf("flashscope: model: %s\n", f.snap.load_error.c_str());
  } else {
    // The engine is named: a GPU run that fell back to the CPU must be seen in its log.
    std::printf("flashscope: model: %s (%s) on the %s engine\n", f.snap.model_name.c_str(),
                engine_state_name(f.snap.state), f.snap.on_gpu ? "CUDA" : "CPU");
  }
  if (!opt_.switch_to.empty()) {
    const std::string& why = !f.chat.picker.path_error.empty() ? f.chat.picker.path_error : f.snap.switch_error;
    const char* to = opt_.switch_to.c_str();
    if (!why.empty()) std::printf("flashscope: switch to %s failed: %s\n", to, why.c_str());
    else if (!f.snap.switching_to.empty()) std::printf("flashscope: switch to %s: still loading\n", to);
    else std::printf("flashscope: switched to %s (%s)\n", f.snap.model_name.c_str(),
                     chat_format_kind_name(f.snap.chat_format));
    std::printf("flashscope: UI while the model switched: %d frames\n", frames_while_switching_);
  }
  if (opt_.has_prompt) {
    const Message* answer = f.conversation.messages.empty() ? nullptr : &f.conversation.messages.back();
    if (answer && answer->role == "assistant" && answer->stats.valid) {
      const AnswerStats& s = answer->stats;
      std::printf("flashscope: answer: %d tokens, %.1f tok/s decode, prefill %d tokens in %.0f ms, stop %s\n",
                  s.generated_tokens, s.decode_tokens_per_s, s.prompt_tokens, s.prefill_ms, s.stop_reason.c_str());
      std::printf("flashscope: answer text: %s\n", answer->content.c_str());
    } else if (answer && !answer->error.empty()) {
      std::printf("flashscope: answer failed: %s\n", answer->error.c_str());
    } else {
      std::printf("flashscope: answer: not finished after %d frames\n", f.frames);
    }
    if (metrics.busy_frames > 0) {
      std::printf("flashscope: UI while the engine worked: %d frames, mean %.1f ms (%.0f fps), worst %.1f ms\n",
                  metrics.busy_frames, metrics.busy_frame_ms_sum / metrics.busy_frames,
                  1000.0 * metrics.busy_frames / metrics.busy_frame_ms_sum, metrics.busy_frame_ms_max);
    }
  }
  if (const TraceSlot* shown = shown_slot(f.sources)) {
    std::printf("flashscope: trace shown: %s (%s, kernel %s)\n", shown->provenance.c_str(),
                shown->trace->meta.device_name.c_str(), shown->trace->meta.kernel.c_str());
  }
  if (opt_.run_lab) {
    std::printf("flashscope: kernel lab: %llu runs of %s, last %.2f ms%s\n",
                static_cast<unsigned long long>(f.lab.runs), f.lab.kernel.c_str(), f.lab.last_ms,
                f.lab.error.empty() ? "" : (", error: " + f.lab.error).c_str());
  }
  if (!capture_error.empty()) std::printf("flashscope: trace capture failed: %s\n", capture_error.c_str());
  if (f.quit) std::printf("flashscope: quit from the window after %d frames\n", f.frames);
  int rc = replay_failed ? 1 : 0;
  if (!opt_.screenshot.empty()) {
    if (write_error_.empty()) {
      std::printf("flashscope: wrote %s\n", opt_.screenshot.c_str());
    } else {
      std::fprintf(stderr, "flashscope: %s\n", write_error_.c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace flashscope::app
