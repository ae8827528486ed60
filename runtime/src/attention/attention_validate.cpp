// validate(): every check a PrefillParams must pass before any kernel runs.
// The kernels assume what is checked here (16-byte vectors along head_dim,
// GQA ratio integral, lengths non-negative), so nothing unchecked reaches them.
#include <cstdint>
#include <string>

#include "attention/attention_validate.hpp"
#include "flashscope/attention.hpp"

namespace flashscope {
Status check_attn_tensor(const char* name, const AttnTensor& t, int head_dim, Device device, bool batch_stride_read,
                         bool batch_stride_aligned) {
  const std::string n = name;
  if (t.data == nullptr) return invalid_argument(n + ".data is null");
  if (t.seq_stride <= 0 || t.head_stride <= 0 || (batch_stride_read && t.batch_stride <= 0))
    return invalid_argument(n + " strides must be positive (seq_stride=" + std::to_string(t.seq_stride) +
                            ", head_stride=" + std::to_string(t.head_stride) +
                            ", batch_stride=" + std::to_string(t.batch_stride) + ")");
  // head_dim is contiguous (stride 1), so a smaller head or token stride
  // would make two vectors share elements.
  if (t.head_stride < head_dim || t.seq_stride < head_dim)
    return invalid_argument(n + ": head_dim must be contiguous and vectors must not overlap (head_stride=" +
                            std::to_string(t.head_stride) + ", seq_stride=" + std::to_string(t.seq_stride) +
                            ", head_dim=" + std::to_string(head_dim) + ")");
  if (device == Device::kCuda) {
    // cp.async moves 16 bytes: 8 bf16/fp16 elements must start on a 16-byte boundary.
    constexpr int64_t kVec = 8;
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
      return invalid_argument(n + ".data is not 16-byte aligned");
    if (t.seq_stride % kVec || t.head_stride % kVec || (batch_stride_aligned && t.batch_stride % kVec))
      return invalid_argument(n + " strides must be multiples of 8 elements (16 bytes) on CUDA");
  }
  return {};
}

Status check_attention_shape(const char* api, DType dtype, Device device, int head_dim, int batch, int q_heads,
                             int kv_heads) {
  if (dtype != DType::kBF16 && dtype != DType::kFP16)
    return unsupported(std::string("dtype ") + dtype_name(dtype) + " is not supported for " + api + " (bf16, fp16)");
  if (device != Device::kCpu && device != Device::kCuda) return invalid_argument("unknown device");
  if (!head_dim_supported(device, head_dim))
    return unsupported("head_dim " + std::to_string(head_dim) + " is not supported on " +
                       (device == Device::kCuda ? "CUDA" : "the CPU") + " (" + supported_head_dims_text(device) + ")");
  if (batch < 1) return invalid_argument("batch must be >= 1");
  if (q_heads < 1 || kv_heads < 1) return invalid_argument("q_heads and kv_heads must be >= 1");
  if (q_heads % kv_heads != 0)
    return invalid_argument("q_heads (" + std::to_string(q_heads) + ") must be a multiple of kv_heads (" +
                            std::to_string(kv_heads) + ")");
  return {};
}

Status check_softmax_scale(float softmax_scale) {
  if (!(softmax_scale >= 0.0f) || softmax_scale > 1e30f)
    return invalid_argument("softmax_scale must be finite and >= 0 (0 selects 1/sqrt(head_dim))");
  return {};
}

Status check_window_softcap(int window_left, int window_right, float softcap, bool causal) {
  if (window_left < -1 || window_right < -1)
    return invalid_argument("window_left and window_right must be >= 0, or -1 for unbounded (got " +
                            std::to_string(window_left) + ", " + std::to_string(window_right) + ")");
  if (causal && window_right > 0)
    return invalid_argument("window_right must be -1 or 0 with causal (causal lets no key right of the query in; got " +
                            std::to_string(window_right) + ")");
  if (!(softcap >= 0.0f) || softcap > 3.0e38f)
    return invalid_argument("softcap must be finite and >= 0 (0 is off; got " + std::to_string(softcap) + ")");
  return {};
}

Status validate(const PrefillParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(
      check_attention_shape("attention", p.dtype, p.device, p.head_dim, p.batch, p.q_heads, p.kv_heads));
  if (p.q_len < 0 || p.kv_len < 0) return invalid_argument("q_len and kv_len must be >= 0");
  if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr))
    return invalid_argument("cu_seqlens_q and cu_seqlens_k must both be set (varlen) or both be null");
  FLASHSCOPE_RETURN_IF_ERROR(check_softmax_scale(p.softmax_scale));
  FLASHSCOPE_RETURN_IF_ERROR(check_window_softcap(p.window_left, p.window_right, p.softcap, p.causal));
  if (p.workspace_bytes > 0 && p.workspace == nullptr)
    return invalid_argument("workspace is null but workspace_bytes is " + std::to_string(p.workspace_bytes));
  if (p.device == Device::kCuda && reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0)
    return invalid_argument("workspace must be 16-byte aligned on CUDA");
  const bool varlen = p.cu_seqlens_q != nullptr;
  if (p.q_len == 0) return {};  // nothing to compute, nothing will be touched
  FLASHSCOPE_RETURN_IF_ERROR(check_attn_tensor("q", p.q, p.head_dim, p.device, !varlen && p.batch > 1, !varlen));
  FLASHSCOPE_RETURN_IF_ERROR(check_attn_tensor("o", p.o, p.head_dim, p.device, !varlen && p.batch > 1, !varlen));
  if (p.kv_len > 0) {
    FLASHSCOPE_RETURN_IF_ERROR(check_attn_tensor("k", p.k, p.head_dim, p.device, !varlen && p.batch > 1, !varlen));
    FLASHSCOPE_RETURN_IF_ERROR(check_attn_tensor("v", p.v, p.head_dim, p.device, !varlen && p.batch > 1, !varlen));
  }
  if (p.device == Device::kCpu && varlen) {
    // On the CPU the prefix sums are readable: check they describe the batch.
    if (p.cu_seqlens_q[0] != 0 || p.cu_seqlens_k[0] != 0) return invalid_argument("cu_seqlens must start at 0");
    for (int b = 0; b < p.batch; ++b) {
      const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
      const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
      if (lq < 0 || lk < 0) return invalid_argument("cu_seqlens must be non-decreasing");
      if (lq > p.q_len || lk > p.kv_len)
        return invalid_argument("sequence " + std::to_string(b) + " is longer than q_len/kv_len (the maxima)");
    }
  }
  return {};
}

}  // namespace flashscope
