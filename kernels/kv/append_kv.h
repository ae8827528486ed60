// Host entry to the append-KV kernel: writes new tokens' K and V rows into
// the paged pools. Plain parameters only; the runtime validates first.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashscope::kernels {

struct AppendKvKernelParams {
  const void* k_new;  // [num_tokens, kv_heads, head_dim] through k_seq_stride / k_head_stride
  const void* v_new;  // like k_new, through v_seq_stride / v_head_stride
  int64_t k_seq_stride, k_head_stride;  // elements, multiples of 8
  int64_t v_seq_stride, v_head_stride;
  const int64_t* slots;  // [num_tokens] page * page_size + offset; < 0 skips the token
  void* k_pages;         // [num_pages, kv_heads, page_size, head_dim]
  void* v_pages;         // like k_pages
  int num_tokens;
  int kv_heads;
  int head_dim;          // 64 or 128
  int page_size;         // a power of two
  int64_t num_slots;     // num_pages * page_size; slots at or past it are skipped; 0 = unchecked
};

// One CTA per token. Elements are 2 bytes (bf16 or fp16: a copy does not
// care which). Returns the launch's error.
cudaError_t launch_append_kv(const AppendKvKernelParams& p, cudaStream_t stream);

}  // namespace flashscope::kernels
