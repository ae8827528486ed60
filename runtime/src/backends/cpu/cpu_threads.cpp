// cpu_threads() (flashscope/cpu_threads.hpp): the machine's topology as this
// process sees it, and the engine's default team size.
//
// Why physical cores: the matmuls are bound by each core's vector units and
// the weights' memory traffic, which two SMT siblings share, while every
// extra thread adds to each of a step's ~180 barriers. Why the affinity mask
// and the cgroup quota: a process under taskset or in a container with
// --cpus 2 that starts a thread per machine CPU has threads that can only
// wait for each other's time slices at every barrier.
#include "backends/cpu/cpu_threads.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/model.hpp"
#include "util/math.hpp"

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

namespace flashscope {
namespace {

// OMP_NUM_THREADS's first value ("8" or "8,4" for nested teams), as libgomp
// reads it; 0 when unset or not a positive number (libgomp ignores it then).
int parse_omp_num_threads(const char* s) {
  if (s == nullptr) return 0;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || v <= 0) return 0;
  while (*end == ' ' || *end == '\t') ++end;
  if (*end != '\0' && *end != ',') return 0;
  return static_cast<int>(std::min<long>(v, kMaxThreads));
}

bool read_first_line(const std::string& path, std::string* line) {
  std::ifstream f(path);
  return static_cast<bool>(std::getline(f, *line));
}

// The first CPU of a topology list ("0-1", "3,67"): the same for every SMT
// sibling of one core, different for every core.
int first_cpu(const std::string& list) {
  char* end = nullptr;
  const long v = std::strtol(list.c_str(), &end, 10);
  return end == list.c_str() ? -1 : static_cast<int>(v);
}

// Distinct cores among `cpus`; 0 when the topology is not readable.
int physical_cores(const std::string& root, const std::vector<int>& cpus) {
  std::set<int> cores;
  for (const int cpu : cpus) {
    const std::string dir = root + "/cpu" + std::to_string(cpu) + "/topology/";
    std::string list;
    if (!read_first_line(dir + "core_cpus_list", &list) && !read_first_line(dir + "thread_siblings_list", &list))
      return 0;
    const int first = first_cpu(list);
    if (first < 0) return 0;
    cores.insert(first);
  }
  return static_cast<int>(cores.size());
}

// What libgomp makes of OMP_WAIT_POLICY and GOMP_SPINCOUNT: "passive"
// (any case) sleeps at once, a GOMP_SPINCOUNT of 0 too, and GOMP_SPINCOUNT
// wins where both are set.
OpenMpWait parse_wait(const char* policy, const char* spin_count) {
  if (spin_count != nullptr) {
    char* end = nullptr;
    const long long v = std::strtoll(spin_count, &end, 10);
    if (end != spin_count) return v == 0 ? OpenMpWait::kSleep : OpenMpWait::kSpin;
  }
  if (policy == nullptr) return OpenMpWait::kSpin;
  std::string p(policy);
  for (char& c : p) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return p.rfind("passive", 0) == 0 ? OpenMpWait::kSleep : OpenMpWait::kSpin;
}

#if defined(__linux__)
// The CPU quota of this process's cgroup and of those above it, rounded up
// (a quota of 1.5 CPUs lets two threads run half the time each); 0: none.
// cgroup v2 (cpu.max: "max 100000" or "150000 100000") and v1
// (cpu.cfs_quota_us, -1 for none, and cpu.cfs_period_us).
int cgroup_quota_cpus() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  int best = 0;
  auto take = [&best](long long quota, long long period) {
    if (quota <= 0 || period <= 0) return;
    const int cpus = static_cast<int>(std::min<long long>(ceil_div(quota, period), INT_MAX));
    best = best == 0 ? cpus : std::min(best, cpus);
  };
  while (std::getline(f, line)) {
    // "hierarchy-id:controllers:path"
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    std::string root;
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    if (v2) {
      root = "/sys/fs/cgroup";
    } else if (controllers == "cpu" || controllers == "cpu,cpuacct" || controllers == "cpuacct,cpu") {
      root = "/sys/fs/cgroup/" + controllers;
    } else {
      continue;
    }
    // The process's own group, then each one above it up to the mount's root.
    while (true) {
      const std::string dir = root + (path == "/" ? "" : path);
      std::string text;
      if (v2) {
        if (read_first_line(dir + "/cpu.max", &text) && text.compare(0, 3, "max") != 0) {
          long long q = 0, p = 0;
          if (std::sscanf(text.c_str(), "%lld %lld", &q, &p) == 2) take(q, p);
        }
      } else {
        std::string period;
        if (read_first_line(dir + "/cpu.cfs_quota_us", &text) && read_first_line(dir + "/cpu.cfs_period_us", &period))
          take(std::atoll(text.c_str()), std::atoll(period.c_str()));
      }
      if (path.empty() || path == "/") break;
      const size_t slash = path.find_last_of('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return best;
}
#endif

CpuThreads read_cpu_threads() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  const long online_l = sysconf(_SC_NPROCESSORS_ONLN);
  const int online = online_l > 0 ? static_cast<int>(online_l) : hw;
  std::vector<int> allowed;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mask)) allowed.push_back(cpu);
  }
  if (allowed.empty())
    for (int cpu = 0; cpu < online; ++cpu) allowed.push_back(cpu);
  return cpu::cpu_threads_from("/sys/devices/system/cpu", allowed, online, cgroup_quota_cpus(),
                               std::getenv("OMP_NUM_THREADS"), std::getenv("OMP_WAIT_POLICY"),
                               std::getenv("GOMP_SPINCOUNT"));
#else
  std::vector<int> allowed(static_cast<size_t>(hw));
  for (int cpu = 0; cpu < hw; ++cpu) allowed[static_cast<size_t>(cpu)] = cpu;
  return cpu::cpu_threads_from("", allowed, hw, 0, std::getenv("OMP_NUM_THREADS"), std::getenv("OMP_WAIT_POLICY"),
                               std::getenv("GOMP_SPINCOUNT"));
#endif
}

}  // namespace

namespace cpu {

CpuThreads cpu_threads_from(const std::string& topology_root, const std::vector<int>& allowed, int online,
                            int quota_cpus, const char* omp_num_threads, const char* wait_policy,
                            const char* spin_count) {
  CpuThreads t;
  t.wait = parse_wait(wait_policy, spin_count);
  t.allowed = std::max(1, static_cast<int>(allowed.size()));
  t.online = std::max(online, t.allowed);
  const int cores = topology_root.empty() ? 0 : physical_cores(topology_root, allowed);
  t.physical_cores = cores > 0 ? std::min(cores, t.allowed) : t.allowed;
  t.quota_cpus = std::max(0, quota_cpus);
  const int env = parse_omp_num_threads(omp_num_threads);
  if (env > 0) {
    t.default_threads = env;
    t.from_environment = true;
  } else {
    int n = std::min(t.physical_cores, kDefaultThreadsCap);
    if (t.quota_cpus > 0) n = std::min(n, t.quota_cpus);
    t.default_threads = std::max(1, n);
  }
  return t;
}

}  // namespace cpu

const CpuThreads& cpu_threads() {
  static const CpuThreads t = read_cpu_threads();
  return t;
}

}  // namespace flashscope
