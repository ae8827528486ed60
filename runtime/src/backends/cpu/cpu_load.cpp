// ThreadAdvisor (see cpu_load.hpp). Linux: /proc/stat and the affinity
// mask; elsewhere it always advises the maximum.
#include "backends/cpu/cpu_load.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sched.h>
#include <time.h>
#include <unistd.h>
#define FLASHSCOPE_PROC_STAT 1
#endif

namespace flashscope::cpu {
namespace {

constexpr double kIntervalS = 0.2;     // re-evaluate at most this often
constexpr double kNoiseCores = 0.25;   // foreign load below this is ignored

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#ifdef FLASHSCOPE_PROC_STAT
// Busy seconds of the CPUs in `mask` (and procs_running) from /proc/stat.
bool read_proc_stat(const cpu_set_t& mask, double* busy_s, int* procs_running) {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return false;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  char line[512];
  unsigned long long busy = 0;
  bool any = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    int cpu = -1;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice, &system, &idle,
                    &iowait, &irq, &softirq, &steal) >= 8) {
      if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &mask)) {
        busy += user + nice + system + irq + softirq + steal;
        any = true;
      }
    } else if (std::strncmp(line, "procs_running ", 14) == 0) {
      *procs_running = std::atoi(line + 14);
    }
  }
  std::fclose(f);
  *busy_s = static_cast<double>(busy) / tick;
  return any && tick > 0;
}
#endif

}  // namespace

ThreadAdvisor::Sample ThreadAdvisor::take_sample() {
  Sample s;
  s.wall_s = steady_seconds();
#ifdef FLASHSCOPE_PROC_STAT
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return s;
  int running = 0;
  if (!read_proc_stat(mask, &s.busy_s, &running)) return s;
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return s;
  s.own_cpu_s = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  s.ok = true;
#endif
  return s;
}

int ThreadAdvisor::advise(int max_threads) {
  if (max_threads <= 1) return 1;
#ifdef FLASHSCOPE_PROC_STAT
  if (advice_ == 0) {  // first call: a guess from the tasks runnable right now
    last_ = take_sample();
    cpu_set_t mask;
    CPU_ZERO(&mask);
    int running = 0;
    double busy = 0;
    if (!last_.ok || sched_getaffinity(0, sizeof mask, &mask) != 0 || !read_proc_stat(mask, &busy, &running)) {
      advice_ = -1;  // no /proc: always the maximum
      return max_threads;
    }
    allowed_cpus_ = CPU_COUNT(&mask);
    const int others = std::max(0, running - 1);  // procs_running counts this thread
    advice_ = std::clamp(allowed_cpus_ - others, 1, max_threads);
    return advice_;
  }
  if (advice_ < 0) return max_threads;
  if (steady_seconds() - last_.wall_s >= kIntervalS) {
    const Sample now = take_sample();
    if (!now.ok) return max_threads;
    const double dt = now.wall_s - last_.wall_s;
    foreign_cores_ = std::max(0.0, ((now.busy_s - last_.busy_s) - (now.own_cpu_s - last_.own_cpu_s)) / dt);
    const int taken = foreign_cores_ <= kNoiseCores ? 0 : static_cast<int>(std::ceil(foreign_cores_ - kNoiseCores));
    advice_ = std::max(1, allowed_cpus_ - taken);
    last_ = now;
  }
  return std::clamp(advice_, 1, max_threads);
#else
  return max_threads;
#endif
}

}  // namespace flashscope::cpu
