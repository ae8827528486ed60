// What the CUDA launch paths need to know about the current device, read once
// per device and kept for the process (none of it changes while it runs;
// the one cache of device facts in the library):
// a decode call is a few microseconds of GPU work, so its host path must not
// query the driver each time.
#pragma once

#include "flashscope/status.hpp"

namespace flashscope::cuda {

struct DeviceFacts {
  int ordinal = 0;  // the device these are of
  int sm_count = 0;
  int l2_bytes = 0;  // sizes the prefill's longest-first L2 groups
  // The Hopper (sm_90a) kernels run here: an sm_90 device and a library
  // that carries their code (kernels::hopper_kernels_runnable).
  bool hopper = false;
  // Programmatic dependent launch (PDL) may be used: an sm_90+ device, and
  // the library's kernels carry code for it that waits for its producer
  // (griddepcontrol.wait). Code JIT-compiled from sm_80 PTX has no wait, so
  // launching it programmatically would race even on an sm_90 device.
  bool programmatic = false;
};

// The current device's facts; kDeviceError when the device cannot be read.
// `programmatic` is also false while programmatic launches are turned off.
Result<DeviceFacts> device_facts();

// Programmatic launches for the whole process: on unless the environment
// says FLASHSCOPE_CUDA_PDL=0 (read at the first call), so one build can time
// a decode step with and without them. allow_programmatic() sets it (the
// tests' A/B); launches already captured into a graph keep their attribute.
bool programmatic_allowed();
void allow_programmatic(bool on);

}  // namespace flashscope::cuda
