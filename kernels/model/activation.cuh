// The gated feed-forward activations, shared by the standalone kernel
// (swiglu.cu) and the few-token GEMM's epilogue (skinny_gemm.cu) so both
// round the same values the same way.
//
// expf / tanhf, not the fast intrinsics: those lose several bits for large
// |gate|, and the CPU reference computes these in float with libm.
#pragma once

#include "kernels/model/model_ops.h"

namespace flashscope::kernels {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// transformers' gelu_pytorch_tanh (Gemma's hidden_activation).
__device__ __forceinline__ float gelu_tanh(float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
}

__device__ __forceinline__ float gated(GateActivation a, float gate, float up) {
  return (a == GateActivation::kGeluTanh ? gelu_tanh(gate) : silu(gate)) * up;
}

}  // namespace flashscope::kernels
