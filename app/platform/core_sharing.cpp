#include "platform/core_sharing.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "flashscope/openmp_wait.hpp"

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
// run faster on 2 cores (bench/TUNING.md#cpu); the runtime's helper says
// when and how (openmp_wait.hpp).
void prefer_sleeping_openmp_threads(char** argv) { flashscope::restart_with_sleeping_openmp_threads(argv); }

}  // namespace flashscope::app
