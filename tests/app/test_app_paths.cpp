// Where the app finds its files: the runtime's repository-file search
// (shared with the default model's lookup and the CLI), and the UI font.
#include <doctest/doctest.h>

#include <string>

#include "flashscope/repo_file.hpp"
#include "platform/paths.hpp"

TEST_CASE("app paths: a repository file is found from the build tree, a missing one is not") {
  // The tests run in the build tree, inside the repository: found above the executable.
  const std::string trace = flashscope::find_repo_file("assets/traces/cpu-example.fstrace");
  CHECK(trace.size() > std::string("assets/traces/cpu-example.fstrace").size());
  CHECK(trace.rfind("assets/traces/cpu-example.fstrace") == trace.size() - 33);
  CHECK(flashscope::find_repo_file("assets/no-such-file.bin").empty());
  CHECK(flashscope::find_repo_file("").empty());
}

TEST_CASE("app paths: the UI font, when there is one, is the file asked for") {
  const std::string font = flashscope::app::find_font("DejaVuSans.ttf");
  if (font.empty()) return;  // neither assets/fonts/ nor fonts-dejavu-core: the app falls back to ImGui's font
  CHECK(font.size() >= 14);
  CHECK(font.compare(font.size() - 14, 14, "DejaVuSans.ttf") == 0);
  CHECK(flashscope::app::find_font("NoSuchFont.ttf").empty());
}
