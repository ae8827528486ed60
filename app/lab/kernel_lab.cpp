#include "lab/kernel_lab.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "flashscope/cpu_threads.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope_lab/lab.hpp"
#include "traces/capture.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace flashscope::app {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kCaptureEvery = std::chrono::seconds(2);
constexpr auto kCpuPause = std::chrono::milliseconds(25);  // between CPU runs: the UI thread's share of 2 cores
constexpr auto kGpuPause = std::chrono::milliseconds(5);
constexpr double kGpuMinSampleMs = 2.0;  // launches per sample grow until one sample takes this long

// What the loop holds for one configuration.
struct Prepared {
  LabConfig config;
  SyntheticShape shape;  // after the CPU cap
  SyntheticProblem host;
  std::optional<DeviceBuffer> q, k, v, o, workspace;
  PrefillParams params;
  int launches = 1;  // per timed sample (GPU)
};

Status prepare(const LabConfig& c, bool gpu, Prepared* out) {
  out->config = c;
  out->shape = gpu ? c.shape : cap_shape_for_cpu(c.shape, kLabCpuMaxFlops);
  out->host = make_synthetic_problem(out->shape, 1);
  out->params = out->host.params();
  out->launches = 1;
  if (!gpu) return validate(out->params);
  auto alloc = [](size_t bytes, std::optional<DeviceBuffer>* b) -> Status {
    auto r = DeviceBuffer::allocate(bytes);
    if (!r.ok()) return r.status();
    *b = std::move(r).value();
    return Status::ok_status();
  };
  FLASHSCOPE_RETURN_IF_ERROR(alloc(out->host.q.size() * 2, &out->q));
  FLASHSCOPE_RETURN_IF_ERROR(alloc(out->host.k.size() * 2, &out->k));
  FLASHSCOPE_RETURN_IF_ERROR(alloc(out->host.v.size() * 2, &out->v));
  FLASHSCOPE_RETURN_IF_ERROR(alloc(out->host.o.size() * 2, &out->o));
  FLASHSCOPE_RETURN_IF_ERROR(out->q->upload(out->host.q.data(), out->host.q.size() * 2));
  FLASHSCOPE_RETURN_IF_ERROR(out->k->upload(out->host.k.data(), out->host.k.size() * 2));
  FLASHSCOPE_RETURN_IF_ERROR(out->v->upload(out->host.v.data(), out->host.v.size() * 2));
  PrefillParams& p = out->params;
  p.q.data = out->q->data();
  p.k.data = out->k->data();
  p.v.data = out->v->data();
  p.o.data = out->o->data();
  p.lse = nullptr;
  p.device = Device::kCuda;
  p.kernel = c.kernel;
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  // The kernel's scratch where it takes one (long non-causal problems on Hopper).
  if (const size_t bytes = prefill_workspace_bytes(p); bytes > 0) {
    FLASHSCOPE_RETURN_IF_ERROR(alloc(bytes, &out->workspace));
    FLASHSCOPE_RETURN_IF_ERROR(out->workspace->fill_bytes(0));
    p.workspace = out->workspace->data();
    p.workspace_bytes = bytes;
  }
  return Status::ok_status();
}

// One timed sample; ms per launch.
Result<double> time_once(Prepared& pr, bool gpu, EventTimer* timer) {
  if (!gpu) {
    const auto t0 = Clock::now();
    FLASHSCOPE_RETURN_IF_ERROR(prefill(pr.params));
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  FLASHSCOPE_RETURN_IF_ERROR(timer->start());
  for (int i = 0; i < pr.launches; ++i) FLASHSCOPE_RETURN_IF_ERROR(prefill(pr.params));
  FLASHSCOPE_RETURN_IF_ERROR(timer->stop());
  auto ms = timer->elapsed_ms();
  if (!ms.ok()) return ms.status();
  const double total = ms.value();
  // Short kernels: batch launches so a sample is not dominated by event resolution.
  if (total < kGpuMinSampleMs && pr.launches < 1024) pr.launches *= 2;
  return total / std::max(1, pr.launches);
}

// The CPU runs and captures of the lab use the engine's default team
// (physical cores, cpu_threads.hpp) but one: the UI thread keeps drawing at
// its frame rate while the lab loops. (An OpenMP thread count set here
// applies to parallel regions this thread starts.)
std::string limit_cpu_threads() {
  int threads = 1;
  const int cores = flashscope::cpu_threads().default_threads;
#ifdef _OPENMP
  threads = std::max(1, cores - 1);
  omp_set_num_threads(threads);
#endif
  return "CPU (" + std::to_string(threads) + " of " + std::to_string(cores) + " cores; one left to the UI)";
}

}  // namespace

LabConfig default_lab_config(bool gpu) {
  LabConfig c;
  if (gpu) {
    c.kernel = PrefillKernel::kAuto;
    c.shape = {1, 8, 8, 4096, 8192, 128, false};
  } else {
    c.shape = {1, 8, 8, 512, 512, 64, true};
  }
  return c;
}

std::vector<PrefillKernel> lab_kernels() {
  std::vector<PrefillKernel> out = lab::ladder_kernels();
  // Kernels outside the portable family, offered when this runtime knows them.
  for (const char* extra : {"hopper"}) {
    PrefillKernel k;
    if (parse_prefill_kernel(extra, &k) && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

KernelLab::~KernelLab() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KernelLab::run(const LabConfig& config) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    config_ = config;
    ++config_serial_;
    snap_.running = true;
    snap_.asked = config;
    snap_.error.clear();
  }
  if (!thread_.joinable()) thread_ = std::thread(&KernelLab::loop, this);
  wake_.notify_all();
}

void KernelLab::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  snap_.running = false;
}

void KernelLab::snapshot(LabSnapshot* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  *out = snap_;
}

void KernelLab::loop() {
  bool gpu = false;
  double sol = 0;
  std::string device;
  if (cuda_available()) {
    auto info = query_device(0);
    if (info.ok()) {
      gpu = true;
      sol = info.value().sol_tflops;
      device = info.value().name;
    }
  }
  if (!gpu) device = limit_cpu_threads();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.on_gpu = gpu;
    snap_.device = device;
    snap_.sol_tflops = sol;
  }
  std::optional<EventTimer> timer;
  if (gpu) timer.emplace();
  Prepared pr;
  uint64_t prepared_serial = 0;
  Clock::time_point next_capture;
  SyntheticShape stats_shape;  // per-kernel stats are for one shape; a new shape starts them over

  while (true) {
    LabConfig config;
    uint64_t serial = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || snap_.running; });
      if (quit_) return;
      config = config_;
      serial = config_serial_;
    }

    if (serial != prepared_serial) {
      const Status s = prepare(config, gpu, &pr);
      prepared_serial = serial;
      next_capture = Clock::now();
      std::lock_guard<std::mutex> lock(mutex_);
      snap_.shape = pr.shape;
      snap_.kernel = gpu ? prefill_kernel_name(resolve_prefill_kernel(pr.params)) : "cpu-tiled";
      snap_.flops = prefill_flops(pr.params);
      snap_.limit_note.clear();
      if (pr.shape.q_len != config.shape.q_len || pr.shape.q_heads != config.shape.q_heads ||
          pr.shape.batch != config.shape.batch) {
        snap_.limit_note = "CPU: " + shape_label(config.shape) + " reduced to " + shape_label(pr.shape) +
                           " so one run stays near a tenth of a second";
      }
      const SyntheticShape& a = stats_shape;
      const SyntheticShape& b = pr.shape;
      if (a.batch != b.batch || a.q_heads != b.q_heads || a.kv_heads != b.kv_heads || a.q_len != b.q_len ||
          a.kv_len != b.kv_len || a.head_dim != b.head_dim || a.causal != b.causal) {
        snap_.per_kernel.clear();
        snap_.tflops.values.clear();
        stats_shape = b;
      }
      if (!s.ok()) {
        snap_.error = s.to_string();
        snap_.running = false;
        continue;
      }
    }

    auto ms = time_once(pr, gpu, timer ? &*timer : nullptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!ms.ok()) {
        snap_.error = ms.status().to_string();
        snap_.running = false;
        continue;
      }
      const double tflops = viz::prefill_rate(snap_.flops, ms.value(), sol).value;
      ++snap_.runs;
      snap_.last_ms = ms.value();
      snap_.tflops.push(static_cast<float>(tflops));
      auto it = std::find_if(snap_.per_kernel.begin(), snap_.per_kernel.end(),
                             [&](const LabKernelStats& k) { return k.kernel == snap_.kernel; });
      if (it == snap_.per_kernel.end()) it = snap_.per_kernel.insert(snap_.per_kernel.end(), {snap_.kernel, {}});
      it->tflops.push(static_cast<float>(tflops));
    }

    if (Clock::now() >= next_capture) {
      CaptureRequest rq;
      rq.shape = pr.shape;
      rq.seed = 1;
      rq.head = 0;
      rq.try_gpu = gpu;
      rq.kernel = config.kernel;
      rq.cpu_max_flops = kLabCpuMaxFlops;
      const auto t0 = Clock::now();
      CaptureOutcome c = capture_prefill(rq);
      // Captures (probes on, records copied) must stay a small share of the loop's time.
      next_capture = Clock::now() + std::max<Clock::duration>(kCaptureEvery, 4 * (Clock::now() - t0));
      std::lock_guard<std::mutex> lock(mutex_);
      if (c.status.ok()) {
        snap_.trace = std::make_shared<const Trace>(std::move(c.trace));
        ++snap_.trace_serial;
        snap_.trace_note = c.note;
      } else {
        snap_.trace_note = "capture failed: " + c.status.to_string();
      }
    }
    std::this_thread::sleep_for(gpu ? kGpuPause : kCpuPause);
  }
}

}  // namespace flashscope::app
