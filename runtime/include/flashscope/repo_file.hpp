// The search the tools share for a file of the repository: the default model
// (find_default_model() in model.hpp), the app's fonts.
#pragma once

#include <string>

namespace flashscope {

// The first existing of `relative` (e.g. "assets/fonts/DejaVuSans.ttf")
// under the current directory, then under the running executable's
// directory or any parent, so a build tree inside the repository finds the
// repository's assets/. Empty when none exists.
std::string find_repo_file(const std::string& relative);

}  // namespace flashscope
