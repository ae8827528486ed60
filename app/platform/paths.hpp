// Where the app finds its files. The default model: flashscope::find_default_model()
// (the runtime's rule, shared with the CLI). The UI font: a repo-relative path
// such as assets/fonts/X is looked up under the current directory and every
// parent of the executable's directory, so a build tree inside the repo finds
// the repo's assets/.
#pragma once

#include <string>
#include <vector>

namespace flashscope::app {

// Candidates for `relative` (e.g. "assets/fonts/DejaVuSans.ttf"), most specific first.
std::vector<std::string> repo_relative_candidates(const std::string& relative);

// A font file by name: assets/fonts/ (a font shipped with the repo wins),
// then Debian's fonts-dejavu-core folder. "" when not found.
std::string find_font(const std::string& file_name);

bool file_exists(const std::string& path);

}  // namespace flashscope::app
