// The model's KV page pool on CUDA (see cuda_model.hpp for why there is one
// per model): pages handed to sequences at creation, the pool grown by
// reallocation when a new sequence does not fit, freed with its last page.
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
  const int64_t held = pool.num_pages - static_cast<int64_t>(pool.free.size());
  const int64_t want = std::max<int64_t>(int64_t{pool.num_pages} + more, 2 * int64_t{pool.num_pages});
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
    const size_t old_bytes = static_cast<size_t>(pool.num_pages) * pool.page_bytes;
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
  try {
    pool.free.reserve(static_cast<size_t>(new_pages));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot grow the KV pool's free list");
  }
  // Highest ids first: taking from the back hands out the new pages in one ascending run.
  for (int id = new_pages - 1; id >= pool.num_pages; --id) pool.free.push_back(id);
  pool.buffer = std::move(fresh).value();
  pool.num_pages = new_pages;
  ++pool.generation;
  return {};
}

}  // namespace

Result<std::vector<int32_t>> pool_take(CudaModel& cm, const ModelConfig& c, int pages, cudaStream_t stream) {
  KvPool& pool = cm.pool;
  pool.page_bytes = static_cast<size_t>(c.n_kv_heads) * kPageSize * static_cast<size_t>(c.head_dim) * 2;
  if (pages < 1) return invalid_argument("internal: a sequence needs at least one page");
  if (static_cast<int>(pool.free.size()) < pages)
    FLASHSCOPE_RETURN_IF_ERROR(grow(cm, c, pages - static_cast<int>(pool.free.size())));
  std::vector<int32_t> taken;
  try {
    taken.assign(pool.free.end() - pages, pool.free.end());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "cannot allocate a block table");
  }
  std::reverse(taken.begin(), taken.end());  // the back of the free list first: ascending ids
  // NaN pages: attention must never read a slot its sequence did not write
  // (a reused page still holds another sequence's keys).
  for (size_t at = 0; at < taken.size();) {
    const size_t n = run_length(taken, at);
    for (int l = 0; l < c.n_layers; ++l) {
      for (void* base : {pool.k_pages(l), pool.v_pages(l)}) {
        FLASHSCOPE_RETURN_IF_ERROR(poison(static_cast<char*>(base) + static_cast<size_t>(taken[at]) * pool.page_bytes,
                                          n * pool.page_bytes, stream, "a sequence's KV pages"));
      }
    }
    at += n;
  }
  pool.free.resize(pool.free.size() - static_cast<size_t>(pages));
  return taken;
}

void pool_give_back(CudaModel& cm, const std::vector<int32_t>& pages) {
  KvPool& pool = cm.pool;
  // Reverse order: the next sequence gets these pages in ascending runs again.
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) pool.free.push_back(*it);
  if (static_cast<int>(pool.free.size()) == pool.num_pages && pool.num_pages > 0) {
    pool.buffer = DeviceBuffer();  // cudaFree waits for the device
    pool.free.clear();
    pool.num_pages = 0;
    ++pool.generation;
  }
}

#endif  // FLASHSCOPE_WITH_CUDA

}  // namespace flashscope::model
