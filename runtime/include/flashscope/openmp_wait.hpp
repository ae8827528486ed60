// For a host program's main(), first thing: on a small machine, start the
// program again with OMP_WAIT_POLICY=passive so the CPU engine's OpenMP
// threads sleep at barriers instead of spinning. The app calls it (its UI
// threads compete with the engine's); the library itself never does (it
// changes the environment and replaces the process image, which is the host
// program's decision), and flashscope-cli does not: on a quiet small machine
// sleeping threads make decode slower (each barrier waits for a wake-up), so
// it pays only on a machine that stays loaded.
//
//   int main(int argc, char** argv) {
//     flashscope::restart_with_sleeping_openmp_threads(argv);  // returns when it did not
//     ...
//
// Why: a decode step is ~180 fork/joins. libgomp lets a waiting thread spin
// ~300k polls (a few ms) before it sleeps, which on an idle machine makes
// each barrier a few µs cheaper, and on a loaded small one makes the team's
// members spin on the cores the preempted member needs; on a quiet machine
// spinning wins instead (bench/TUNING.md#figures-moved-out-of-product-comments). Why a restart: libgomp reads the
// variable once, when it loads, before main() and before any code of ours
// (a setenv in main or in a constructor, even a .preinit_array one, comes
// too late or is lost).
//
// Only where the process may run on at most kSleepingOpenMpMaxCpus CPUs
// (where it was measured; with cores to spare a spinning barrier is cheaper),
// never over OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user, and only on
// Linux. The process keeps its pid, arguments, open files and name.
#pragma once

#include <cstdlib>

#include "flashscope/cpu_threads.hpp"

#if defined(__linux__)
#include <unistd.h>
#endif

namespace flashscope {

inline constexpr int kSleepingOpenMpMaxCpus = 4;

// Returns only when it did not restart (not needed, not Linux, or exec failed).
inline void restart_with_sleeping_openmp_threads(char** argv) {
#if defined(__linux__)
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (cpu_threads().allowed > kSleepingOpenMpMaxCpus) return;
  // The binary's own path, argv as given: the process keeps its name (ps, pgrep, perf).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  if (setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/1) != 0) return;
  execv(self, argv);
  unsetenv("OMP_WAIT_POLICY");  // exec failed: go on as we are, as the environment says
#else
  (void)argv;
#endif
}

}  // namespace flashscope
