// One traced prefill for the dashboard: the GPU's probes where there is a
// device (capture_cuda_prefill_trace), the CPU path's otherwise — and when
// the GPU capture answers kUnsupported (a build whose kernels carry no
// probes yet) the CPU capture of the same problem, with a note that says so.
// Runs on the calling thread; the app calls it from its worker threads.
#pragma once

#include <string>
#include <vector>

#include "flashscope/trace.hpp"
#include "traces/synthetic_problem.hpp"

namespace flashscope::app {

struct CaptureRequest {
  SyntheticShape shape;
  uint64_t seed = 1;
  int head = 0;                                 // q-head the records follow
  bool try_gpu = true;                          // use the device's probes when a device is present
  PrefillKernel kernel = PrefillKernel::kAuto;  // GPU: which kernel to trace
  double cpu_max_flops = 0;                     // > 0: a CPU capture runs a shape reduced to at most this many FLOPs
};

struct CaptureOutcome {
  Status status;
  Trace trace;
  std::string note;  // where the trace came from and why (GPU probes, CPU fallback)
  double wall_ms = 0;
};

// The rows and blocks a capture follows for a grid of q_tiles × kv_tiles
// (tile_q rows × tile_kv keys: the CPU capture's 64 × 64 unless a GPU kernel
// said otherwise): rows at the start, end and tile edges of the sequence and
// spread between (at most ~24), every computed block when there are few, else
// the diagonal, the first column and the blocks just left of the diagonal.
TraceOptions dashboard_trace_options(const SyntheticShape& shape, int head, int tile_q = 64, int tile_kv = 64);

// FLOPs of one prefill of `s` (prefill_flops' count: 4·B·Hq·Lq·Lk·D, halved when causal).
double shape_flops(const SyntheticShape& s);

// `s` made small enough for the CPU: q_len and kv_len halved together
// (keeping the cached-prefix ratio), then heads, until shape_flops ≤ max_flops.
SyntheticShape cap_shape_for_cpu(SyntheticShape s, double max_flops);

CaptureOutcome capture_prefill(const CaptureRequest& request);

}  // namespace flashscope::app
