// The model's KV page pool on CUDA (see cuda_model.hpp for why there is one
// per model): pages handed to sequences at creation, the pool grown by
// reallocation when a new sequence does not fit, freed with its last page.
// Which pages are free is the public PagedKvCache's bookkeeping, a
// PageAllocator (flashscope/kv_cache.hpp).
//
// Layout of the one allocation, for num_pages pages of page_bytes
// (kv_heads · kPageSize · head_dim bf16):
//   [layer 0 K pages][layer 0 V pages][layer 1 K pages] ... each [num_pages, KV, kPageSize, D]
// Growing changes num_pages, so every layer's pools move: each is copied to
// its new place (same page ids), then the old allocation is freed.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "backends/cuda/cuda_model.hpp"

namespace flashscope::model {

#if FLASHSCOPE_WITH_CUDA

namespace {

// Consecutive ids from `at` on, as one run: pages are poisoned run by run.
size_t run_length(const std::vector<int32_t>& ids, size_t at) {
  size_t n = 1;
  while (at + n < ids.size() && ids[at + n] == ids[at] + static_cast<int32_t>(n)) ++n;
  return n;
}

Status grow(CudaModel& cm, const ModelConfig& c, int more) {
  KvPool& pool = cm.pool;
  const int64_t held = pool.num_pages() - pool.ids.free_pages();
  const int64_t want = std::max<int64_t>(int64_t{pool.num_pages()} + more, 2 * int64_t{pool.num_pages()});
  if (want > std::numeric_limits<int32_t>::max() / kPageSize)
    return Status(StatusCode::kOutOfMemory, "the KV page pool cannot hold " + std::to_string(want) + " pages");
  const int new_pages = static_cast<int>(want);
  const size_t pools = 2 * static_cast<size_t>(c.n_layers);
  auto fresh = device_alloc(pools * static_cast<size_t>(new_pages) * pool.page_bytes,
                            ("the KV page pool (" + std::to_string(new_pages) + " pages of " +
                             std::to_string(kPageSize) + " tokens)").c_str());
  if (!fresh.ok()) return fresh.status();
  if (held > 0) {
    // Every stream's work on the old pages has finished before they are read.
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaDeviceSynchronize(), "waiting for the device before the KV pool grows"));
    const size_t old_bytes = static_cast<size_t>(pool.num_pages()) * pool.page_bytes;
    const size_t new_bytes = static_cast<size_t>(new_pages) * pool.page_bytes;
    for (size_t p = 0; p < pools; ++p) {
      FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
          cudaMemcpy(static_cast<char*>(fresh->data()) + p * new_bytes,
                     static_cast<const char*>(pool.buffer.data()) + p * old_bytes, old_bytes, cudaMemcpyDeviceToDevice),
          "copying the KV pages to the grown pool"));
    }
    // A device-to-device cudaMemcpy may return before it is done.
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaDeviceSynchronize(), "copying the KV pages to the grown pool"));
  }
  // The new pages go out next, in one ascending run (PageAllocator::grow).
  FLASHSCOPE_RETURN_IF_ERROR(pool.ids.grow(new_pages - pool.num_pages()));
  pool.buffer = std::move(fresh).value();
  ++pool.generation;
  return {};
}

// Reverse order: the next allocate() hands these pages out in the order
// they were taken, so a sequence's pages stay ascending runs.
void release_pages(KvPool& pool, const std::vector<int32_t>& pages) {
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) pool.ids.release(*it);
}

}  // namespace

Result<std::vector<int32_t>> pool_take(CudaModel& cm, const ModelConfig& c, int pages, cudaStream_t stream) {
  KvPool& pool = cm.pool;
  pool.page_bytes = static_cast<size_t>(c.n_kv_heads) * kPageSize * static_cast<size_t>(c.head_dim) * 2;
  if (pages < 1) return invalid_argument("internal: a sequence needs at least one page");
  if (pool.ids.free_pages() < pages) FLASHSCOPE_RETURN_IF_ERROR(grow(cm, c, pages - pool.ids.free_pages()));
  auto taken = pool.ids.allocate(pages);
  if (!taken.ok()) return taken.status();
  // NaN pages: attention must never read a slot its sequence did not write
  // (a reused page still holds another sequence's keys).
  for (size_t at = 0; at < taken->size();) {
    const size_t n = run_length(*taken, at);
    for (int l = 0; l < c.n_layers; ++l) {
      for (void* base : {pool.k_pages(l), pool.v_pages(l)}) {
        const Status poisoned = poison(static_cast<char*>(base) + static_cast<size_t>((*taken)[at]) * pool.page_bytes,
                                       n * pool.page_bytes, stream, "a sequence's KV pages");
        if (!poisoned.ok()) {
          release_pages(pool, *taken);  // all or nothing: the free list as it was
          return poisoned;
        }
      }
    }
    at += n;
  }
  return taken;
}

void pool_give_back(CudaModel& cm, const std::vector<int32_t>& pages) {
  KvPool& pool = cm.pool;
  release_pages(pool, pages);
  if (pool.ids.free_pages() == pool.num_pages() && pool.num_pages() > 0) {
    pool.buffer = DeviceBuffer();  // cudaFree waits for the device
    pool.ids = PageAllocator();
    ++pool.generation;
  }
}

#endif  // FLASHSCOPE_WITH_CUDA

}  // namespace flashscope::model
