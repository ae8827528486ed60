// The load-time NaN/inf check of a model's weights (ModelOptions::check_weights).
#pragma once

#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"

namespace flashscope::model {

// check_tensor_finite() on every tensor of the file, unless `when` says the
// file was checked already (kNewFiles: by this process, same path, size and
// modification time) or never to check.
Status check_weights_finite(const GgufFile& file, WeightCheck when);

}  // namespace flashscope::model
