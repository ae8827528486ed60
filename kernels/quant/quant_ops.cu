// Whole rows of a matrix kept in its GGUF blocks, decoded by
// quant_blocks.h's group reader:
//
//   dequantize_bf16   out [rows, k] bf16 = w                 one thread per 32-element group
//   embedding_quant   x [n, k] fp32 = w[ids[i]]              one CTA per token, a thread per group
//
// dequantize_bf16 is how a prompt step multiplies by quantized weights: a
// layer's matrix (or a slice of rows of it) is expanded into a bf16 scratch
// that cuBLAS reads, which keeps the tensor cores' GEMM for many rows at the
// price of one extra write and read of the slice (bench/TUNING.md#engine).
// Values are quant::group_value (a·q + b without contraction), the CPU
// dequantizer's float bit for bit, then rounded to bf16 as the bf16 load path
// rounds them; the skinny quantized GEMM multiplies by the same bf16 values.
#include <cuda_bf16.h>

#include "kernels/common/math.h"
#include "kernels/model/model_ops.h"
#include "kernels/quant/quant_blocks.h"

namespace flashscope::kernels {
namespace {

constexpr int kThreads = 256;

template <int kType>
__device__ void decode_values(const uint8_t* row, int g, float (&v)[quant::kGroup]) {
  float q[quant::kGroup];
  const quant::GroupScales s = quant::decode_group<kType>(row, g, q);
#pragma unroll
  for (int i = 0; i < quant::kGroup; ++i) v[i] = quant::group_value(s, i, q[i]);
}

template <int kType>
__global__ void __launch_bounds__(kThreads) dequantize_bf16_kernel(QuantMatrixParams w, uint16_t* out, int64_t ld_out) {
  const int groups = w.k / quant::kGroup;
  const int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= int64_t(w.rows) * groups) return;
  const int64_t r = idx / groups;
  const int g = int(idx % groups);
  float v[quant::kGroup];
  decode_values<kType>(w.data + r * w.row_bytes, g, v);
  uint4* dst = reinterpret_cast<uint4*>(out + r * ld_out + int64_t(g) * quant::kGroup);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[8 * c + 2 * j]));
      const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[8 * c + 2 * j + 1]));
      packed[j] = lo | (hi << 16);
    }
    dst[c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

template <int kType>
__global__ void __launch_bounds__(kThreads) embedding_quant_kernel(QuantMatrixParams w, const int32_t* ids, float* x,
                                                                    float scale) {
  const int id = ids[blockIdx.x];
  float* row_out = x + int64_t(blockIdx.x) * w.k;
  const int groups = w.k / quant::kGroup;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    float v[quant::kGroup];
    if (id >= 0 && id < w.rows) {
      decode_values<kType>(w.data + int64_t(id) * w.row_bytes, g, v);
    } else {
#pragma unroll
      for (int i = 0; i < quant::kGroup; ++i) v[i] = 0.0f;
    }
    float4* dst = reinterpret_cast<float4*>(row_out + g * quant::kGroup);
#pragma unroll
    for (int c = 0; c < 8; ++c)
      dst[c] = make_float4(v[4 * c] * scale, v[4 * c + 1] * scale, v[4 * c + 2] * scale, v[4 * c + 3] * scale);
  }
}

template <template <int> class Launch, typename... Args>
cudaError_t by_type(int type, Args&&... args) {
  switch (type) {
    case quant::kQ4_0: return Launch<quant::kQ4_0>::run(args...);
    case quant::kQ4_1: return Launch<quant::kQ4_1>::run(args...);
    case quant::kQ5_0: return Launch<quant::kQ5_0>::run(args...);
    case quant::kQ5_1: return Launch<quant::kQ5_1>::run(args...);
    case quant::kQ8_0: return Launch<quant::kQ8_0>::run(args...);
    case quant::kQ4_K: return Launch<quant::kQ4_K>::run(args...);
    case quant::kQ5_K: return Launch<quant::kQ5_K>::run(args...);
    case quant::kQ6_K: return Launch<quant::kQ6_K>::run(args...);
    default: return cudaErrorInvalidValue;
  }
}

template <int kType>
struct DequantizeLaunch {
  static cudaError_t run(const QuantMatrixParams& w, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
    const int64_t groups = int64_t(w.rows) * (w.k / quant::kGroup);
    dequantize_bf16_kernel<kType><<<unsigned(ceil_div<int64_t>(groups, kThreads)), kThreads, 0, stream>>>(w, out, ld_out);
    return cudaGetLastError();
  }
};

template <int kType>
struct EmbeddingLaunch {
  static cudaError_t run(const QuantMatrixParams& w, const int32_t* ids, int n, float* x, float scale,
                         cudaStream_t stream) {
    embedding_quant_kernel<kType><<<n, kThreads, 0, stream>>>(w, ids, x, scale);
    return cudaGetLastError();
  }
};

}  // namespace

cudaError_t launch_dequantize_bf16(const QuantMatrixParams& w, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (w.rows <= 0) return cudaSuccess;
  return by_type<DequantizeLaunch>(w.type, w, out, ld_out, stream);
}

cudaError_t launch_embedding_quant(const QuantMatrixParams& w, const int32_t* ids, int n, float* x, float scale,
                                   cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return by_type<EmbeddingLaunch>(w.type, w, ids, n, x, scale, stream);
}

}  // namespace flashscope::kernels
