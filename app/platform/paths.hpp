// Where the app finds its files. The default model: flashscope::find_default_model(),
// the UI font: flashscope::find_repo_file() (both the runtime's, shared with the CLI).
#pragma once

#include <string>

namespace flashscope::app {

// A font file by name: assets/fonts/ (a font shipped with the repo wins),
// then Debian's fonts-dejavu-core folder. "" when not found.
std::string find_font(const std::string& file_name);

}  // namespace flashscope::app
