// A scratch file name for one test process: $TMPDIR (or /tmp), then
// flashscope_<prefix>_<pid>_<name>. The pid keeps two test runs on one machine
// (a CI clone beside a working tree, two worktrees) from writing each other's
// files.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace flashscope::testing {

inline std::string temp_path(const std::string& prefix, const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/flashscope_" + prefix + "_" + std::to_string(::getpid()) + "_" +
         name;
}

}  // namespace flashscope::testing
