// Attention prefill: O = softmax(scale · Q Kᵀ + mask) V, for every query head.
//
// Shapes (logical; strides live in the AttnTensor views):
//   q, o : [batch, q_len,  q_heads,  head_dim]
//   k, v : [batch, kv_len, kv_heads, head_dim]
//   lse  : [batch, q_heads, q_len] float32, natural log of the softmax
//          denominator (scale already applied); optional.
// Varlen (packed) batches: set cu_seqlens_q / cu_seqlens_k to arrays of
// batch + 1 int32 prefix sums on the same device as the tensors; sequence b
// occupies tokens [cu[b], cu[b+1]) of a [total_tokens, heads, head_dim]
// tensor (batch_stride is ignored), q_len / kv_len are the maxima over the
// batch, and lse is [q_heads, total_q] (total_q = cu_seqlens_q[batch], which
// the CUDA kernels read on the device: no host copy of the prefix sums).
// kv_len = 0 is allowed: every row is then zero with lse = -inf.
//
// GQA/MQA: q_heads must be a multiple of kv_heads; q-head h reads kv-head
// h / (q_heads / kv_heads). Any ratio works (SmolLM2 uses 9 over 3).
//
// Causal masking is aligned to the bottom-right corner, so that new tokens
// appended after a cached prefix see all of it: query i (0-based within its
// sequence) attends key j iff j <= i + (kv_len - q_len). Query rows that see
// no key at all (q_len > kv_len) produce zeros and lse = -inf.
//
// Local (sliding-window) attention uses the same alignment: with query i at
// position pos = i + (kv_len - q_len), window_left = W >= 0 keeps keys
// j >= pos - W and window_right = W >= 0 keeps keys j <= pos + W (causal is
// window_right = 0). Key tiles wholly outside every row's window are never
// read, so the cost grows with the window, not with the context.
// Logit soft-capping (Gemma 2): s <- softcap · tanh(s / softcap) on the
// scaled score s, before the softmax; lse is of the capped scores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope {

// The production kernels of this library. The values 1..4 are the teaching
// ladder's first steps (v1..v4 of the sm80 family): the kernel lab names
// them (flashscope_lab/lab.hpp, target flashscope_lab) and holds their
// code; they run in programs that link it (the app, the CLI, the tests) and
// answer kUnsupported elsewhere.
enum class PrefillKernel : uint8_t {
  kAuto = 0,  // dispatch picks by architecture, head_dim and problem size
  kV5 = 5,    // the sm80 family: mma.m16n8k16 + ldmatrix + cp.async, a swizzled K
              // double buffer and a single V buffer (the defaults at D64/256)
  kV6 = 6,    // v5 with K and V double-buffered, each warp computing Q·K(t+1)ᵀ
              // while it runs the softmax of tile t (the defaults at D80/96/128)
  kHopper = 7,  // sm_90a: wgmma from shared memory, a producer warp feeding an
                // mbarrier ring, two consumer warpgroups (H100/H200 only)
};

const char* prefill_kernel_name(PrefillKernel k);
// Parses "auto", "v1".."v6", "hopper" (v1..v4: the lab's values); returns
// false for anything else.
bool parse_prefill_kernel(const std::string& name, PrefillKernel* out);
// Whether `k` can run on the current CUDA device in this build: v5, v6 and
// auto wherever CUDA works, v1..v4 where the kernel lab is linked too;
// kHopper on an sm_90 device when the library carries its sm_90a code. For
// kernel pickers (CLI, the app's kernel lab).
bool prefill_kernel_runnable(PrefillKernel k);

struct PrefillParams {
  AttnTensor q, k, v, o;
  float* lse = nullptr;

  Device device = Device::kCpu;
  DType dtype = DType::kBF16;  // of q, k, v and o (bf16 or fp16)

  int batch = 1;
  int q_heads = 0;
  int kv_heads = 0;
  int q_len = 0;   // max over the batch when varlen
  int kv_len = 0;  // max over the batch when varlen
  int head_dim = 0;

  const int32_t* cu_seqlens_q = nullptr;  // both set, or neither
  const int32_t* cu_seqlens_k = nullptr;

  bool causal = false;
  float softmax_scale = 0.0f;  // 0 means 1/sqrt(head_dim)

  // Sliding window, positions bottom-right aligned (see the top of this
  // file). -1: unbounded. W >= 0: the query at position i sees keys j >= i - W
  // (window_left) and j <= i + W (window_right). With causal, window_right
  // must be -1 or 0 (causal already means 0).
  int window_left = -1;
  int window_right = -1;
  // 0: off. > 0: s <- softcap · tanh(s / softcap) on the already scaled
  // score, before the softmax.
  float softcap = 0.0f;

  PrefillKernel kernel = PrefillKernel::kAuto;
  void* stream = nullptr;  // cudaStream_t for Device::kCuda; null is the default stream

  // Optional CUDA scratch, at least prefill_workspace_bytes(p) bytes (the
  // plan's workspace_bytes), 16-byte aligned and zero-filled before its
  // first use (DeviceBuffer::fill_bytes(0)): every call leaves it
  // zero-filled again, so one buffer serves all later calls in turn (not two
  // calls running at once). With it, long non-causal problems on H100/H200
  // share their last wave of tiles across every SM
  // (bench/TUNING.md#hopper-prefill); without it, or when it is smaller,
  // they run unsplit. Unused on the CPU.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Checks every field before any work: null pointers, shapes, GQA ratio,
// head_dim, dtype, 16-byte alignment of pointers and strides on CUDA.
Status validate(const PrefillParams& p);

// How prefill() runs p's shape on the current device: the kernel, its
// tiles, the work deal, the L2 grouping and the workspace. plan_prefill()
// makes it once per shape (it asks the device's facts, cached per device,
// and does the arithmetic); prefill(p, plan) then runs every call of that
// shape with it, whatever its pointers, strides, workspace or stream, with
// no device query and no allocation: a plan made before a CUDA graph
// capture serves the calls captured in it. A plan belongs to the device
// that was current when it was made, and to the shape it was made for:
// prefill(p, plan) refuses another (kInvalidArgument).
struct PrefillPlan {
  PrefillKernel kernel = PrefillKernel::kAuto;  // what runs (never kAuto on CUDA; kAuto on the CPU)
  // The launch's tiles: query rows and keys per tile, warps per CTA. What a
  // GPU trace capture of the shape records in (TraceMeta::block_q/block_kv).
  int block_q = 0;
  int block_kv = 0;
  int warps = 0;
  // The PrefillParams::workspace with which the launch splits its last
  // wave across all SMs; 0 where it uses none.
  size_t workspace_bytes = 0;
  // The work deal: persistent CTAs (Hopper, dense tensors, more work tiles
  // than SMs), one per SM, walking the work tiles; 0 where each CTA takes one.
  int persistent_ctas = 0;
  // The L2 grouping (causal): (q-head, sequence) pairs whose tiles run
  // longest first together, so the K and V of the CTAs in flight stay in L2.
  int longest_first_group = 0;
  // Work tiles of the last two rounds the persistent CTAs share by key
  // tiles (non-causal, given the workspace); 0: none.
  int split_tiles = 0;

  // The runtime's own: the shape the plan was made for and the launch's
  // state (the kernel configuration, the deal's parameters).
  struct Shape {
    Device device = Device::kCpu;
    int device_ordinal = -1;
    DType dtype = DType::kBF16;
    PrefillKernel requested = PrefillKernel::kAuto;
    int batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
    bool causal = false, varlen = false;
    int window_left = -1, window_right = -1;  // a window changes the tiles a launch reads
    float softcap = 0.0f;
  } shape;
  alignas(8) unsigned char launch[128] = {};
};

// The plan of p (validated first: the same refusals as prefill(), such as
// a kernel the device cannot run or a dtype it is not built for).
Result<PrefillPlan> plan_prefill(const PrefillParams& p);

// Runs attention on p.device. Asynchronous on CUDA (enqueued on p.stream);
// a launch failure is reported. On error nothing was written. The Hopper
// kernel launches as a programmatic dependent launch: its setup may overlap
// the end of the kernel before it on the stream, but it reads and writes
// nothing until that kernel has completed, so stream order holds as usual.
// prefill(p) plans p then runs it; prefill(p, plan) runs p with a plan made
// for its shape by plan_prefill.
Status prefill(const PrefillParams& p);
Status prefill(const PrefillParams& p, const PrefillPlan& plan);

// The kernel dispatch would run for p (never kAuto). CPU runs report kAuto.
PrefillKernel resolve_prefill_kernel(const PrefillParams& p);

// The workspace p's kernel on the current device uses (PrefillParams::
// workspace): plan_prefill(p)'s workspace_bytes; 0 where it uses none (CPU,
// causal, varlen, other kernels, problems of one wave of tiles or whose last
// wave is nearly full) or where p cannot be planned.
size_t prefill_workspace_bytes(const PrefillParams& p);

// head_dim values some attention path runs: 32, 64, 80, 96, 128, 256.
inline bool supported_head_dim(int d) {
  return d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}
// head_dim values the attention paths of `device` run (the CPU: every one
// of supported_head_dim; CUDA: those its kernels are instantiated for).
// validate() checks this form.
bool head_dim_supported(Device device, int head_dim);
// The list head_dim_supported(device, ·) accepts, for messages: "64, 128".
std::string supported_head_dims_text(Device device);

// FLOPs of one prefill as the peers (PyTorch SDPA, FlashAttention) count
// them, so TFLOPS compare: 4·batch·q_heads·Lq·Lk·D (QKᵀ and PV, one
// multiply-add = 2), halved when causal. For varlen, summed per sequence
// (needs host-readable cu_seqlens; pass the lengths' maxima otherwise).
// With a window (window_left or window_right >= 0), 4·q_heads·D times the
// (query, key) pairs the mask lets in, counted exactly: the work a kernel
// that skips the tiles outside the window cannot avoid.
double prefill_flops(const PrefillParams& p);

}  // namespace flashscope
