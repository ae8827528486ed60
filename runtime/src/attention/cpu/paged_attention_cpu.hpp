// The CPU path of attention over the paged KV cache, and its FP64 reference.
//
// Decode-sized calls read the pages in place (decode_attention.hpp). Larger
// ones, and the reference, gather each sequence's K and V out of the pages into contiguous
// scratch and hand the result to the dense CPU attention (attention_cpu.hpp),
// whose bottom-right causal alignment is exactly the paged semantics: new
// token t of a sequence with kv_len keys sees keys <= kv_len - q_len + t.
// The gathers are written separately on purpose (the reference token by
// token, the backend page run by page run), so a page-indexing bug in one
// does not hide in the other.
#pragma once

#include "attention/cpu/decode_attention.hpp"
#include "flashscope/paged_attention.hpp"
#include "flashscope/status.hpp"

namespace flashscope::cpu {

// The decode path's view of p: the same tensors, the pools read page by page
// where they lie (cpu::decode_attention).
DecodeParams decode_params(const PagedAttentionParams& p);

// The CPU backend. p has passed validate() with Device::kCpu. A few rows per
// kv-head (q_len x group <= kDecodeMaxRows) run the decode path over the
// pages; more (chunked prefill) gather and run the tiled path. Writes p.o in
// p.dtype through its strides and p.lse ([batch, q_heads, q_len]) if set.
// kOutOfMemory (nothing written) if scratch cannot be allocated.
Status paged_attention(const PagedAttentionParams& p);

// Reference in FP64 (cpu::attention_reference on the gathered tensors), for
// tests and GPU checks. Reads q, pages, block tables and kv_lens from host
// memory; p.o, p.lse and p.device are ignored.
//   o_out   : float32 dense [batch, q_len, q_heads, head_dim]
//   lse_out : float32 dense [batch, q_heads, q_len], or null; natural log
// Does not validate beyond memory safety: a kv_len outside
// [0, block_table_stride · page_size] or a page id < 0 (or >= num_pages when
// set) is kInvalidArgument.
Status paged_attention_reference(const PagedAttentionParams& p, float* o_out, float* lse_out);

}  // namespace flashscope::cpu
