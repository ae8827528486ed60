// The kernel lab: one prefill kernel on a synthetic problem, run over and
// over on a thread of its own, so its throughput — and, every couple of
// seconds, a trace of its pipeline — can be watched while switching kernels
// and shapes (the seed's v1 → v6 steps, seen rather than read).
//
//   UI thread                         lab thread
//   run(config) ──► mutex ──────────► (re)builds the problem when the shape changes
//                                     prefill() timed: CUDA events on a GPU,
//                                     the steady clock on the CPU
//                                     every ~2 s: capture_prefill() (GPU probes,
//                                     or the CPU capture when they are missing)
//   snapshot(&s) ◄── mutex ◄───────── per-run TFLOPS, per-kernel history, latest trace
//
// With a CUDA device the problem lives in device buffers and the chosen
// kernel runs; without one the CPU path runs (one algorithm, "cpu-tiled"),
// on the shape reduced until one run takes well under a second — the
// snapshot says both. Runs sleep briefly between each other so the UI
// thread keeps a core.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope/trace.hpp"
#include "traces/synthetic_problem.hpp"
#include "viz/throughput.hpp"

namespace flashscope::app {

struct LabConfig {
  PrefillKernel kernel = PrefillKernel::kAuto;
  SyntheticShape shape;
};

// A default for the device: the seed's shape (1×8×4096×8192, D 128) on a
// GPU, 1×8×512×512 D 64 causal on the CPU.
LabConfig default_lab_config(bool gpu);

// The kernels a picker offers: lab::ladder_kernels() (v1..v6) and any
// further kernel the runtime knows by name (the Hopper kernel where built).
std::vector<PrefillKernel> lab_kernels();

// The most FLOPs one CPU run may take (about a tenth of a second on 2 cores).
constexpr double kLabCpuMaxFlops = 5e8;

struct LabKernelStats {
  std::string kernel;  // "v5", "cpu-tiled"
  viz::History tflops;
};

struct LabSnapshot {
  bool running = false;
  bool on_gpu = false;
  std::string device;      // "NVIDIA H100 80GB HBM3" / "CPU (2 threads)"
  std::string error;       // the last failure (the loop stops on it)
  LabConfig asked;         // what the person chose
  SyntheticShape shape;    // what runs (the CPU may have reduced it)
  std::string kernel;      // what runs: "v5", "cpu-tiled"
  std::string limit_note;  // why the shape differs from the one asked for

  uint64_t runs = 0;
  double last_ms = 0;
  double flops = 0;                        // per run
  double sol_tflops = 0;                   // 0 on the CPU
  viz::History tflops;                     // every run, newest last
  std::vector<LabKernelStats> per_kernel;  // this shape's runs by kernel, in first-run order

  std::shared_ptr<const Trace> trace;  // the latest capture
  uint64_t trace_serial = 0;
  std::string trace_note;
};

class KernelLab {
 public:
  KernelLab() = default;
  ~KernelLab();  // stops and joins
  KernelLab(const KernelLab&) = delete;
  KernelLab& operator=(const KernelLab&) = delete;

  // Starts the loop (the first call starts the thread) or switches what it runs.
  void run(const LabConfig& config);
  void stop();
  void snapshot(LabSnapshot* out) const;

 private:
  void loop();

  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  LabConfig config_;
  uint64_t config_serial_ = 0;  // bumped by run(); the loop rebuilds when it changes
  LabSnapshot snap_;
};

}  // namespace flashscope::app
