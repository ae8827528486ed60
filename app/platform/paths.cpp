#include "platform/paths.hpp"

#include <unistd.h>

#include <climits>
#include <fstream>

namespace flashscope::app {

namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

bool file_exists(const std::string& path) { return !path.empty() && std::ifstream(path).good(); }

std::vector<std::string> repo_relative_candidates(const std::string& relative) {
  std::vector<std::string> out;
  out.push_back(relative);
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    std::string dir = parent_dir(exe);
    for (int depth = 0; depth < 8; ++depth) {
      out.push_back(dir + "/" + relative);
      if (dir == "/") break;
      dir = parent_dir(dir);
    }
  }
  return out;
}

std::string find_font(const std::string& file_name) {
  for (const std::string& c : repo_relative_candidates("assets/fonts/" + file_name)) {
    if (file_exists(c)) return c;
  }
  const std::string system = "/usr/share/fonts/truetype/dejavu/" + file_name;
  return file_exists(system) ? system : "";
}

}  // namespace flashscope::app
