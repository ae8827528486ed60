// The configurations of the sm80 FlashAttention-2 kernel (prefill_kernel.cuh):
// which pipeline, tile shape, swizzle and ldmatrix width each version uses
// (prefill_versions.cuh names them v1..v6).
#pragma once

namespace flashscope::kernels {

enum class Pipeline {
  kSerial,  // load K(t), V(t); wait; compute (v1, v2)
  kKV2,     // K and V double-buffered (v3, v4)
  kK2V1,    // K double-buffered, V single, loads interleaved with the two GEMMs (v5)
  kLookahead,  // K and V double-buffered, Q·K(t+1)ᵀ overlapped with softmax(t) in each warp (v6)
};

// What a kernel computes beyond causal/full attention, fixed at compile time
// so the kernels without them keep their code: kModWindow, a sliding window
// given at run time (PrefillKernelParams::window_left/right; causal is then
// window_right = 0 and the kernel is instantiated non-causal), whose key
// tiles outside every row's window are skipped and whose boundary tiles are
// masked; kModSoftcap, logit soft-capping before the softmax (always with
// kModWindow: an unbounded window costs only the mask of the last tiles).
enum AttnMods : int { kModNone = 0, kModWindow = 1, kModSoftcap = 2 };

// Q_IN_SMEM: keep Q in shared memory and re-read its fragments every KV tile
// (FlashAttention-2's choice) instead of holding them in registers; frees
// DIM/4 · WARP_Q/16 registers for a taller warp tile. MIN_BLOCKS: CTAs per SM
// the register allocation must allow (__launch_bounds__).
template <int DIM, int BLOCK_Q, int BLOCK_KV, int NUM_WARPS, bool SWIZZLE, Pipeline PIPE, bool X4,
          bool Q_IN_SMEM = false, int MIN_BLOCKS = 1>
struct PrefillConfig {
  static constexpr int kDim = DIM;
  static constexpr int kBlockQ = BLOCK_Q;
  static constexpr int kBlockKV = BLOCK_KV;
  static constexpr int kWarps = NUM_WARPS;
  static constexpr int kThreads = NUM_WARPS * 32;
  static constexpr int kWarpQ = BLOCK_Q / NUM_WARPS;
  static constexpr bool kSwizzle = SWIZZLE;
  static constexpr Pipeline kPipe = PIPE;
  static constexpr bool kX4 = X4;

  static constexpr bool kQInSmem = Q_IN_SMEM;
  static constexpr int kMinBlocksPerSm = MIN_BLOCKS;
  static constexpr int kKStages = PIPE == Pipeline::kSerial ? 1 : 2;
  static constexpr int kVStages = PIPE == Pipeline::kKV2 || PIPE == Pipeline::kLookahead ? 2 : 1;
  // One row of head_dim in shared memory: 16-bit elements, padded to a power
  // of two of at least 128 bytes so the XOR swizzle (swizzle.cuh) stays
  // inside the row and column steps can be XOR-ed onto row addresses
  // (head_dim 96: 192 bytes of data in 256-byte rows; 32: 64 in 128).
  static constexpr int kRowBytes = DIM <= 64 ? 128 : DIM <= 128 ? 256 : 512;
  static constexpr int kKVTileBytes = BLOCK_KV * kRowBytes;
  static constexpr int kQTileBytes = BLOCK_Q * kRowBytes;
  // Register-resident Q is staged through the start of the K/V buffers (it
  // lives in registers after the prologue); shared-memory Q has its own region.
  static constexpr int kKVBytes = (kKStages + kVStages) * kKVTileBytes;
  static constexpr int kQRegionBytes = Q_IN_SMEM ? kQTileBytes : 0;
  static constexpr int kSmemBytes =
      Q_IN_SMEM ? kQTileBytes + kKVBytes : (kKVBytes > kQTileBytes ? kKVBytes : kQTileBytes);

  // head_dim in whole k16 MMA steps and n8 pairs: K's ldmatrix.x4 reads 32
  // columns (80's last 16 with x2, compute_S), V's 16.
  static_assert(DIM == 32 || DIM == 64 || DIM == 80 || DIM == 96 || DIM == 128 || DIM == 256,
                "head_dim 32, 64, 80, 96, 128 or 256");
  static_assert(kWarpQ % 16 == 0, "each warp owns whole m16 MMA tiles of rows");
  static_assert(BLOCK_KV % 16 == 0, "KV tiles are whole k16 MMA tiles");
};

}  // namespace flashscope::kernels
