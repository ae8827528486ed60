// Tensor views for attention: a pointer plus strides, never an owner.
//
// Attention tensors are logically [batch, seq, heads, head_dim]. The strides
// (in elements, not bytes) say where each axis lives, so one view type covers
//   BSHD (token-major, the engine's layout): batch = S*H*D, seq = H*D, head = D
//   BHSD (PyTorch's layout):                 batch = H*S*D, seq = D,   head = S*D
// head_dim itself must be contiguous (stride 1): the kernels move 16-byte
// vectors along it.
#pragma once

#include <cstdint>

namespace flashscope {

enum class DType : uint8_t { kBF16, kFP16, kFP32 };

inline int dtype_size(DType t) { return t == DType::kFP32 ? 4 : 2; }
const char* dtype_name(DType t);

// Where a pointer lives. Attention calls run on the backend of their tensors.
enum class Device : uint8_t { kCpu, kCuda };

struct AttnTensor {
  void* data = nullptr;
  int64_t batch_stride = 0;  // ignored for varlen (packed) tensors
  int64_t seq_stride = 0;
  int64_t head_stride = 0;
};

// Contiguous [batch, seq, heads, head_dim].
inline AttnTensor bshd(void* data, int64_t seq, int64_t heads, int64_t head_dim) {
  return {data, seq * heads * head_dim, heads * head_dim, head_dim};
}
// Contiguous [batch, heads, seq, head_dim].
inline AttnTensor bhsd(void* data, int64_t seq, int64_t heads, int64_t head_dim) {
  return {data, heads * seq * head_dim, head_dim, seq * head_dim};
}

}  // namespace flashscope
