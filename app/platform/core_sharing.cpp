#include "platform/core_sharing.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace flashscope::app {

// Without a GPU, OpenGL is Mesa's llvmpipe, whose rasterizer starts a thread
// per core; on a small machine a heavy dashboard view then takes every core
// from the CPU engine and the answer nearly stalls; a quarter of the cores
// for it keeps the chat streaming (bench/TUNING.md#cpu). Hardware drivers
// ignore the variable, and a value the user set is kept.
void share_cores_with_software_gl() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = std::to_string(std::max(1u, cores / 4));
  setenv("LP_NUM_THREADS", threads.c_str(), /*overwrite=*/0);
}

// GCC's OpenMP lets a thread that reaches a barrier spin (~300k polls)
// before it sleeps. The CPU engine's team is as large as the machine (the
// UI's threads count as its own, see cpu_load.hpp), so on a small machine
// the UI thread or the rasterizer preempts a member at almost every barrier
// while the others spin on the cores those two need. With
// OMP_WAIT_POLICY=passive (threads sleep at once) both the UI and the engine
// run faster on 2 cores; the engine alone (flashscope-cli, no window) is
// slower with it, so it is the app's choice, not the library's
// (bench/TUNING.md#cpu). libgomp reads the variable when it
// loads, before main(), so the app sets it and starts itself again. Only
// on up to 4 hardware threads, where it was measured (with cores to spare,
// spinning makes a barrier cheaper), and never over a value the user set.
void prefer_sleeping_openmp_threads(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::thread::hardware_concurrency() > 4) return;
  // The binary's own path, not /proc/self/exe: the process keeps its name (ps, pgrep, perf).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/1);
  execv(self, argv);  // returns only if it failed: then go on as we are
}

}  // namespace flashscope::app
