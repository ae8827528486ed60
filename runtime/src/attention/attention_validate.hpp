// The checks validate(PrefillParams) and validate(PagedAttentionParams)
// share: the sliding window and the soft-cap mean the same in both.
#pragma once

#include "flashscope/status.hpp"

namespace flashscope {

// window_left / window_right >= -1 (-1: unbounded), window_right <= 0 when
// causal, softcap finite and >= 0 (0: off). kInvalidArgument naming the field.
Status check_window_softcap(int window_left, int window_right, float softcap, bool causal);

}  // namespace flashscope
