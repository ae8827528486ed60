// The Hopper kernel's sliding window and logit soft-cap, as PrefillParams
// gives them (window_left, window_right: -1 unbounded, else keys
// [pos − left, pos + right] of the query at bottom-right position pos;
// softcap: 0 off, else cap·tanh(s/cap) of each scaled logit s). Plain host
// and device data: the plan reads it (hopper_plan.h), the launch hands it to
// the kernel (HopperParams).
#pragma once

namespace flashscope::kernels {

struct HopperExtras {
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;

  // A window on either side (causal has none to the right).
  bool windowed(bool causal) const { return window_left >= 0 || (!causal && window_right >= 0); }
  // Whether a launch runs the window and soft-cap kernels (EXTRAS in
  // hopper_prefill_kernel.cuh).
  bool any(bool causal) const { return windowed(causal) || softcap > 0.0f; }
};

}  // namespace flashscope::kernels
