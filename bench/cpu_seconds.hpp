// The process's CPU time in seconds (every thread's), for the CPU kernel
// benchmarks that report CPU time beside wall time (a shared machine's load
// moves the wall clock, not this).
#pragma once

#include <time.h>

inline double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
