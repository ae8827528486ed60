// Which prefill kernel runs which head_dim: the rules the kernels' launch
// code and the runtime's choice of kernel share. Free of CUDA headers, so the
// runtime applies them in a build without CUDA too.
#pragma once

namespace flashscope::kernels {

// The sm80 family's version auto runs at head_dim (v5 or v6): what the
// library instantiates at every head_dim, windowed and soft-capped kernels
// included (prefill_versions.cuh).
constexpr int sm80_default_version(int head_dim) { return head_dim <= 64 || head_dim == 256 ? 5 : 6; }

// The head_dims the Hopper prefill kernel is built for. 256 runs on dense
// tensors through TMA only (no varlen, no paged cache: the cp.async
// producer's deeper ring does not fit beside its tiles).
constexpr bool hopper_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }
constexpr bool hopper_head_dim_needs_tma(int head_dim) { return head_dim == 256; }

}  // namespace flashscope::kernels
