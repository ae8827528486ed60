// The per-head summary of a capture (HeadSummary, attention_capture.hpp),
// computed in double from the operands the kernel read and its lse.
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/attention_capture.hpp"

namespace flashscope::model {

// The operands of one head over the captured rows.
//   q [rows, dim], k [keys, dim] floats (bf16 values); lse [rows] the kernel's
//   row i is position first + i; it sees keys (first + i − window, first + i]
//   (window 0: [0, first + i])
struct HeadOperands {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* lse = nullptr;
  int rows = 0, keys = 0, dim = 0, first = 0;
  int window = 0;           // the layer's window
  int model_window = 0;     // the model's sliding window, for window_mass; 0: none
  float scale = 0;
};

HeadSummary summarize_head(const HeadOperands& h);

}  // namespace flashscope::model
