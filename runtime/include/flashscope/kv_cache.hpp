// Paged KV cache: a pool of fixed-size pages holding keys and values, a block
// table per sequence mapping its token positions to pages, and an allocator
// with reference counts so sequences can fork and share prefix pages.
//
// Layout of each layer's pools (elements of `dtype`):
//   K, V : [num_pages, kv_heads, page_size, head_dim]
// Token position t of a sequence lives in page block_table[t / page_size] at
// offset t % page_size. A page shared by several sequences (refcount > 1) is
// never written: appending into it first copies it to a fresh page
// (copy-on-write), so forks never see each other's new tokens.
//
// Every call that could run out of pages checks first and fails with
// kOutOfMemory leaving every sequence exactly as it was. Page contents are
// unspecified until written (stale data of an earlier owner, or whatever the
// allocation held): readers must never look past a sequence's length.
//
// This is also the model engine's cache: on CUDA it reserves each
// sequence's pages when the sequence is made (reserve) so a captured decode
// graph never sees the pools move, and grows the cache (grow) when a new
// sequence does not fit; on the CPU each sequence has a cache of its own,
// its whole capacity reserved.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope {

struct KvCacheConfig {
  int num_layers = 1;
  int num_pages = 0;
  int page_size = 16;  // tokens per page: a power of two, 16..256
  int kv_heads = 0;
  int head_dim = 0;    // one attention runs on `device` (head_dim_supported, attention.hpp)
  DType dtype = DType::kBF16;
  Device device = Device::kCpu;
};

// Reference-counted page ids; pure bookkeeping, no memory of its own (a
// PagedKvCache keeps its page ids in one).
class PageAllocator {
 public:
  explicit PageAllocator(int num_pages = 0);
  // Takes n pages (refcount 1 each), all or nothing. The last page released
  // goes out first; a fresh allocator hands out 0, 1, 2, ...
  Result<std::vector<int32_t>> allocate(int n);
  // Adds n free pages, ids num_pages() .. num_pages() + n - 1 (a pool that
  // grows by reallocation keeps its ids). They are handed out before the
  // pages already free, lowest id first. kInvalidArgument for n < 0 or more
  // pages than int32 ids can count; kOutOfMemory when the bookkeeping cannot
  // grow. Nothing changes on an error.
  Status grow(int n);
  // Both ignore ids out of range and pages not allocated (refcount 0), so a
  // stale id cannot corrupt the free list.
  void retain(int32_t page);
  void release(int32_t page);  // back to the free list at refcount 0
  int refcount(int32_t page) const {  // 0 for a free page or an id out of range
    return page >= 0 && page < num_pages() ? refcounts_[static_cast<size_t>(page)] : 0;
  }
  int free_pages() const { return static_cast<int>(free_.size()); }
  int num_pages() const { return static_cast<int>(refcounts_.size()); }

 private:
  std::vector<int32_t> free_;
  std::vector<int> refcounts_;
};

// Where one new token's K/V goes: flat slot = page * page_size + offset.
using Slot = int64_t;

class PagedKvCache {
 public:
  static Result<PagedKvCache> create(const KvCacheConfig& config);
  PagedKvCache();
  ~PagedKvCache();
  PagedKvCache(PagedKvCache&&) noexcept;
  PagedKvCache& operator=(PagedKvCache&&) noexcept;

  const KvCacheConfig& config() const;

  // Pool base pointers of one layer (device pointers for Device::kCuda).
  void* k_pages(int layer) const;
  void* v_pages(int layer) const;

  // Sequences are small integer ids, reused after free.
  int create_sequence();
  // A new sequence sharing all of parent's pages (prefix sharing); kInvalidArgument for a bad id.
  Result<int> fork_sequence(int parent);
  Status free_sequence(int seq);

  // Makes room for n more tokens of seq and returns their slots, in order.
  // Allocates pages as needed and copies a shared last page before it is
  // written (copy-on-write, all layers). kOutOfMemory if the pool cannot
  // hold them: nothing changes then. The sequence's length grows by n.
  Result<std::vector<Slot>> append_slots(int seq, int n);
  // Shortens seq to new_length tokens (e.g. rejected drafts): pages no
  // longer used (past the length and past any reservation) are released.
  // kInvalidArgument unless 0 <= new_length <= length.
  Status truncate(int seq, int new_length);

  // Makes seq hold pages for positions [0, tokens) now, so append_slots up
  // to that length takes no page: it cannot run out of pages and moves
  // nothing (what a captured CUDA graph needs). The length is unchanged; a
  // smaller reservation than the pages held is a no-op. Reserved pages are
  // the sequence's own (a fork shares only the pages holding tokens), kept
  // by truncate and released by free_sequence. kOutOfMemory when too few
  // pages are free: nothing changes then.
  Status reserve(int seq, int tokens);
  // Adds `pages` pages to every pool. The pools are reallocated: k_pages()
  // and v_pages() of every layer change, while page ids, block tables and
  // contents stay. On CUDA it first waits for the whole device (work still
  // reading the old pools), then copies the held pages. kOutOfMemory (or a
  // device error) leaves the cache as it was.
  Status grow(int pages);

  int length(int seq) const;
  // Positions seq can hold without taking a page: its pages × page_size.
  int64_t capacity(int seq) const;
  // seq's pages in token order: those holding its tokens, then any reserved.
  const std::vector<int32_t>& block_table(int seq) const;
  int free_pages() const;
  int num_pages() const;  // config().num_pages, which grow() raises
  bool valid_sequence(int seq) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes new tokens' K and V into the pools at the given slots.
//   k_new, v_new : [n, kv_heads, head_dim] with seq_stride / head_stride as given
//   slots        : [n] flat slots from append_slots (host array for the CPU,
//                  device array for CUDA: it cannot be checked, the kernel
//                  reads it). A negative slot skips its token (padding rows
//                  of a fixed-size batch, e.g. in a captured CUDA graph).
// On CUDA this is a kernel on `stream`; pointers and strides must be 16-byte
// aligned (8 elements), as for attention.
struct AppendKvParams {
  AttnTensor k_new, v_new;  // batch_stride unused
  const Slot* slots = nullptr;
  int num_tokens = 0;
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  int kv_heads = 0, head_dim = 0, page_size = 0;
  // Pages in the pool, 0 = unknown. When set, a slot past the pool is
  // kInvalidArgument on the CPU (checked before anything is written) and
  // skipped by the CUDA kernel, which cannot report it.
  int num_pages = 0;
  DType dtype = DType::kBF16;
  Device device = Device::kCpu;
  void* stream = nullptr;
};
Status append_kv(const AppendKvParams& p);

}  // namespace flashscope
