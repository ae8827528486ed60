// How many threads a CPU forward pass should use, given what else the
// machine is doing.
//
// Why: a forward pass is ~180 fork/joins per token (every matmul and every
// attention call ends in a barrier). On an idle machine each costs a few µs
// and every core helps. When other programs keep the cores busy, one of our
// threads is preempted at almost every barrier and the others wait a whole
// scheduler time slice, so a decode step on two busy cores is many times
// slower than on one (bench/TUNING.md#cpu). So the team size follows the load.
//
// How: every ~200 ms (checked at each forward call, never blocking) the
// advisor reads the busy time of the CPUs this process may run on
// (/proc/stat, per-CPU lines of the affinity mask) and subtracts this
// process's own CPU time: the rest is other programs' load, in cores. Team
// size = allowed CPUs − that load (rounded up past a 0.25-core noise floor),
// at least 1, at most the idle machine's team. Before the first interval the
// number of runnable tasks (procs_running) gives a first guess. Where /proc
// is not readable (not Linux) the advisor always answers the maximum.
// Threads of the host program other than the engine's count as the
// engine's own, so they do not shrink the team.
#pragma once

#include <cstdint>

namespace flashscope::cpu {

class ThreadAdvisor {
 public:
  // The team size for the next forward pass; max_threads is the team on an
  // idle machine (cpu_threads().default_threads).
  int advise(int max_threads);
  // Other programs' load over the last interval, in cores (-1: unknown).
  double foreign_load() const { return foreign_cores_; }

 private:
  struct Sample {
    double wall_s = 0;     // steady clock
    double own_cpu_s = 0;  // this process's CPU time
    double busy_s = 0;     // busy time of the allowed CPUs
    bool ok = false;
  };
  static Sample take_sample();

  Sample last_;
  int allowed_cpus_ = 0;
  int advice_ = 0;  // 0: not decided yet
  double foreign_cores_ = -1.0;
};

}  // namespace flashscope::cpu
