// The paged KV cache: page allocator with reference counts, per-sequence
// block tables, copy-on-write of shared pages, and the pools themselves.
//
// Pools: per layer one K and one V allocation of
//   [num_pages, kv_heads, page_size, head_dim] elements of config.dtype,
// so one page of one layer is a contiguous kv_heads·page_size·head_dim run
// (page_bytes) and a copy-on-write is one memcpy per layer and per K/V.
// Host pools (Device::kCpu) are 64-byte aligned; device pools come from
// DeviceBuffer (cudaMalloc, 256-byte aligned). Contents start unspecified.
//
// Bookkeeping invariant, for every live sequence:
//   pages.size() == max(ceil(length / page_size), reserved)
// and every page in it holds one reference from that sequence. A page is
// written only through the slot of a position >= the sequence's length at
// the time of append_slots. A page about to be written that another sequence
// also holds (refcount > 1) is replaced first: by a copy when it holds
// earlier tokens (the partly filled page), by a fresh page otherwise (a
// reserved page kept by truncate while a fork still reads it).
//
// Failure leaves state untouched: append_slots counts the pages it needs
// (new pages + replacements), takes them all or fails, does the copy
// (device errors undo the allocation), and only then edits the sequence.
// grow allocates and fills every new pool before it swaps any in. Containers
// that grow are reserved before the first edit, so a bad_alloc is caught
// before anything changed.
#include "flashscope/kv_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <utility>

#include "backends/cuda/append_kv_cuda.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/device_buffer.hpp"
#include "util/math.hpp"

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashscope {

// ---------------------------------------------------------------------------
// PageAllocator

PageAllocator::PageAllocator(int num_pages) {
  const int n = std::max(num_pages, 0);
  refcounts_.assign(static_cast<size_t>(n), 0);
  // Popped from the back: a fresh allocator hands out 0, 1, 2, ...
  free_.reserve(static_cast<size_t>(n));
  for (int i = n - 1; i >= 0; --i) free_.push_back(i);
}

Result<std::vector<int32_t>> PageAllocator::allocate(int n) {
  if (n < 0) return invalid_argument("cannot allocate a negative number of pages (" + std::to_string(n) + ")");
  if (n > free_pages())
    return Status(StatusCode::kOutOfMemory, "KV cache is full: " + std::to_string(n) + " pages needed, " +
                                                std::to_string(free_pages()) + " free of " +
                                                std::to_string(num_pages()));
  std::vector<int32_t> pages;
  try {
    pages.reserve(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "page allocator: cannot allocate the page list");
  }
  for (int i = 0; i < n; ++i) {
    const int32_t page = free_.back();
    free_.pop_back();
    refcounts_[static_cast<size_t>(page)] = 1;
    pages.push_back(page);
  }
  return pages;
}

Status PageAllocator::grow(int n) {
  if (n < 0) return invalid_argument("cannot grow a page allocator by a negative count (" + std::to_string(n) + ")");
  const int old = num_pages();
  if (n > std::numeric_limits<int32_t>::max() - old) {
    return invalid_argument("a page allocator of " + std::to_string(old) + " pages cannot grow by " +
                            std::to_string(n) + " (int32 page ids)");
  }
  const size_t total = static_cast<size_t>(old) + static_cast<size_t>(n);
  try {
    // Every page may be free at once: release() must never allocate.
    free_.reserve(total);
    refcounts_.reserve(total);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "page allocator: cannot grow to " + std::to_string(total) + " pages");
  }
  refcounts_.resize(total, 0);
  // Highest ids first: popped from the back, the new pages go out next in one ascending run.
  for (int i = static_cast<int>(total) - 1; i >= old; --i) free_.push_back(i);
  return Status::ok_status();
}

void PageAllocator::retain(int32_t page) {
  if (page < 0 || page >= num_pages()) return;
  int& rc = refcounts_[static_cast<size_t>(page)];
  if (rc > 0) ++rc;  // retaining a free page would hand it out twice
}

void PageAllocator::release(int32_t page) {
  if (page < 0 || page >= num_pages()) return;
  int& rc = refcounts_[static_cast<size_t>(page)];
  if (rc <= 0) return;
  // free_ was reserved for every page, so this push_back never allocates.
  if (--rc == 0) free_.push_back(page);
}

// ---------------------------------------------------------------------------
// PagedKvCache

namespace {

const KvCacheConfig kNoConfig{};
const std::vector<int32_t> kNoPages{};

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

// 64-byte aligned host memory (a cache line; 16 bytes is what the 16-byte
// vector paths need).
struct HostBlock {
  void* ptr = nullptr;
  HostBlock() = default;
  explicit HostBlock(size_t bytes) : ptr(std::aligned_alloc(64, (bytes + 63) / 64 * 64)) {}
  ~HostBlock() { std::free(ptr); }
  HostBlock(HostBlock&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)) {}
  HostBlock& operator=(HostBlock&& o) noexcept {
    if (this != &o) {
      std::free(ptr);
      ptr = std::exchange(o.ptr, nullptr);
    }
    return *this;
  }
};

Status check_config(const KvCacheConfig& c) {
  if (c.num_layers < 1) return invalid_argument("KV cache: num_layers must be >= 1 (got " + std::to_string(c.num_layers) + ")");
  if (c.num_pages < 1) return invalid_argument("KV cache: num_pages must be >= 1 (got " + std::to_string(c.num_pages) + ")");
  if (c.kv_heads < 1) return invalid_argument("KV cache: kv_heads must be >= 1 (got " + std::to_string(c.kv_heads) + ")");
  if (!is_power_of_two(c.page_size) || c.page_size < 16 || c.page_size > 256)
    return invalid_argument("KV cache: page_size must be a power of two in 16..256 (got " +
                            std::to_string(c.page_size) + ")");
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16)
    return unsupported(std::string("KV cache: dtype ") + dtype_name(c.dtype) + " is not supported (bf16, fp16)");
  if (c.device != Device::kCpu && c.device != Device::kCuda) return invalid_argument("KV cache: unknown device");
  if (!head_dim_supported(c.device, c.head_dim))
    return unsupported("KV cache: head_dim " + std::to_string(c.head_dim) + " is not supported on " +
                       (c.device == Device::kCuda ? "CUDA" : "the CPU") + " (" + supported_head_dims_text(c.device) + ")");
#if !FLASHSCOPE_WITH_CUDA
  if (c.device == Device::kCuda)
    return unsupported("KV cache: this build of flashscope has no CUDA backend; use Device::kCpu");
#endif
  // Sizes: page_bytes <= 2^31 · 256 · 128 · 2 fits int64 easily; the pool
  // (num_pages pages, 2·num_layers pools) is checked by division.
  const int64_t page_bytes = int64_t{c.kv_heads} * c.page_size * c.head_dim * dtype_size(c.dtype);
  const int64_t max_bytes = std::numeric_limits<int64_t>::max() / 2;
  if (int64_t{c.num_pages} > max_bytes / page_bytes / (2 * int64_t{c.num_layers}))
    return invalid_argument("KV cache: pool size overflows (num_pages " + std::to_string(c.num_pages) + " × " +
                            std::to_string(page_bytes) + " bytes per page × 2 × " + std::to_string(c.num_layers) +
                            " layers)");
  return {};
}

}  // namespace

struct PagedKvCache::Impl {
  struct Sequence {
    bool live = false;
    int length = 0;
    int reserved = 0;  // pages held whatever the length (reserve)
    std::vector<int32_t> pages;
  };

  KvCacheConfig config;
  PageAllocator allocator;
  size_t page_bytes = 0;  // one page of one layer's K (or V) pool
  // k_pools[layer], v_pools[layer]: exactly one of the two vectors is used.
  std::vector<HostBlock> host_k, host_v;
  std::vector<DeviceBuffer> dev_k, dev_v;
  std::vector<Sequence> seqs;

  void* k_base(int layer) const {
    const auto l = static_cast<size_t>(layer);
    return config.device == Device::kCpu ? host_k[l].ptr : dev_k[l].data();
  }
  void* v_base(int layer) const {
    const auto l = static_cast<size_t>(layer);
    return config.device == Device::kCpu ? host_v[l].ptr : dev_v[l].data();
  }

  Sequence* find(int seq) {
    if (seq < 0 || static_cast<size_t>(seq) >= seqs.size() || !seqs[static_cast<size_t>(seq)].live) return nullptr;
    return &seqs[static_cast<size_t>(seq)];
  }

  int pages_for(int64_t tokens) const {
    return static_cast<int>(ceil_div<int64_t>(tokens, config.page_size));
  }

  // The pages a sequence of `length` tokens and `reserved` pages holds.
  size_t pages_held(int length, int reserved) const {
    return static_cast<size_t>(std::max(pages_for(length), reserved));
  }

  // Copies page `from` to page `to` in every pool (all layers, K and V).
  Status copy_page(int32_t from, int32_t to) {
    const size_t src = static_cast<size_t>(from) * page_bytes;
    const size_t dst = static_cast<size_t>(to) * page_bytes;
    for (int layer = 0; layer < config.num_layers; ++layer) {
      for (void* base : {k_base(layer), v_base(layer)}) {
        char* b = static_cast<char*>(base);
        if (config.device == Device::kCpu) {
          std::memcpy(b + dst, b + src, page_bytes);
          continue;
        }
#if FLASHSCOPE_WITH_CUDA
        // On the legacy default stream: ordered after work already queued on
        // blocking streams (append_kv of the tokens being copied included);
        // callers on non-blocking streams synchronize before append_slots.
        const cudaError_t err = cudaMemcpy(b + dst, b + src, page_bytes, cudaMemcpyDeviceToDevice);
        if (err != cudaSuccess) {
          cudaGetLastError();
          return device_error(std::string("KV cache copy-on-write of a page: ") + cudaGetErrorString(err));
        }
#endif
      }
    }
    return {};
  }
};

PagedKvCache::PagedKvCache() = default;
PagedKvCache::~PagedKvCache() = default;
PagedKvCache::PagedKvCache(PagedKvCache&&) noexcept = default;
PagedKvCache& PagedKvCache::operator=(PagedKvCache&&) noexcept = default;

Result<PagedKvCache> PagedKvCache::create(const KvCacheConfig& config) {
  FLASHSCOPE_RETURN_IF_ERROR(check_config(config));
  PagedKvCache cache;
  try {
    cache.impl_ = std::make_unique<Impl>();
    Impl& im = *cache.impl_;
    im.config = config;
    im.allocator = PageAllocator(config.num_pages);
    im.page_bytes = static_cast<size_t>(config.kv_heads) * config.page_size * config.head_dim * dtype_size(config.dtype);
    const size_t pool_bytes = im.page_bytes * static_cast<size_t>(config.num_pages);
    const std::string what = "KV cache pool of " + std::to_string(pool_bytes) + " bytes per layer for K and for V";
    for (int layer = 0; layer < config.num_layers; ++layer) {
      if (config.device == Device::kCpu) {
        im.host_k.emplace_back(pool_bytes);
        im.host_v.emplace_back(pool_bytes);
        if (im.host_k.back().ptr == nullptr || im.host_v.back().ptr == nullptr)
          return Status(StatusCode::kOutOfMemory, what + ": host allocation failed");
      } else {
        for (auto* pools : {&im.dev_k, &im.dev_v}) {
          auto buf = DeviceBuffer::allocate(pool_bytes);
          if (!buf.ok()) return Status(buf.status().code(), what + ": " + buf.status().message());
          pools->push_back(std::move(buf.value()));
        }
      }
    }
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "KV cache: cannot allocate its bookkeeping");
  }
  return cache;
}

const KvCacheConfig& PagedKvCache::config() const { return impl_ ? impl_->config : kNoConfig; }

void* PagedKvCache::k_pages(int layer) const {
  if (!impl_ || layer < 0 || layer >= impl_->config.num_layers) return nullptr;
  return impl_->k_base(layer);
}

void* PagedKvCache::v_pages(int layer) const {
  if (!impl_ || layer < 0 || layer >= impl_->config.num_layers) return nullptr;
  return impl_->v_base(layer);
}

int PagedKvCache::create_sequence() {
  if (!impl_) return -1;
  auto& seqs = impl_->seqs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].live) {
      seqs[i] = Impl::Sequence{true, 0, 0, {}};
      return static_cast<int>(i);
    }
  }
  try {
    seqs.push_back(Impl::Sequence{true, 0, 0, {}});
  } catch (const std::bad_alloc&) {
    return -1;
  }
  return static_cast<int>(seqs.size() - 1);
}

Result<int> PagedKvCache::fork_sequence(int parent) {
  if (!impl_) return invalid_argument("fork_sequence on an empty (moved-from or default) KV cache");
  if (impl_->find(parent) == nullptr) return invalid_argument("fork_sequence: no sequence " + std::to_string(parent));
  // Only the pages holding tokens: the parent's reserved ones stay its own.
  std::vector<int32_t> pages;
  try {
    const Impl::Sequence& p = *impl_->find(parent);
    pages.assign(p.pages.begin(), p.pages.begin() + impl_->pages_for(p.length));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "fork_sequence: cannot copy the block table");
  }
  const int child = create_sequence();  // may reallocate seqs: look the parent up again below
  if (child < 0) return Status(StatusCode::kOutOfMemory, "fork_sequence: cannot add a sequence");
  Impl::Sequence& c = impl_->seqs[static_cast<size_t>(child)];
  c.length = impl_->find(parent)->length;
  c.pages = std::move(pages);
  for (int32_t page : c.pages) impl_->allocator.retain(page);
  return child;
}

Status PagedKvCache::free_sequence(int seq) {
  if (!impl_) return invalid_argument("free_sequence on an empty (moved-from or default) KV cache");
  Impl::Sequence* s = impl_->find(seq);
  if (s == nullptr) return invalid_argument("free_sequence: no sequence " + std::to_string(seq));
  // Back to front: the next allocation hands them out in their old order, so
  // a sequence's pages stay ascending runs.
  for (auto it = s->pages.rbegin(); it != s->pages.rend(); ++it) impl_->allocator.release(*it);
  *s = Impl::Sequence{};
  return {};
}

Result<std::vector<Slot>> PagedKvCache::append_slots(int seq, int n) {
  if (!impl_) return invalid_argument("append_slots on an empty (moved-from or default) KV cache");
  Impl& im = *impl_;
  Impl::Sequence* s = im.find(seq);
  if (s == nullptr) return invalid_argument("append_slots: no sequence " + std::to_string(seq));
  if (n < 0) return invalid_argument("append_slots: n must be >= 0 (got " + std::to_string(n) + ")");
  if (n == 0) return std::vector<Slot>{};
  if (int64_t{s->length} + n > std::numeric_limits<int32_t>::max())
    return invalid_argument("append_slots: sequence " + std::to_string(seq) + " would exceed 2^31 - 1 tokens");

  const int P = im.config.page_size;
  const int old_len = s->length;
  const int new_len = old_len + n;
  const size_t first = static_cast<size_t>(old_len / P);  // the first page written
  const size_t end = static_cast<size_t>(im.pages_for(new_len));
  const int new_pages = static_cast<int>(end > s->pages.size() ? end - s->pages.size() : 0);
  // Held pages about to be written that another sequence also holds. Only
  // the first can hold tokens of this sequence (and then is copied).
  int shared = 0;
  for (size_t i = first; i < std::min(end, s->pages.size()); ++i)
    if (im.allocator.refcount(s->pages[i]) > 1) ++shared;
  const bool cow = old_len % P != 0 && first < s->pages.size() && im.allocator.refcount(s->pages[first]) > 1;
  const int needed = new_pages + shared;
  if (needed > im.allocator.free_pages())
    return Status(StatusCode::kOutOfMemory,
                  "KV cache is full: sequence " + std::to_string(seq) + " needs " + std::to_string(needed) +
                      " more pages for " + std::to_string(n) + " tokens, " + std::to_string(im.allocator.free_pages()) +
                      " free of " + std::to_string(im.allocator.num_pages()));

  std::vector<Slot> slots;
  try {
    slots.reserve(static_cast<size_t>(n));
    s->pages.reserve(std::max(end, s->pages.size()));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "append_slots: cannot allocate the slot list");
  }
  auto fresh = im.allocator.allocate(needed);
  if (!fresh.ok()) return fresh.status();
  if (cow) {
    const Status st = im.copy_page(s->pages[first], fresh->back());
    if (!st.ok()) {
      for (int32_t page : fresh.value()) im.allocator.release(page);
      return st;
    }
  }
  // Replacements come off the back of `fresh` (the copy first), new pages
  // off the front.
  for (size_t i = first; i < std::min(end, s->pages.size()); ++i) {
    int32_t& page = s->pages[i];
    if (im.allocator.refcount(page) <= 1) continue;
    im.allocator.release(page);  // still held by the other sequences
    page = fresh->back();
    fresh->pop_back();
  }
  for (int32_t page : fresh.value()) s->pages.push_back(page);
  for (int pos = old_len; pos < new_len; ++pos)
    slots.push_back(Slot{s->pages[static_cast<size_t>(pos / P)]} * P + pos % P);
  s->length = new_len;
  return slots;
}

Status PagedKvCache::truncate(int seq, int new_length) {
  if (!impl_) return invalid_argument("truncate on an empty (moved-from or default) KV cache");
  Impl::Sequence* s = impl_->find(seq);
  if (s == nullptr) return invalid_argument("truncate: no sequence " + std::to_string(seq));
  if (new_length < 0 || new_length > s->length)
    return invalid_argument("truncate: new_length " + std::to_string(new_length) + " is outside [0, " +
                            std::to_string(s->length) + "] for sequence " + std::to_string(seq));
  const size_t keep = impl_->pages_held(new_length, s->reserved);
  for (size_t i = s->pages.size(); i > keep; --i) impl_->allocator.release(s->pages[i - 1]);
  s->pages.resize(keep);
  s->length = new_length;
  return {};
}

Status PagedKvCache::reserve(int seq, int tokens) {
  if (!impl_) return invalid_argument("reserve on an empty (moved-from or default) KV cache");
  Impl& im = *impl_;
  Impl::Sequence* s = im.find(seq);
  if (s == nullptr) return invalid_argument("reserve: no sequence " + std::to_string(seq));
  if (tokens < 0) return invalid_argument("reserve: tokens must be >= 0 (got " + std::to_string(tokens) + ")");
  const int want = im.pages_for(tokens);
  const int more = want - static_cast<int>(s->pages.size());
  if (more > im.allocator.free_pages())
    return Status(StatusCode::kOutOfMemory,
                  "KV cache is full: reserving " + std::to_string(tokens) + " tokens for sequence " +
                      std::to_string(seq) + " needs " + std::to_string(more) + " more pages, " +
                      std::to_string(im.allocator.free_pages()) + " free of " + std::to_string(im.allocator.num_pages()));
  if (more > 0) {
    try {
      s->pages.reserve(static_cast<size_t>(want));
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "reserve: cannot grow the block table");
    }
    auto fresh = im.allocator.allocate(more);
    if (!fresh.ok()) return fresh.status();
    for (int32_t page : fresh.value()) s->pages.push_back(page);
  }
  s->reserved = std::max(s->reserved, want);
  return {};
}

Status PagedKvCache::grow(int pages) {
  if (!impl_) return invalid_argument("grow on an empty (moved-from or default) KV cache");
  if (pages < 0) return invalid_argument("grow: pages must be >= 0 (got " + std::to_string(pages) + ")");
  if (pages == 0) return {};
  Impl& im = *impl_;
  KvCacheConfig grown = im.config;
  if (int64_t{grown.num_pages} + pages > std::numeric_limits<int32_t>::max())
    return invalid_argument("grow: a cache of " + std::to_string(grown.num_pages) + " pages cannot grow by " +
                            std::to_string(pages) + " (int32 page ids)");
  grown.num_pages += pages;
  FLASHSCOPE_RETURN_IF_ERROR(check_config(grown));
  const size_t old_bytes = im.page_bytes * static_cast<size_t>(im.config.num_pages);
  const size_t new_bytes = im.page_bytes * static_cast<size_t>(grown.num_pages);
  // Pages of page ids >= num_pages are all free: when none is held there is
  // nothing to copy (and nothing on the device to wait for).
  const bool copy = im.allocator.free_pages() < im.allocator.num_pages();
  const std::string what = "growing the KV cache to " + std::to_string(grown.num_pages) + " pages";
  std::vector<HostBlock> host_k, host_v;
  std::vector<DeviceBuffer> dev_k, dev_v;
  PageAllocator ids;
  try {
    ids = im.allocator;
    FLASHSCOPE_RETURN_IF_ERROR(ids.grow(pages));
    if (im.config.device == Device::kCpu) {
      for (int layer = 0; layer < im.config.num_layers; ++layer) {
        for (auto* pools : {&host_k, &host_v}) {
          pools->emplace_back(new_bytes);
          if (pools->back().ptr == nullptr) return Status(StatusCode::kOutOfMemory, what + ": host allocation failed");
        }
        if (copy) {
          std::memcpy(host_k.back().ptr, im.host_k[static_cast<size_t>(layer)].ptr, old_bytes);
          std::memcpy(host_v.back().ptr, im.host_v[static_cast<size_t>(layer)].ptr, old_bytes);
        }
      }
    } else {
      for (int layer = 0; layer < im.config.num_layers; ++layer) {
        for (auto* pools : {&dev_k, &dev_v}) {
          auto buf = DeviceBuffer::allocate(new_bytes);
          if (!buf.ok()) return Status(buf.status().code(), what + ": " + buf.status().message());
          pools->push_back(std::move(buf.value()));
        }
      }
#if FLASHSCOPE_WITH_CUDA
      if (copy) {
        auto check = [&](cudaError_t err, const char* step) -> Status {
          if (err == cudaSuccess) return {};
          cudaGetLastError();
          return device_error(what + ": " + step + ": " + cudaGetErrorString(err));
        };
        // Every stream's work on the old pools ends before they are read.
        FLASHSCOPE_RETURN_IF_ERROR(check(cudaDeviceSynchronize(), "waiting for the device"));
        for (size_t l = 0; l < dev_k.size(); ++l) {
          FLASHSCOPE_RETURN_IF_ERROR(check(
              cudaMemcpy(dev_k[l].data(), im.dev_k[l].data(), old_bytes, cudaMemcpyDeviceToDevice), "copying K"));
          FLASHSCOPE_RETURN_IF_ERROR(check(
              cudaMemcpy(dev_v[l].data(), im.dev_v[l].data(), old_bytes, cudaMemcpyDeviceToDevice), "copying V"));
        }
        // A device-to-device cudaMemcpy may return before it is done.
        FLASHSCOPE_RETURN_IF_ERROR(check(cudaDeviceSynchronize(), "copying the pages"));
      }
#endif
    }
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, what + ": cannot allocate its bookkeeping");
  }
  // Nothing can fail from here on: swap the grown pools and ids in.
  im.host_k = std::move(host_k);
  im.host_v = std::move(host_v);
  im.dev_k = std::move(dev_k);
  im.dev_v = std::move(dev_v);
  im.allocator = std::move(ids);
  im.config = grown;
  return {};
}

int PagedKvCache::length(int seq) const {
  if (!impl_) return 0;
  const Impl::Sequence* s = impl_->find(seq);
  return s == nullptr ? 0 : s->length;
}

const std::vector<int32_t>& PagedKvCache::block_table(int seq) const {
  if (!impl_) return kNoPages;
  const Impl::Sequence* s = impl_->find(seq);
  return s == nullptr ? kNoPages : s->pages;
}

int64_t PagedKvCache::capacity(int seq) const {
  if (!impl_) return 0;
  const Impl::Sequence* s = impl_->find(seq);
  return s == nullptr ? 0 : static_cast<int64_t>(s->pages.size()) * impl_->config.page_size;
}

int PagedKvCache::free_pages() const { return impl_ ? impl_->allocator.free_pages() : 0; }

int PagedKvCache::num_pages() const { return impl_ ? impl_->config.num_pages : 0; }

bool PagedKvCache::valid_sequence(int seq) const { return impl_ && impl_->find(seq) != nullptr; }

// ---------------------------------------------------------------------------
// append_kv

namespace {

Status check_new_tensor(const char* name, const AttnTensor& t, const AppendKvParams& p) {
  const std::string n = name;
  if (t.data == nullptr) return invalid_argument("append_kv: " + n + ".data is null");
  if (t.seq_stride < p.head_dim || t.head_stride < p.head_dim)
    return invalid_argument("append_kv: " + n + " strides must be >= head_dim with head_dim contiguous (seq_stride=" +
                            std::to_string(t.seq_stride) + ", head_stride=" + std::to_string(t.head_stride) +
                            ", head_dim=" + std::to_string(p.head_dim) + ")");
  if (p.device == Device::kCuda) {
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
      return invalid_argument("append_kv: " + n + ".data is not 16-byte aligned");
    if (t.seq_stride % 8 != 0 || t.head_stride % 8 != 0)
      return invalid_argument("append_kv: " + n + " strides must be multiples of 8 elements (16 bytes) on CUDA");
  }
  return {};
}

Status validate_append(const AppendKvParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16)
    return unsupported(std::string("append_kv: dtype ") + dtype_name(p.dtype) + " is not supported (bf16, fp16)");
  if (!head_dim_supported(p.device, p.head_dim))
    return unsupported("append_kv: head_dim " + std::to_string(p.head_dim) + " is not supported on " +
                       (p.device == Device::kCuda ? "CUDA" : "the CPU") + " (" + supported_head_dims_text(p.device) + ")");
  if (p.kv_heads < 1) return invalid_argument("append_kv: kv_heads must be >= 1");
  if (!is_power_of_two(p.page_size) || p.page_size < 16 || p.page_size > 256)
    return invalid_argument("append_kv: page_size must be a power of two in 16..256 (got " +
                            std::to_string(p.page_size) + ")");
  if (p.num_tokens < 0) return invalid_argument("append_kv: num_tokens must be >= 0");
  if (p.num_pages < 0) return invalid_argument("append_kv: num_pages must be >= 0 (0 = unchecked)");
  if (p.device != Device::kCpu && p.device != Device::kCuda) return invalid_argument("append_kv: unknown device");
  if (p.num_tokens == 0) return {};
  if (p.slots == nullptr) return invalid_argument("append_kv: slots is null");
  if (p.k_pages == nullptr || p.v_pages == nullptr) return invalid_argument("append_kv: k_pages or v_pages is null");
  FLASHSCOPE_RETURN_IF_ERROR(check_new_tensor("k_new", p.k_new, p));
  FLASHSCOPE_RETURN_IF_ERROR(check_new_tensor("v_new", p.v_new, p));
  if (p.device == Device::kCuda) {
    if (reinterpret_cast<uintptr_t>(p.k_pages) % 16 != 0 || reinterpret_cast<uintptr_t>(p.v_pages) % 16 != 0)
      return invalid_argument("append_kv: k_pages and v_pages must be 16-byte aligned on CUDA");
    if (reinterpret_cast<uintptr_t>(p.slots) % alignof(Slot) != 0)
      return invalid_argument("append_kv: slots must be 8-byte aligned");
  } else if (p.num_pages > 0) {
    // Host slots are readable: reject the whole call before writing any token.
    const Slot limit = Slot{p.num_pages} * p.page_size;
    for (int i = 0; i < p.num_tokens; ++i) {
      if (p.slots[i] >= limit)
        return invalid_argument("append_kv: slot " + std::to_string(p.slots[i]) + " of token " + std::to_string(i) +
                                " is past the pool (" + std::to_string(p.num_pages) + " pages of " +
                                std::to_string(p.page_size) + ")");
    }
  }
  return {};
}

// One token at a time, one head_dim row per (token, head): pages hold
// [kv_heads, page_size, head_dim], so the rows of one token are page_size
// rows apart.
void append_kv_cpu(const AppendKvParams& p) {
  const size_t elem = static_cast<size_t>(dtype_size(p.dtype));
  const size_t row_bytes = static_cast<size_t>(p.head_dim) * elem;
  auto* k_pages = static_cast<char*>(p.k_pages);
  auto* v_pages = static_cast<char*>(p.v_pages);
  const auto* k_new = static_cast<const char*>(p.k_new.data);
  const auto* v_new = static_cast<const char*>(p.v_new.data);
  for (int i = 0; i < p.num_tokens; ++i) {
    const Slot slot = p.slots[i];
    if (slot < 0) continue;  // padding token
    const int64_t page = slot / p.page_size, offset = slot % p.page_size;
    for (int h = 0; h < p.kv_heads; ++h) {
      const int64_t dst = ((page * p.kv_heads + h) * p.page_size + offset) * p.head_dim;
      std::memcpy(k_pages + dst * elem, k_new + (i * p.k_new.seq_stride + h * p.k_new.head_stride) * elem, row_bytes);
      std::memcpy(v_pages + dst * elem, v_new + (i * p.v_new.seq_stride + h * p.v_new.head_stride) * elem, row_bytes);
    }
  }
}

}  // namespace

Status append_kv(const AppendKvParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(validate_append(p));
  if (p.num_tokens == 0) return {};
  if (p.device == Device::kCpu) {
    append_kv_cpu(p);
    return {};
  }
  return cuda::append_kv(p);
}

}  // namespace flashscope
