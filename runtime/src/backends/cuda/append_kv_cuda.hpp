// The CUDA side of append_kv(): maps validated AppendKvParams onto the
// kernel's plain parameters and launches on p.stream. In a build without
// CUDA it reports kUnsupported.
#pragma once

#include "flashscope/kv_cache.hpp"

namespace flashscope::cuda {

// p has passed append_kv's validation and p.num_tokens > 0.
Status append_kv(const AppendKvParams& p);

}  // namespace flashscope::cuda
