// The model's KV pages on CUDA (see cuda_model.hpp for why there is one
// cache per model): the public PagedKvCache, made when the first sequence
// comes, each sequence's pages reserved at its creation, the cache grown when
// a new sequence does not fit and dropped with its last sequence.
//
// Growing reallocates every layer's pools (PagedKvCache::grow copies the held
// pages, page ids stay); the pool's generation tells the step scratches,
// whose graphs baked the old addresses.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "backends/cuda/cuda_model.hpp"
#include "util/math.hpp"

namespace flashscope::model {

#if FLASHSCOPE_WITH_CUDA

namespace {

// Consecutive ids from `at` on, as one run: pages are poisoned run by run.
size_t run_length(const std::vector<int32_t>& ids, size_t at) {
  size_t n = 1;
  while (at + n < ids.size() && ids[at + n] == ids[at] + static_cast<int32_t>(n)) ++n;
  return n;
}

// Room for `pages` more pages: the cache made, or grown at least twofold
// (so a run of new sequences reallocates a logarithmic number of times).
Status make_room(KvPool& pool, const ModelConfig& c, int pages) {
  if (pool.cache.free_pages() >= pages) return {};
  const int64_t have = pool.num_pages();
  const int64_t want = std::max(have + pages - pool.cache.free_pages(), 2 * have);
  if (want > std::numeric_limits<int32_t>::max() / kPageSize)
    return Status(StatusCode::kOutOfMemory, "the KV page pool cannot hold " + std::to_string(want) + " pages");
  if (have == 0) {
    KvCacheConfig kc;
    kc.num_layers = c.n_layers;
    kc.num_pages = static_cast<int>(want);
    kc.page_size = kPageSize;
    kc.kv_heads = c.n_kv_heads;
    kc.head_dim = c.head_dim;
    kc.dtype = DType::kBF16;
    kc.device = Device::kCuda;
    auto made = PagedKvCache::create(kc);
    if (!made.ok()) return made.status();
    pool.cache = std::move(made).value();
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(pool.cache.grow(static_cast<int>(want - have)));
  }
  ++pool.generation;
  return {};
}

}  // namespace

Result<int> pool_take(CudaModel& cm, const ModelConfig& c, int tokens, cudaStream_t stream) {
  KvPool& pool = cm.pool;
  if (tokens < 1) return invalid_argument("internal: a sequence needs at least one page");
  const int pages = ceil_div(tokens, kPageSize);
  FLASHSCOPE_RETURN_IF_ERROR(make_room(pool, c, pages));
  const int seq = pool.cache.create_sequence();
  if (seq < 0) return Status(StatusCode::kOutOfMemory, "cannot add a sequence to the KV cache");
  Status st = pool.cache.reserve(seq, tokens);
  // NaN pages: attention must never read a slot its sequence did not write
  // (a reused page still holds another sequence's keys).
  const std::vector<int32_t>& taken = pool.cache.block_table(seq);
  const size_t page_bytes = static_cast<size_t>(c.n_kv_heads) * kPageSize * static_cast<size_t>(c.head_dim) * 2;
  for (size_t at = 0; st.ok() && at < taken.size();) {
    const size_t n = run_length(taken, at);
    for (int l = 0; st.ok() && l < c.n_layers; ++l) {
      for (void* base : {pool.k_pages(l), pool.v_pages(l)}) {
        if (st.ok())
          st = poison(static_cast<char*>(base) + static_cast<size_t>(taken[at]) * page_bytes, n * page_bytes, stream,
                      "a sequence's KV pages");
      }
    }
    at += n;
  }
  if (!st.ok()) {
    pool_give_back(cm, seq);  // all or nothing: the free list as it was, an emptied cache freed
    return st;
  }
  return seq;
}

void pool_give_back(CudaModel& cm, int seq) {
  KvPool& pool = cm.pool;
  (void)pool.cache.free_sequence(seq);  // kInvalidArgument only for an id it never gave
  if (pool.num_pages() > 0 && pool.cache.free_pages() == pool.num_pages()) {
    pool.cache = PagedKvCache();  // cudaFree waits for the device
    ++pool.generation;
  }
}

#endif  // FLASHSCOPE_WITH_CUDA

}  // namespace flashscope::model
