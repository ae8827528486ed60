#include "platform/paths.hpp"

#include <fstream>

#include "flashscope/repo_file.hpp"

namespace flashscope::app {

std::string find_font(const std::string& file_name) {
  const std::string shipped = find_repo_file("assets/fonts/" + file_name);
  if (!shipped.empty()) return shipped;
  const std::string system = "/usr/share/fonts/truetype/dejavu/" + file_name;
  return std::ifstream(system).good() ? system : "";
}

}  // namespace flashscope::app
