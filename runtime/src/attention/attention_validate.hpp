// The checks validate(PrefillParams) and validate(PagedAttentionParams)
// share: the sliding window and the soft-cap mean the same in both.
#pragma once

#include <cmath>

#include "flashscope/attention.hpp"
#include "flashscope/status.hpp"

namespace flashscope {

// q, k, v or o ([batch, seq, heads, head_dim] through its strides): data
// set, strides positive (the batch stride where batch_stride_read), head_dim
// contiguous and no two vectors overlapping, and on CUDA the 16-byte
// alignment cp.async needs (the batch stride's where batch_stride_aligned).
// kInvalidArgument naming the tensor: validate(PrefillParams) and
// validate(PagedAttentionParams) both check their tensors here.
Status check_attn_tensor(const char* name, const AttnTensor& t, int head_dim, Device device, bool batch_stride_read,
                         bool batch_stride_aligned);

// What every attention call is checked for first, for validate(PrefillParams)
// and validate(PagedAttentionParams) alike: the dtype (bf16 or fp16; `api`
// names the call in the message), a known device, head_dim supported on it,
// batch >= 1, q_heads a multiple of kv_heads. kUnsupported or
// kInvalidArgument naming the field.
Status check_attention_shape(const char* api, DType dtype, Device device, int head_dim, int batch, int q_heads,
                             int kv_heads);

// softmax_scale finite and >= 0 (0 selects 1/sqrt(head_dim)).
Status check_softmax_scale(float softmax_scale);

// window_left / window_right >= -1 (-1: unbounded), window_right <= 0 when
// causal, softcap finite and >= 0 (0: off). kInvalidArgument naming the field.
Status check_window_softcap(int window_left, int window_right, float softcap, bool causal);

// Whether a call runs the kernels built for a sliding window or a soft-cap
// (a causal call's window_right of 0 is causal itself): the CUDA prefill,
// paged attention and the GPU trace capture all decide it here.
inline bool needs_mods(int window_left, int window_right, float softcap, bool causal) {
  return window_left >= 0 || (!causal && window_right >= 0) || softcap > 0.0f;
}
// The same for PrefillParams or PagedAttentionParams.
template <typename Params>
bool needs_mods(const Params& p) {
  return needs_mods(p.window_left, p.window_right, p.softcap, p.causal);
}

// The softmax scale a call runs with: its own, or 1/sqrt(head_dim) when it
// leaves softmax_scale at 0 (PrefillParams, PagedAttentionParams).
template <typename Params>
float effective_softmax_scale(const Params& p) {
  return p.softmax_scale > 0.0f ? p.softmax_scale : 1.0f / std::sqrt(float(p.head_dim));
}

}  // namespace flashscope
