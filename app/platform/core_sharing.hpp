// How the app shares a small machine's cores with the CPU engine: the two
// settings main() makes before anything else starts (core_sharing.cpp says
// why each, with what it measured). Both keep a value the user set.
#pragma once

namespace flashscope::app {

// On up to 4 CPUs, sets OMP_WAIT_POLICY=passive and starts the app again
// (libgomp reads it only when it loads); returns when it did not.
void prefer_sleeping_openmp_threads(char** argv);

// A quarter of the cores for Mesa's software rasterizer (LP_NUM_THREADS).
void share_cores_with_software_gl();

}  // namespace flashscope::app
