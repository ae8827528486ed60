// cpu_threads() (flashscope/cpu_threads.hpp) from given facts, so a test can
// hand it a machine it does not run on.
#pragma once

#include <string>
#include <vector>

#include "flashscope/cpu_threads.hpp"

namespace flashscope::cpu {

// topology_root: a directory laid out as /sys/devices/system/cpu (cpuN/
// topology/core_cpus_list or thread_siblings_list); "" or unreadable: each
// allowed CPU counts as a core. allowed: the CPU numbers of the affinity
// mask. quota_cpus: the cgroup quota rounded up, 0 for none.
// omp_num_threads, wait_policy, spin_count: OMP_NUM_THREADS's,
// OMP_WAIT_POLICY's and GOMP_SPINCOUNT's text, null when unset.
CpuThreads cpu_threads_from(const std::string& topology_root, const std::vector<int>& allowed, int online,
                            int quota_cpus, const char* omp_num_threads, const char* wait_policy = nullptr,
                            const char* spin_count = nullptr);

}  // namespace flashscope::cpu
