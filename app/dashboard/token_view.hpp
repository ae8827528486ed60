// The Attention tab's token view of a trace of the model's own attention:
// its state (DashboardState::tokens). Drawn by dashboard/tabs/tab_tokens.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viz/token_matrix.hpp"

namespace flashscope::app {

struct TokenView {
  uint64_t version = 0;     // of the trace the matrix was built from
  viz::TokenMatrix matrix;
  bool show_tokens = true;  // the Attention tab shows tokens (else its tiles) when the trace has them
  viz::TokenWindow window;  // zoom 0: the whole conversation; each step halves the tokens in view
  int sel_row = -1;         // the row whose keys are listed (-1: the last)
  // The chat's hovered message text and byte (ChatPanelState), and the row
  // of the token there (-1: none), highlighted on the map and in the steps.
  std::string hover_text;
  int hover_byte = -1;
  int hover_row = -1;
  std::string hover_label;  // its token, as the map labels it
  int labels_drawn = 0;     // token labels on the map's axes, last frame (the headless report)
  int heads_drawn = 0;      // heads in the per-head summary row, last frame (the headless report)
  int steps_first = -1;     // the first decode step the strip shows (-1: the answer's last ones)
  int steps_drawn = 0;      // the answer's decode steps in the step strip, last frame (the headless report)
  // The strip's rows (viz::step_rows_matrix), built for the matrix of trace
  // `version`, the answer's first key and the capture's step traces below.
  viz::TokenMatrix steps_matrix;
  uint64_t steps_version = 0;
  int steps_key = -1;
  const void* steps_source = nullptr;
  int steps_own = 0;        // of them, rows from their step's own trace (CUDA); the headless report
};

}  // namespace flashscope::app
