// CUDA backend of append_kv(): one kernel launch on p.stream.
#include "backends/cuda/append_kv_cuda.hpp"

#include <string>

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/kv/append_kv.h"
#endif

namespace flashscope::cuda {

#if FLASHSCOPE_WITH_CUDA

Status append_kv(const AppendKvParams& p) {
  kernels::AppendKvKernelParams k{};
  k.k_new = p.k_new.data;
  k.v_new = p.v_new.data;
  k.k_seq_stride = p.k_new.seq_stride;
  k.k_head_stride = p.k_new.head_stride;
  k.v_seq_stride = p.v_new.seq_stride;
  k.v_head_stride = p.v_new.head_stride;
  k.slots = p.slots;
  k.k_pages = p.k_pages;
  k.v_pages = p.v_pages;
  k.num_tokens = p.num_tokens;
  k.kv_heads = p.kv_heads;
  k.head_dim = p.head_dim;
  k.page_size = p.page_size;
  k.num_slots = int64_t{p.num_pages} * p.page_size;
  const cudaError_t err = kernels::launch_append_kv(k, static_cast<cudaStream_t>(p.stream));
  if (err != cudaSuccess) return device_error(std::string("append_kv launch failed: ") + cudaGetErrorString(err));
  return {};
}

#else  // built without CUDA

Status append_kv(const AppendKvParams&) {
  return unsupported("this build of flashscope has no CUDA backend; use Device::kCpu");
}

#endif

}  // namespace flashscope::cuda
