// The lab in a build without CUDA: no kernels to install.
#include "flashscope_lab/lab.hpp"

namespace flashscope::lab {

bool ladder_available() { return false; }

}  // namespace flashscope::lab
