// Decode attention on the CPU: a few new query rows per sequence (decode,
// drafted tokens) over a KV cache read where it lies, paged or contiguous.
//
// All q-heads of one kv-head run together: the group's rows (q_len tokens ×
// q_heads / kv_heads heads) form a small matrix that meets each K and V row
// once, read in the cache's own type (bf16/fp16, widened in registers; with
// AVX-512 BF16, bf16 q·k multiplies the stored pairs directly).
// Online softmax in float32 (log2 units, scale folded into q, or into the
// scores of a bf16 q·k), P kept in float (not rounded to the input type).
// Work items are (sequence, KV range), each kv-head of it in turn per
// 64-key block, so the engine's cache, which interleaves the heads of a
// token, is read in order; when the
// sequences cannot keep the threads busy the KV range is split and the
// partial (m, l, o) merged by log-sum-exp.
//
// Semantics are those of flashscope/paged_attention.hpp: new token t of
// sequence b sits at position kv_lens[b] − q_len + t; with causal it sees
// keys <= its position, a left window W keys >= position − W, a right
// window keys <= position + W; softcap > 0 caps the scaled score as
// c · tanh(s / c). Rows that see no key give zeros and lse = −inf.
//
// Results do not depend on how pages are laid out or on q_len: a row's keys
// go through the same 64-key blocks (aligned to absolute positions) and the
// same KV ranges (fixed by max_kv_len and the thread count) either way, so
// verifying drafted tokens together gives the bits of decoding them one by one.
#pragma once

#include <cstdint>

#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope::cpu {

// Where the keys and values of a sequence are. Element (sequence b, token j,
// kv-head h, d) of K is at
//   k + page · page_stride + h · head_stride + (j mod page_size) · row_stride + d
// with page = block_tables[b · block_table_stride + j / page_size], or, with
// page_size = 0 (one contiguous run per sequence), page = b and j mod
// page_size read as j. V alike (same strides). Elements, not bytes.
//   paged pool  [pages, kv_heads, page_size, D]: page_stride = kv_heads·page_size·D,
//               head_stride = page_size·D, row_stride = D
//   contiguous  [batch, capacity, kv_heads, D]:  page_size = 0, page_stride = capacity·kv_heads·D,
//               head_stride = D, row_stride = kv_heads·D
struct DecodeKv {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t page_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  int page_size = 0;
  const int32_t* block_tables = nullptr;  // [batch, block_table_stride]; unused when page_size = 0
  int block_table_stride = 0;
};

struct DecodeParams {
  DType dtype = DType::kBF16;  // of q and o, and of K and V unless kv_q8 / kv_q4: bf16 or fp16
  // K and V in the q8_0 layout of kv_q8.hpp: kv.k / kv.v are the byte pools,
  // kv.page_stride and kv.head_stride in bytes (head_stride =
  // kv_q8_head_bytes), row_stride unused, paged only (page_size a multiple
  // of 16), head_dim a multiple of 32 up to 256. q is quantized per row and
  // block of 32 as the cache is, and q·k summed in integers.
  bool kv_q8 = false;
  // K and V in the q4_0 layout of kv_q4.hpp (K's blocks rotated), otherwise
  // as kv_q8 (the same kernels and limits; q rotated as K and rounded to 8
  // bits; AVX-512 VNNI and AVX2 read the nibbles in their registers, the
  // portable and NEON builds unpack each 16-key group to kv_q8.hpp's layout
  // in L1; head_stride = kv_q4_head_bytes). Not with kv_q8.
  bool kv_q4 = false;
  int batch = 1;
  int q_heads = 0;
  int kv_heads = 0;
  int q_len = 1;
  int head_dim = 0;
  AttnTensor q, o;        // [batch, q_len, q_heads, head_dim] through their strides
  float* lse = nullptr;   // [batch, q_heads, q_len] natural log, optional
  DecodeKv kv;
  const int32_t* kv_lens = nullptr;  // [batch], each in [q_len, …] (includes the new tokens)
  int max_kv_len = 0;                // >= every kv_lens[b]; 0: computed. Fixes the KV ranges.
  bool causal = true;
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;
};

// The widest rows of one kv-head this path is meant for (q_len × group);
// more rows are a prefill and belong to the tiled path. Not a hard limit.
constexpr int kDecodeMaxRows = 64;

// Instruction sets a decode kernel is built for.
// kAvx512Bf16 is AVX-512 F with bf16 q·k by vdpbf16ps (bf16 tensors; fp16
// runs its AVX-512 F path).
// kAvx512Vnni runs the quantized caches only (q8_0 and q4_0, vpdpbusd), as
// kNeonDot (arm64's SDOT/UDOT); they also run on kAvx2 (pmaddwd) and
// kPortable / kScalar (one portable kernel).
enum class DecodeIsa { kScalar, kPortable, kAvx2, kAvx512, kNeon, kAvx512Bf16, kAvx512Vnni, kNeonDot };

const char* decode_isa_name(DecodeIsa isa);
// Whether this build and this CPU can run `isa` for head_dim (the vector
// kernels need head_dim to be a multiple of their width: 8 portable and
// AVX2, 16 AVX-512, 32 AVX-512 BF16, 4 NEON; scalar runs any); kv_quantized:
// over a q8_0 or q4_0 cache (head_dim a multiple of 32 up to 256).
bool decode_isa_runnable(DecodeIsa isa, int head_dim, bool kv_quantized = false);
// The best runnable one (what decode_attention(p) uses).
DecodeIsa decode_isa_for(int head_dim, bool kv_quantized = false);

// Runs p with the best kernel for this CPU. p is not validated beyond what
// memory safety needs (the callers have validated their own params):
// kInvalidArgument for a null pointer, a non-positive shape or q_heads not a
// multiple of kv_heads; kUnsupported for a dtype other than bf16/fp16;
// kOutOfMemory (nothing written) if scratch cannot be allocated.
Status decode_attention(const DecodeParams& p);
// The same with a named kernel (tests); kUnsupported where not runnable.
Status decode_attention(const DecodeParams& p, DecodeIsa isa);

}  // namespace flashscope::cpu
