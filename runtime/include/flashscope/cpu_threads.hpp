// The CPUs this process may run on, and how many threads the CPU engine
// takes when ModelOptions::threads is 0.
//
//   const flashscope::CpuThreads& t = flashscope::cpu_threads();
//   printf("%d physical cores of %d allowed CPUs: %d threads\n", t.physical_cores, t.allowed, t.default_threads);
#pragma once

namespace flashscope {

// The default team is at most this many threads, unless OMP_NUM_THREADS asks
// for more: a decode step of a small model is ~180 fork/joins, each barrier
// costs more with every thread, and memory bandwidth stops growing long
// before a large server's core count.
inline constexpr int kDefaultThreadsCap = 32;

// How the OpenMP threads of a team wait at a barrier, as libgomp read this
// process's environment when it loaded (it reads it only then).
enum class OpenMpWait {
  kSpin,   // libgomp's default: ~300k polls (a few ms) before sleeping
  kSleep,  // OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=0: sleep at once
};

struct CpuThreads {
  int online = 0;          // online logical CPUs
  int allowed = 0;         // of them, in this process's affinity mask (taskset, cpusets)
  int physical_cores = 0;  // distinct cores among the allowed CPUs: SMT siblings count once
  int quota_cpus = 0;      // the cgroup's CPU quota rounded up (docker --cpus); 0: none
  // physical_cores, at most the quota and kDefaultThreadsCap, at least 1; or
  // OMP_NUM_THREADS where it is set (at most kMaxThreads). The engine takes
  // fewer while other programs keep cores busy (ModelOptions::threads).
  int default_threads = 1;
  bool from_environment = false;  // default_threads is OMP_NUM_THREADS
  OpenMpWait wait = OpenMpWait::kSpin;
};

// Read once per process (Linux: sched_getaffinity, /sys/devices/system/cpu
// topology, the cgroup's cpu.max; elsewhere std::thread::hardware_concurrency
// for every field; OMP_* variables from the environment). Never fails: what cannot be read counts each allowed CPU
// as a core.
const CpuThreads& cpu_threads();

}  // namespace flashscope
