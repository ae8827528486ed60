// find_repo_file() and find_default_model(): the searches the CLI and the app share (repo_file.hpp, model.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "flashscope/model.hpp"
#include "flashscope/repo_file.hpp"

namespace flashscope {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A readable regular file, found without opening it: a FIFO would block the open.
bool is_readable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), R_OK) == 0;
}

}  // namespace

std::string find_repo_file(const std::string& relative) {
  if (relative.empty()) return "";  // else the executable's folder itself would count as found
  std::vector<std::string> candidates{relative};
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    std::string dir = parent_dir(exe);
    for (int depth = 0; depth < 8; ++depth) {
      candidates.push_back(dir + "/" + relative);
      if (dir == "/") break;
      dir = parent_dir(dir);
    }
  }
  for (const std::string& c : candidates)
    if (is_readable_file(c)) return c;
  return "";
}

std::string find_default_model() {
  if (const char* dir = std::getenv("FLASHSCOPE_MODEL_DIR"); dir && *dir) {
    const std::string in_dir = std::string(dir) + "/" + kDefaultModelFile;
    if (is_readable_file(in_dir)) return in_dir;
  }
  return find_repo_file(std::string("assets/models/") + kDefaultModelFile);
}

}  // namespace flashscope
