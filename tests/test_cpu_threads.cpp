// The CPU engine's default thread count (issue #25): the physical cores the
// process may run on (SMT siblings once), at most kDefaultThreadsCap and the
// cgroup quota, OMP_NUM_THREADS where the user set it. Machines this test does
// not run on are described by a made-up /sys/devices/system/cpu tree.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_threads.hpp"
#include "flashscope/cpu_threads.hpp"
#include "flashscope/model.hpp"

namespace fs = std::filesystem;
using flashscope::CpuThreads;
using flashscope::kDefaultThreadsCap;
using flashscope::cpu::cpu_threads_from;

namespace {

// A topology tree of `cores` cores with `smt` threads each, numbered as Linux
// does on x86 (core c's siblings are c, c + cores, ...); removed on exit.
struct FakeTopology {
  fs::path root;
  FakeTopology(int cores, int smt, const char* file = "core_cpus_list") {
    const char* tmp = std::getenv("TMPDIR");
    root = fs::path(tmp && *tmp ? tmp : "/tmp") /
           ("flashscope_cpu_threads_" + std::to_string(::getpid()) + "_" + std::to_string(cores) + "_" +
            std::to_string(smt) + "_" + file);
    for (int c = 0; c < cores; ++c) {
      std::string list;
      for (int s = 0; s < smt; ++s) list += (s ? "," : "") + std::to_string(c + s * cores);
      for (int s = 0; s < smt; ++s) {
        const fs::path dir = root / ("cpu" + std::to_string(c + s * cores)) / "topology";
        fs::create_directories(dir);
        std::ofstream(dir / file) << list << "\n";
      }
    }
  }
  ~FakeTopology() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

std::vector<int> range(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("cpu threads: SMT siblings count once, and the default is the physical cores") {
  const FakeTopology smt2(4, 2);  // 8 CPUs: cores {0,4} {1,5} {2,6} {3,7}
  const CpuThreads all = cpu_threads_from(smt2.root.string(), range(8), 8, 0, nullptr);
  CHECK(all.online == 8);
  CHECK(all.allowed == 8);
  CHECK(all.physical_cores == 4);
  CHECK(all.default_threads == 4);
  CHECK_FALSE(all.from_environment);

  // taskset -c 0,4: both siblings of one core.
  const CpuThreads siblings = cpu_threads_from(smt2.root.string(), {0, 4}, 8, 0, nullptr);
  CHECK(siblings.allowed == 2);
  CHECK(siblings.physical_cores == 1);
  CHECK(siblings.default_threads == 1);

  // taskset -c 0-2: three CPUs of three cores.
  CHECK(cpu_threads_from(smt2.root.string(), {0, 1, 2}, 8, 0, nullptr).default_threads == 3);

  // Older kernels name the list thread_siblings_list.
  const FakeTopology old(4, 2, "thread_siblings_list");
  CHECK(cpu_threads_from(old.root.string(), range(8), 8, 0, nullptr).physical_cores == 4);
}

TEST_CASE("cpu threads: bounded by the cap and the cgroup quota, never above the allowed CPUs") {
  const FakeTopology big(96, 2);
  const CpuThreads t = cpu_threads_from(big.root.string(), range(192), 192, 0, nullptr);
  CHECK(t.physical_cores == 96);
  CHECK(t.default_threads == kDefaultThreadsCap);

  const FakeTopology four(4, 1);
  CHECK(cpu_threads_from(four.root.string(), range(4), 4, 2, nullptr).default_threads == 2);  // docker --cpus 1.5
  CHECK(cpu_threads_from(four.root.string(), range(4), 4, 8, nullptr).default_threads == 4);

  // No readable topology: each allowed CPU is a core.
  const CpuThreads blind = cpu_threads_from("/nonexistent/flashscope", {3, 5, 9}, 16, 0, nullptr);
  CHECK(blind.physical_cores == 3);
  CHECK(blind.default_threads == 3);
  CHECK(blind.online == 16);
}

TEST_CASE("cpu threads: OMP_NUM_THREADS is the user's choice, read as libgomp does") {
  const FakeTopology smt2(4, 2);
  const std::string root = smt2.root.string();
  const CpuThreads six = cpu_threads_from(root, range(8), 8, 0, "6");
  CHECK(six.default_threads == 6);  // more than the cores: asked for
  CHECK(six.from_environment);
  CHECK(cpu_threads_from(root, range(8), 8, 0, "64").default_threads == 64);  // above the cap: asked for
  CHECK(cpu_threads_from(root, range(8), 8, 0, "3,2").default_threads == 3);  // nested teams: the outer one
  CHECK(cpu_threads_from(root, range(8), 8, 0, "99999999").default_threads == flashscope::kMaxThreads);
  for (const char* ignored : {"", "0", "-2", "four", "4x"}) {
    const CpuThreads t = cpu_threads_from(root, range(8), 8, 0, ignored);
    CHECK_MESSAGE(t.default_threads == 4, "OMP_NUM_THREADS=" << ignored);
    CHECK_FALSE(t.from_environment);
  }
}

TEST_CASE("cpu threads: this machine's answer is consistent") {
  const CpuThreads& t = flashscope::cpu_threads();
  CHECK(t.allowed >= 1);
  CHECK(t.allowed <= t.online);
  CHECK(t.physical_cores >= 1);
  CHECK(t.physical_cores <= t.allowed);
  if (!t.from_environment) {
    CHECK(t.default_threads >= 1);
    CHECK(t.default_threads <= t.physical_cores);
    CHECK(t.default_threads <= kDefaultThreadsCap);
  }
}

TEST_CASE("cpu threads: the OpenMP wait policy is read as libgomp reads it") {
  using flashscope::OpenMpWait;
  const FakeTopology one(2, 1);
  const std::string root = one.root.string();
  auto wait = [&](const char* policy, const char* spin) {
    return cpu_threads_from(root, range(2), 2, 0, nullptr, policy, spin).wait;
  };
  CHECK(wait(nullptr, nullptr) == OpenMpWait::kSpin);  // libgomp's default
  CHECK(wait("passive", nullptr) == OpenMpWait::kSleep);
  CHECK(wait("PASSIVE", nullptr) == OpenMpWait::kSleep);
  CHECK(wait("active", nullptr) == OpenMpWait::kSpin);
  CHECK(wait(nullptr, "0") == OpenMpWait::kSleep);
  CHECK(wait("passive", "1000") == OpenMpWait::kSpin);  // GOMP_SPINCOUNT sets the polls either way
  CHECK(wait("active", "0") == OpenMpWait::kSleep);
}
