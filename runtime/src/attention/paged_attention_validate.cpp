// validate(PagedAttentionParams): every check a paged attention call must
// pass before any kernel runs or any scratch is allocated. The kernels (CPU
// and CUDA) assume what is checked here: 16-byte vectors along head_dim on
// CUDA, a whole GQA ratio, page_size a power of two (the kernels shift by
// its log2), a block table wide enough for max_kv_len.
//
// What cannot be checked for CUDA: kv_lens and block_tables live on the
// device. On the CPU they are read: every kv_lens[b] must lie in
// [q_len, max_kv_len] and every block-table entry a sequence uses must be a
// page id >= 0 (and < num_pages when num_pages is set). Entries past a
// sequence's last page are never read, by validate() or by the kernels.
#include <cstdint>
#include <string>

#include "attention/attention_validate.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/paged_attention.hpp"
#include "util/math.hpp"

namespace flashscope {
namespace {

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }


// Host-readable kv_lens and block tables (Device::kCpu only).
Status check_sequences(const PagedAttentionParams& p) {
  for (int b = 0; b < p.batch; ++b) {
    const int32_t len = p.kv_lens[b];
    if (len < p.q_len || len > p.max_kv_len)
      return invalid_argument("kv_lens[" + std::to_string(b) + "] = " + std::to_string(len) + " is outside [q_len, max_kv_len] = [" +
                              std::to_string(p.q_len) + ", " + std::to_string(p.max_kv_len) +
                              "] (kv_lens count the new tokens too)");
    const int pages = static_cast<int>(ceil_div<int64_t>(len, p.page_size));
    const int32_t* row = p.block_tables + int64_t{b} * p.block_table_stride;
    for (int i = 0; i < pages; ++i) {
      if (row[i] < 0 || (p.num_pages > 0 && row[i] >= p.num_pages))
        return invalid_argument("block_tables[" + std::to_string(b) + "][" + std::to_string(i) + "] = " +
                                std::to_string(row[i]) + " is not a page id" +
                                (p.num_pages > 0 ? " in [0, " + std::to_string(p.num_pages) + ")" : std::string(" (< 0)")));
    }
  }
  return {};
}

}  // namespace

Status validate(const PagedAttentionParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(
      check_attention_shape("paged attention", p.dtype, p.device, p.head_dim, p.batch, p.q_heads, p.kv_heads));
  if (!is_power_of_two(p.page_size) || p.page_size < 16 || p.page_size > 256)
    return invalid_argument("page_size must be a power of two in 16..256 (got " + std::to_string(p.page_size) + ")");
  if (p.q_len < 1) return invalid_argument("q_len must be >= 1 (got " + std::to_string(p.q_len) + ")");
  if (p.max_kv_len < p.q_len)
    return invalid_argument("max_kv_len (" + std::to_string(p.max_kv_len) + ") must be >= q_len (" +
                            std::to_string(p.q_len) + "): kv_lens count the new tokens too");
  if (p.block_table_stride < 1 || int64_t{p.block_table_stride} * p.page_size < p.max_kv_len)
    return invalid_argument("block_table_stride (" + std::to_string(p.block_table_stride) + ") × page_size (" +
                            std::to_string(p.page_size) + ") must cover max_kv_len (" + std::to_string(p.max_kv_len) +
                            ")");
  if (p.num_pages < 0) return invalid_argument("num_pages must be >= 0 (0 = unchecked)");
  if (p.num_splits < 0) return invalid_argument("num_splits must be >= 0 (0 = the plan decides)");
  FLASHSCOPE_RETURN_IF_ERROR(check_softmax_scale(p.softmax_scale));
  FLASHSCOPE_RETURN_IF_ERROR(check_window_softcap(p.window_left, p.window_right, p.softcap, p.causal));

  FLASHSCOPE_RETURN_IF_ERROR(check_attn_tensor("q", p.q, p.head_dim, p.device, p.batch > 1, p.batch > 1));
  FLASHSCOPE_RETURN_IF_ERROR(check_attn_tensor("o", p.o, p.head_dim, p.device, p.batch > 1, p.batch > 1));
  if (p.k_pages == nullptr || p.v_pages == nullptr) return invalid_argument("k_pages or v_pages is null");
  if (p.block_tables == nullptr) return invalid_argument("block_tables is null");
  if (p.kv_lens == nullptr) return invalid_argument("kv_lens is null");
  if (p.workspace_bytes > 0 && p.workspace == nullptr)
    return invalid_argument("workspace is null but workspace_bytes is " + std::to_string(p.workspace_bytes));
  if (p.device == Device::kCuda) {
    if (reinterpret_cast<uintptr_t>(p.k_pages) % 16 != 0 || reinterpret_cast<uintptr_t>(p.v_pages) % 16 != 0)
      return invalid_argument("k_pages and v_pages must be 16-byte aligned on CUDA");
    if (reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0)
      return invalid_argument("workspace must be 16-byte aligned on CUDA");
    if (reinterpret_cast<uintptr_t>(p.lse) % alignof(float) != 0) return invalid_argument("lse is not float-aligned");
    if (reinterpret_cast<uintptr_t>(p.block_tables) % alignof(int32_t) != 0 ||
        reinterpret_cast<uintptr_t>(p.kv_lens) % alignof(int32_t) != 0)
      return invalid_argument("block_tables and kv_lens must be 4-byte aligned");
    return {};
  }
  return check_sequences(p);
}

}  // namespace flashscope
