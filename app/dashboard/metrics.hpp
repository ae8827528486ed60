// Numbers the dashboard plots, collected by the UI thread: tokens/s of each
// finished answer and the UI's own frame times (the "UI stays ≥ 30 fps while
// the model generates" promise, measured).
#pragma once

#include <algorithm>
#include <vector>

#include "chat/conversation.hpp"

namespace flashscope::app {

struct Metrics {
  // One entry per finished answer, oldest first (the floats for the plots).
  std::vector<AnswerStats> answers;
  std::vector<float> answer_decode_tps;
  std::vector<float> answer_prefill_tps;
  std::vector<float> answer_ttft_ms;

  // The last kFrameWindow frame times in ms, a ring (frame_ms_next is the oldest).
  static constexpr int kFrameWindow = 240;
  std::vector<float> frame_ms = std::vector<float>(kFrameWindow, 0.0f);
  int frame_ms_next = 0;

  // Frames drawn while the engine was busy, and the slowest of them.
  int busy_frames = 0;
  double busy_frame_ms_sum = 0.0;
  float busy_frame_ms_max = 0.0f;
};

inline void record_frame(Metrics& m, float ms, bool engine_busy) {
  m.frame_ms[static_cast<size_t>(m.frame_ms_next)] = ms;
  m.frame_ms_next = (m.frame_ms_next + 1) % Metrics::kFrameWindow;
  if (engine_busy) {
    ++m.busy_frames;
    m.busy_frame_ms_sum += ms;
    m.busy_frame_ms_max = std::max(m.busy_frame_ms_max, ms);
  }
}

}  // namespace flashscope::app
