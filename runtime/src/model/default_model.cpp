// find_default_model(): the search the CLI and the app share (model.hpp).
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "flashscope/model.hpp"

namespace flashscope {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string find_default_model() {
  std::vector<std::string> candidates;
  const std::string rel = std::string("assets/models/") + kDefaultModelFile;
  if (const char* dir = std::getenv("FLASHSCOPE_MODEL_DIR"); dir && *dir)
    candidates.push_back(std::string(dir) + "/" + kDefaultModelFile);
  candidates.push_back(rel);
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    std::string dir = parent_dir(exe);
    for (int depth = 0; depth < 8; ++depth) {
      candidates.push_back(dir + "/" + rel);
      if (dir == "/") break;
      dir = parent_dir(dir);
    }
  }
  for (const std::string& c : candidates)
    if (std::ifstream(c).good()) return c;
  return "";
}

}  // namespace flashscope
