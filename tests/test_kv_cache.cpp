// The paged KV cache on the host: the page allocator's reference counts,
// slots across page boundaries, fork with copy-on-write, truncate, free,
// running out of pages without changing anything, reserved pages and growing
// the pools (what the model engine relies on), config validation, and
// append_kv writing exactly the elements it should (guard values elsewhere
// in the pool stay bit for bit).
//
// Data checks write a distinct value per (layer, K/V, token position,
// head, dim) through append_kv, so a copy-on-write that copied the wrong
// page, the wrong layer or too little shows up as a wrong element.
#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "flashscope/device.hpp"
#include "flashscope/half.hpp"
#include "flashscope/kv_cache.hpp"

using namespace flashscope;

namespace {

constexpr uint16_t kGuard = 0x7E57;

KvCacheConfig small_config(int page_size = 16, int num_pages = 8, int layers = 1) {
  KvCacheConfig c;
  c.num_layers = layers;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.dtype = DType::kBF16;
  c.device = Device::kCpu;
  return c;
}

PagedKvCache make_cache(const KvCacheConfig& c) {
  auto r = PagedKvCache::create(c);
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  return std::move(r.value());
}

size_t pool_elems(const KvCacheConfig& c) { return size_t(c.num_pages) * c.kv_heads * c.page_size * c.head_dim; }

// Marks every element of every pool with kGuard.
void fill_guard(PagedKvCache& cache) {
  const KvCacheConfig& c = cache.config();
  for (int l = 0; l < c.num_layers; ++l) {
    auto* k = static_cast<uint16_t*>(cache.k_pages(l));
    auto* v = static_cast<uint16_t*>(cache.v_pages(l));
    std::fill(k, k + pool_elems(c), kGuard);
    std::fill(v, v + pool_elems(c), kGuard);
  }
}

// The value token `pos` of a sequence stores; `tag` tells sequences apart
// after they diverge (forks write their own tokens with another tag).
uint16_t value_of(int tag, int layer, int kv, int pos, int head, int d) {
  return static_cast<uint16_t>((tag * 7919 + layer * 1009 + kv * 503 + pos * 131 + head * 17 + d) % 30000 + 1);
}

// Appends n tokens to seq through append_slots + append_kv (every layer),
// token position p carrying value_of(tag, ...).
void append_tokens(PagedKvCache& cache, int seq, int n, int tag) {
  const KvCacheConfig& c = cache.config();
  const int start = cache.length(seq);
  auto slots = cache.append_slots(seq, n);
  REQUIRE_MESSAGE(slots.ok(), slots.status().to_string());
  REQUIRE(slots->size() == size_t(n));
  const int row = c.kv_heads * c.head_dim;
  for (int l = 0; l < c.num_layers; ++l) {
    std::vector<uint16_t> k(size_t(n) * row), v(size_t(n) * row);
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < c.kv_heads; ++h)
        for (int d = 0; d < c.head_dim; ++d) {
          k[size_t(i) * row + h * c.head_dim + d] = value_of(tag, l, 0, start + i, h, d);
          v[size_t(i) * row + h * c.head_dim + d] = value_of(tag, l, 1, start + i, h, d);
        }
    AppendKvParams a;
    a.k_new = bshd(k.data(), n, c.kv_heads, c.head_dim);
    a.v_new = bshd(v.data(), n, c.kv_heads, c.head_dim);
    a.slots = slots->data();
    a.num_tokens = n;
    a.k_pages = cache.k_pages(l);
    a.v_pages = cache.v_pages(l);
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.page_size = c.page_size;
    a.num_pages = c.num_pages;
    a.dtype = c.dtype;
    const Status st = append_kv(a);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
  }
}

uint16_t stored(const PagedKvCache& cache, int seq, int layer, int kv, int pos, int head, int d) {
  const KvCacheConfig& c = cache.config();
  const int32_t page = cache.block_table(seq)[size_t(pos / c.page_size)];
  const auto* pool = static_cast<const uint16_t*>(kv == 0 ? cache.k_pages(layer) : cache.v_pages(layer));
  return pool[((size_t(page) * c.kv_heads + head) * c.page_size + pos % c.page_size) * c.head_dim + d];
}

// Positions [from, to) of seq hold the values of `tag`, in every layer, K and V.
bool holds(const PagedKvCache& cache, int seq, int from, int to, int tag) {
  const KvCacheConfig& c = cache.config();
  for (int l = 0; l < c.num_layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int pos = from; pos < to; ++pos)
        for (int h = 0; h < c.kv_heads; ++h)
          for (int d = 0; d < c.head_dim; ++d)
            if (stored(cache, seq, l, kv, pos, h, d) != value_of(tag, l, kv, pos, h, d)) return false;
  return true;
}

void check_slots_follow_table(const PagedKvCache& cache, int seq, int start, const std::vector<Slot>& slots) {
  const int P = cache.config().page_size;
  const auto& table = cache.block_table(seq);
  REQUIRE(table.size() == size_t((cache.length(seq) + P - 1) / P));
  for (size_t i = 0; i < slots.size(); ++i) {
    const int pos = start + int(i);
    CHECK(slots[i] == Slot{table[size_t(pos / P)]} * P + pos % P);
  }
}

// Everything a failed call must leave as it was.
struct Snapshot {
  std::vector<int> lengths;
  std::vector<std::vector<int32_t>> tables;
  int free_pages = 0;
  std::vector<uint16_t> pools;
  static Snapshot of(const PagedKvCache& cache, const std::vector<int>& seqs) {
    Snapshot s;
    for (int q : seqs) {
      s.lengths.push_back(cache.length(q));
      s.tables.push_back(cache.block_table(q));
    }
    s.free_pages = cache.free_pages();
    const KvCacheConfig& c = cache.config();
    for (int l = 0; l < c.num_layers; ++l)
      for (const void* pool : {cache.k_pages(l), cache.v_pages(l)}) {
        const auto* x = static_cast<const uint16_t*>(pool);
        s.pools.insert(s.pools.end(), x, x + pool_elems(c));
      }
    return s;
  }
  bool operator==(const Snapshot& o) const {
    return lengths == o.lengths && tables == o.tables && free_pages == o.free_pages && pools == o.pools;
  }
};

}  // namespace

// ---------------------------------------------------------------------------
// PageAllocator

TEST_CASE("page allocator: refcounts, all-or-nothing, stale ids ignored") {
  PageAllocator a(4);
  CHECK(a.num_pages() == 4);
  CHECK(a.free_pages() == 4);
  auto two = a.allocate(2);
  REQUIRE(two.ok());
  CHECK(two.value() == std::vector<int32_t>{0, 1});
  CHECK(a.refcount(0) == 1);
  CHECK(a.refcount(1) == 1);
  CHECK(a.free_pages() == 2);

  auto too_many = a.allocate(3);
  CHECK(too_many.status().code() == StatusCode::kOutOfMemory);
  CHECK(a.free_pages() == 2);  // nothing taken
  CHECK(a.allocate(-1).status().code() == StatusCode::kInvalidArgument);
  auto none = a.allocate(0);
  REQUIRE(none.ok());
  CHECK(none->empty());

  a.retain(0);
  CHECK(a.refcount(0) == 2);
  a.release(0);
  CHECK(a.refcount(0) == 1);
  CHECK(a.free_pages() == 2);
  a.release(0);
  CHECK(a.refcount(0) == 0);
  CHECK(a.free_pages() == 3);

  // A released page is handed out again; stale ids change nothing.
  a.release(0);   // already free
  a.retain(0);    // free: must not resurrect it
  a.retain(-1);
  a.release(99);
  CHECK(a.refcount(0) == 0);
  CHECK(a.refcount(-1) == 0);
  CHECK(a.refcount(99) == 0);
  CHECK(a.free_pages() == 3);
  auto three = a.allocate(3);
  REQUIRE(three.ok());
  CHECK(std::set<int32_t>(three->begin(), three->end()) == std::set<int32_t>{0, 2, 3});
  CHECK(a.free_pages() == 0);
  CHECK(a.allocate(1).status().code() == StatusCode::kOutOfMemory);
}

TEST_CASE("page allocator: grow hands out the new ids first and reuse follows release order") {
  PageAllocator a(3);
  auto first = a.allocate(1);
  REQUIRE(first.ok());
  CHECK(first.value() == std::vector<int32_t>{0});

  CHECK(a.grow(-1).code() == StatusCode::kInvalidArgument);
  CHECK(a.grow(INT_MAX).code() == StatusCode::kInvalidArgument);
  CHECK(a.num_pages() == 3);
  CHECK(a.free_pages() == 2);
  REQUIRE(a.grow(0).ok());
  CHECK(a.num_pages() == 3);

  // The pool the engine grows by reallocation: the new ids come first, in one
  // ascending run, then the pages that were already free.
  REQUIRE(a.grow(3).ok());
  CHECK(a.num_pages() == 6);
  CHECK(a.free_pages() == 5);
  CHECK(a.refcount(5) == 0);
  auto run = a.allocate(4);
  REQUIRE(run.ok());
  CHECK(run.value() == std::vector<int32_t>{3, 4, 5, 1});
  CHECK(a.refcount(5) == 1);

  // Released in reverse, pages go out again in the order they were taken.
  for (auto it = run->rbegin(); it != run->rend(); ++it) a.release(*it);
  auto again = a.allocate(4);
  REQUIRE(again.ok());
  CHECK(again.value() == run.value());

  // Grown from empty (the engine's pool after its last sequence went).
  PageAllocator b;
  CHECK(b.num_pages() == 0);
  REQUIRE(b.grow(2).ok());
  auto both = b.allocate(2);
  REQUIRE(both.ok());
  CHECK(both.value() == std::vector<int32_t>{0, 1});
  b.release(1);
  b.release(0);
  CHECK(b.free_pages() == 2);
}

// ---------------------------------------------------------------------------
// Slots and block tables

TEST_CASE("append_slots: slots follow the block table across page boundaries") {
  for (int P : {16, 64, 256}) {
    CAPTURE(P);
    PagedKvCache cache = make_cache(small_config(P, 64));
    const int seq = cache.create_sequence();
    REQUIRE(cache.valid_sequence(seq));
    CHECK(cache.length(seq) == 0);
    CHECK(cache.block_table(seq).empty());
    std::set<Slot> seen;
    // Chunk sizes that land on, just before and just after page boundaries.
    for (int n : {1, P - 1, 1, 1, P, 2 * P + 3, P - 3, 0, 5 * P}) {
      const int start = cache.length(seq);
      auto slots = cache.append_slots(seq, n);
      REQUIRE_MESSAGE(slots.ok(), slots.status().to_string());
      CHECK(cache.length(seq) == start + n);
      check_slots_follow_table(cache, seq, start, slots.value());
      for (Slot s : slots.value()) CHECK(seen.insert(s).second);  // never handed out twice
    }
    const int pages = int(cache.block_table(seq).size());
    CHECK(cache.free_pages() == 64 - pages);
    // Two interleaved sequences never share a slot.
    const int other = cache.create_sequence();
    auto s2 = cache.append_slots(other, P + 1);
    REQUIRE(s2.ok());
    for (Slot s : s2.value()) CHECK(seen.insert(s).second);
  }
}

TEST_CASE("sequences: ids are reused after free, bad ids are rejected") {
  PagedKvCache cache = make_cache(small_config());
  const int a = cache.create_sequence();
  const int b = cache.create_sequence();
  CHECK(a != b);
  REQUIRE(cache.append_slots(a, 20).ok());  // 2 pages
  CHECK(cache.free_pages() == 6);
  REQUIRE(cache.free_sequence(a).ok());
  CHECK(cache.free_pages() == 8);
  CHECK_FALSE(cache.valid_sequence(a));
  CHECK(cache.free_sequence(a).code() == StatusCode::kInvalidArgument);  // twice
  CHECK(cache.length(a) == 0);
  CHECK(cache.block_table(a).empty());
  CHECK(cache.append_slots(a, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(cache.append_slots(b, -1).status().code() == StatusCode::kInvalidArgument);
  CHECK(cache.append_slots(12345, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(cache.fork_sequence(-3).status().code() == StatusCode::kInvalidArgument);
  CHECK(cache.truncate(a, 0).code() == StatusCode::kInvalidArgument);
  CHECK(cache.create_sequence() == a);  // the smallest free id
}

TEST_CASE("an empty (default or moved-from) cache answers without crashing") {
  PagedKvCache empty;
  CHECK(empty.k_pages(0) == nullptr);
  CHECK(empty.free_pages() == 0);
  CHECK_FALSE(empty.valid_sequence(0));
  CHECK(empty.create_sequence() < 0);
  CHECK(empty.append_slots(0, 1).status().code() == StatusCode::kInvalidArgument);
  PagedKvCache cache = make_cache(small_config());
  PagedKvCache moved = std::move(cache);
  CHECK(moved.k_pages(0) != nullptr);
  CHECK(moved.k_pages(1) == nullptr);  // one layer
  CHECK(moved.k_pages(-1) == nullptr);
}

// ---------------------------------------------------------------------------
// Fork, copy-on-write, truncate, free

TEST_CASE("fork shares pages, and appending into a shared partial page copies it (all layers, K and V)") {
  for (int P : {16, 64}) {
    CAPTURE(P);
    PagedKvCache cache = make_cache(small_config(P, 16, 3));
    fill_guard(cache);
    const int parent = cache.create_sequence();
    append_tokens(cache, parent, P + 5, /*tag=*/1);  // 2 pages, the last holds 5 tokens
    const std::vector<int32_t> parent_table = cache.block_table(parent);
    REQUIRE(parent_table.size() == 2);

    auto child_r = cache.fork_sequence(parent);
    REQUIRE(child_r.ok());
    const int child = child_r.value();
    CHECK(cache.length(child) == P + 5);
    CHECK(cache.block_table(child) == parent_table);
    CHECK(cache.free_pages() == 14);  // fork takes no pages

    // The child's first new token goes into the shared partial page: copy first.
    append_tokens(cache, child, 1, /*tag=*/2);
    const auto& ct = cache.block_table(child);
    CHECK(ct[0] == parent_table[0]);  // the full page stays shared
    CHECK(ct[1] != parent_table[1]);  // the partial one was copied
    CHECK(cache.block_table(parent) == parent_table);
    CHECK(cache.free_pages() == 13);
    CHECK(holds(cache, parent, 0, P + 5, 1));
    CHECK(holds(cache, child, 0, P + 5, 1));  // the shared prefix, through the copy
    CHECK(holds(cache, child, P + 5, P + 6, 2));
    // The parent's page was not written at the child's position.
    for (int l = 0; l < 3; ++l) CHECK(stored(cache, parent, l, 0, P + 5, 0, 0) == kGuard);

    // The child fills its copy in place; the parent, now the only owner of
    // its partial page, writes in place too.
    append_tokens(cache, child, P - 6, 2);
    CHECK(cache.block_table(child)[1] == ct[1]);
    CHECK(cache.free_pages() == 13);
    append_tokens(cache, parent, 3, 3);
    CHECK(cache.block_table(parent) == parent_table);
    CHECK(cache.free_pages() == 13);
    CHECK(holds(cache, parent, 0, P + 5, 1));
    CHECK(holds(cache, parent, P + 5, P + 8, 3));
    CHECK(holds(cache, child, 0, P + 5, 1));
    CHECK(holds(cache, child, P + 5, 2 * P, 2));

    // Freeing the parent keeps the shared first page alive for the child.
    REQUIRE(cache.free_sequence(parent).ok());
    CHECK(cache.free_pages() == 14);
    CHECK(holds(cache, child, 0, P + 5, 1));
    REQUIRE(cache.free_sequence(child).ok());
    CHECK(cache.free_pages() == 16);
  }
}

TEST_CASE("fork at a page boundary: no copy, the next token opens a fresh page") {
  PagedKvCache cache = make_cache(small_config(16, 8, 2));
  fill_guard(cache);
  const int parent = cache.create_sequence();
  append_tokens(cache, parent, 32, 1);
  const int child = cache.fork_sequence(parent).value();
  append_tokens(cache, child, 1, 2);
  CHECK(cache.free_pages() == 5);  // 2 shared + 1 new
  CHECK(cache.block_table(child).size() == 3);
  CHECK(holds(cache, child, 0, 32, 1));
  CHECK(holds(cache, child, 32, 33, 2));
  CHECK(holds(cache, parent, 0, 32, 1));
}

TEST_CASE("forks of forks: every branch keeps its own tokens") {
  PagedKvCache cache = make_cache(small_config(16, 32, 2));
  fill_guard(cache);
  const int root = cache.create_sequence();
  append_tokens(cache, root, 10, 1);
  const int a = cache.fork_sequence(root).value();
  const int b = cache.fork_sequence(a).value();
  append_tokens(cache, a, 4, 2);
  append_tokens(cache, b, 9, 3);
  append_tokens(cache, root, 30, 4);
  CHECK(holds(cache, root, 0, 10, 1));
  CHECK(holds(cache, root, 10, 40, 4));
  CHECK(holds(cache, a, 0, 10, 1));
  CHECK(holds(cache, a, 10, 14, 2));
  CHECK(holds(cache, b, 0, 10, 1));
  CHECK(holds(cache, b, 10, 19, 3));
}

TEST_CASE("truncate releases pages, and appending after it into a shared page copies") {
  PagedKvCache cache = make_cache(small_config(16, 8, 2));
  fill_guard(cache);
  const int seq = cache.create_sequence();
  append_tokens(cache, seq, 40, 1);  // 3 pages
  CHECK(cache.free_pages() == 5);
  CHECK(cache.truncate(seq, 41).code() == StatusCode::kInvalidArgument);
  CHECK(cache.truncate(seq, -1).code() == StatusCode::kInvalidArgument);
  REQUIRE(cache.truncate(seq, 33).ok());  // still 3 pages
  CHECK(cache.free_pages() == 5);
  REQUIRE(cache.truncate(seq, 32).ok());  // 2 pages
  CHECK(cache.free_pages() == 6);
  CHECK(cache.block_table(seq).size() == 2);
  REQUIRE(cache.truncate(seq, 20).ok());
  CHECK(cache.free_pages() == 6);
  CHECK(holds(cache, seq, 0, 20, 1));

  // Rejected drafts on a fork: the other branch's tokens past the cut survive.
  const int fork = cache.fork_sequence(seq).value();  // shares both pages (second holds 4 tokens)
  REQUIRE(cache.truncate(fork, 18).ok());
  append_tokens(cache, fork, 5, 2);  // writes at 18..22: must copy the shared page
  CHECK(cache.block_table(fork)[1] != cache.block_table(seq)[1]);
  CHECK(holds(cache, seq, 0, 20, 1));
  CHECK(holds(cache, fork, 0, 18, 1));
  CHECK(holds(cache, fork, 18, 23, 2));

  REQUIRE(cache.truncate(fork, 0).ok());
  CHECK(cache.block_table(fork).empty());
  CHECK(cache.free_pages() == 6);  // its private copy went back; the first page is still seq's
  append_tokens(cache, fork, 3, 5);
  CHECK(holds(cache, fork, 0, 3, 5));
  CHECK(holds(cache, seq, 0, 20, 1));
}

TEST_CASE("out of pages: kOutOfMemory and every sequence exactly as it was") {
  PagedKvCache cache = make_cache(small_config(16, 6, 2));
  fill_guard(cache);
  const int a = cache.create_sequence();
  append_tokens(cache, a, 21, 1);  // 2 pages, the last partial
  const int b = cache.fork_sequence(a).value();
  const int c = cache.create_sequence();
  append_tokens(cache, c, 40, 3);  // 3 pages
  REQUIRE(cache.free_pages() == 1);
  const std::vector<int> all = {a, b, c};
  const Snapshot before = Snapshot::of(cache, all);

  // Plain shortage: 2 new pages needed, 1 free.
  auto r1 = cache.append_slots(c, 30);
  CHECK(r1.status().code() == StatusCode::kOutOfMemory);
  CHECK_MESSAGE(r1.status().message().find("needs 2") != std::string::npos, r1.status().message());
  CHECK(Snapshot::of(cache, all) == before);
  // Copy-on-write pushes it over: b's partial last page is shared, so 12
  // tokens need its copy plus one new page.
  auto r2 = cache.append_slots(b, 12);
  CHECK(r2.status().code() == StatusCode::kOutOfMemory);
  CHECK(Snapshot::of(cache, all) == before);
  // Exactly what fits still works: the copy alone.
  append_tokens(cache, b, 11, 2);
  CHECK(cache.free_pages() == 0);
  CHECK(holds(cache, a, 0, 21, 1));
  CHECK(holds(cache, b, 0, 21, 1));
  CHECK(holds(cache, b, 21, 32, 2));
  // Full: a fork still works (no pages), an append does not.
  const int d = cache.fork_sequence(c).value();
  CHECK(cache.append_slots(d, 1).status().code() == StatusCode::kOutOfMemory);
  CHECK(cache.length(d) == 40);
}

// ---------------------------------------------------------------------------
// Reserve and grow (what the model engine relies on)

TEST_CASE("reserve: pages taken up front, appends within them take none and move nothing") {
  PagedKvCache cache = make_cache(small_config(16, 8, 2));
  fill_guard(cache);
  const int seq = cache.create_sequence();
  REQUIRE(cache.reserve(seq, 40).ok());  // 3 pages, length still 0
  CHECK(cache.length(seq) == 0);
  CHECK(cache.capacity(seq) == 48);
  CHECK(cache.free_pages() == 5);
  const std::vector<int32_t> table = cache.block_table(seq);
  REQUIRE(table.size() == 3);
  REQUIRE(cache.reserve(seq, 20).ok());  // smaller: a no-op
  CHECK(cache.block_table(seq) == table);

  // Slot by slot through the reserved pages: the table never changes.
  for (int n : {1, 15, 1, 20, 11}) {
    const int start = cache.length(seq);
    auto slots = cache.append_slots(seq, n);
    REQUIRE(slots.ok());
    for (int i = 0; i < n; ++i)
      CHECK(slots.value()[size_t(i)] == Slot{table[size_t((start + i) / 16)]} * 16 + (start + i) % 16);
    CHECK(cache.block_table(seq) == table);
    CHECK(cache.free_pages() == 5);
  }
  CHECK(cache.length(seq) == 48);
  // Past the reservation pages are taken as usual.
  append_tokens(cache, seq, 1, 1);
  CHECK(cache.block_table(seq).size() == 4);
  CHECK(cache.free_pages() == 4);

  // truncate keeps the reserved pages (and releases the one past them).
  REQUIRE(cache.truncate(seq, 0).ok());
  CHECK(cache.block_table(seq) == table);
  CHECK(cache.free_pages() == 5);
  append_tokens(cache, seq, 40, 2);
  CHECK(holds(cache, seq, 0, 40, 2));
  CHECK(cache.block_table(seq) == table);

  // Too many: kOutOfMemory and nothing changed; then free gives all back.
  const int other = cache.create_sequence();
  const Snapshot before = Snapshot::of(cache, {seq, other});
  const Status full = cache.reserve(other, 6 * 16);
  CHECK(full.code() == StatusCode::kOutOfMemory);
  CHECK(Snapshot::of(cache, {seq, other}) == before);
  CHECK(cache.reserve(other, -1).code() == StatusCode::kInvalidArgument);
  CHECK(cache.reserve(12345, 1).code() == StatusCode::kInvalidArgument);
  CHECK(PagedKvCache().reserve(0, 1).code() == StatusCode::kInvalidArgument);
  REQUIRE(cache.free_sequence(seq).ok());
  CHECK(cache.free_pages() == 8);
}

TEST_CASE("reserve with forks: a fork shares only the pages holding tokens, and writes never cross") {
  PagedKvCache cache = make_cache(small_config(16, 16, 2));
  fill_guard(cache);
  const int parent = cache.create_sequence();
  REQUIRE(cache.reserve(parent, 64).ok());  // 4 pages
  append_tokens(cache, parent, 20, 1);      // the second page partly filled
  const int child = cache.fork_sequence(parent).value();
  CHECK(cache.block_table(child).size() == 2);
  CHECK(cache.free_pages() == 12);  // the fork took no page

  // The parent writes on into its partly filled page, which the child shares: copied.
  append_tokens(cache, parent, 30, 2);  // 20..49
  CHECK(cache.block_table(parent)[1] != cache.block_table(child)[1]);
  CHECK(cache.block_table(parent).size() == 4);
  append_tokens(cache, child, 12, 3);  // 20..31 in the child's own page
  CHECK(holds(cache, parent, 0, 20, 1));
  CHECK(holds(cache, parent, 20, 50, 2));
  CHECK(holds(cache, child, 0, 20, 1));
  CHECK(holds(cache, child, 20, 32, 3));

  // A page truncate keeps only for the reservation can still be the fork's:
  // fork at 50 shares pages 0..3, the parent cuts back to 10 and writes past
  // 16 again, the fork's tokens there must survive.
  const int late = cache.fork_sequence(parent).value();
  REQUIRE(cache.truncate(parent, 10).ok());
  CHECK(cache.block_table(parent).size() == 4);
  append_tokens(cache, parent, 40, 4);  // 10..49: every page it writes is shared with `late`
  CHECK(holds(cache, late, 0, 20, 1));
  CHECK(holds(cache, late, 20, 50, 2));
  CHECK(holds(cache, parent, 0, 10, 1));
  CHECK(holds(cache, parent, 10, 50, 4));
  for (size_t i = 0; i < 4; ++i) CHECK(cache.block_table(parent)[i] != cache.block_table(late)[i]);
}

TEST_CASE("grow: more pages, page ids and contents kept, the pools move") {
  PagedKvCache cache = make_cache(small_config(16, 4, 3));
  fill_guard(cache);
  const int a = cache.create_sequence();
  append_tokens(cache, a, 40, 1);  // 3 pages
  const int b = cache.fork_sequence(a).value();
  const std::vector<int32_t> table = cache.block_table(a);
  CHECK(cache.append_slots(a, 20).status().code() == StatusCode::kOutOfMemory);

  REQUIRE(cache.grow(0).ok());
  CHECK(cache.num_pages() == 4);
  CHECK(cache.grow(-1).code() == StatusCode::kInvalidArgument);
  CHECK(cache.grow(INT_MAX).code() == StatusCode::kInvalidArgument);
  CHECK(PagedKvCache().grow(1).code() == StatusCode::kInvalidArgument);
  CHECK(cache.num_pages() == 4);

  REQUIRE(cache.grow(6).ok());
  CHECK(cache.num_pages() == 10);
  CHECK(cache.config().num_pages == 10);
  CHECK(cache.free_pages() == 7);
  CHECK(cache.block_table(a) == table);
  CHECK(holds(cache, a, 0, 40, 1));
  CHECK(holds(cache, b, 0, 40, 1));
  // The new pages are usable through the new pools, and the old sharing holds.
  append_tokens(cache, a, 30, 2);  // copies the shared partial page, takes 2 new
  append_tokens(cache, b, 8, 3);
  CHECK(holds(cache, a, 0, 40, 1));
  CHECK(holds(cache, a, 40, 70, 2));
  CHECK(holds(cache, b, 0, 40, 1));
  CHECK(holds(cache, b, 40, 48, 3));
  for (int32_t page : cache.block_table(a)) CHECK(page < 10);
}

// ---------------------------------------------------------------------------
// Config

TEST_CASE("create: bad configs are rejected with messages that say why") {
  struct Bad {
    const char* what;
    void (*edit)(KvCacheConfig&);
    StatusCode code;
    const char* mentions;
  };
  const Bad bad[] = {
      {"layers", [](KvCacheConfig& c) { c.num_layers = 0; }, StatusCode::kInvalidArgument, "num_layers"},
      {"pages", [](KvCacheConfig& c) { c.num_pages = 0; }, StatusCode::kInvalidArgument, "num_pages"},
      {"heads", [](KvCacheConfig& c) { c.kv_heads = -2; }, StatusCode::kInvalidArgument, "kv_heads"},
      {"page 24", [](KvCacheConfig& c) { c.page_size = 24; }, StatusCode::kInvalidArgument, "power of two in 16..256"},
      {"page 8", [](KvCacheConfig& c) { c.page_size = 8; }, StatusCode::kInvalidArgument, "power of two in 16..256"},
      {"page 512", [](KvCacheConfig& c) { c.page_size = 512; }, StatusCode::kInvalidArgument, "16..256"},
      {"dim", [](KvCacheConfig& c) { c.head_dim = 48; }, StatusCode::kUnsupported, "(32, 64, 80, 96, 128, 256)"},
      {"dtype", [](KvCacheConfig& c) { c.dtype = DType::kFP32; }, StatusCode::kUnsupported, "bf16, fp16"},
      {"overflow",
       [](KvCacheConfig& c) {
         c.num_pages = INT_MAX;
         c.kv_heads = INT_MAX;
         c.page_size = 256;
         c.head_dim = 128;
       },
       StatusCode::kInvalidArgument, "overflows"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    KvCacheConfig c = small_config();
    b.edit(c);
    auto r = PagedKvCache::create(c);
    CHECK(r.status().code() == b.code);
    CHECK_MESSAGE(r.status().message().find(b.mentions) != std::string::npos, r.status().message());
  }
  // Every valid page size and both dtypes and head_dims are accepted.
  for (int P : {16, 32, 64, 128, 256})
    for (int d : {64, 128})
      for (DType t : {DType::kBF16, DType::kFP16}) {
        KvCacheConfig c = small_config(P, 2);
        c.head_dim = d;
        c.dtype = t;
        CHECK(PagedKvCache::create(c).ok());
      }
}

TEST_CASE("create on CUDA without a device fails cleanly") {
  if (cuda_available()) return;  // the GPU suite covers the real path
  KvCacheConfig c = small_config();
  c.device = Device::kCuda;
  auto r = PagedKvCache::create(c);
  CHECK_FALSE(r.ok());
}

// ---------------------------------------------------------------------------
// append_kv on the CPU

namespace {

// A pool of guard values, and n tokens of K/V in a padded layout (gaps hold
// NaN: append_kv must copy head_dim elements per head and nothing else).
struct AppendCase {
  int kv_heads = 3, head_dim = 64, page_size = 16, num_pages = 10, n = 0;
  std::vector<uint16_t> k_pool, v_pool, k_new, v_new;
  AttnTensor k_view, v_view;
  explicit AppendCase(int tokens, int dim = 64, int page = 16) : head_dim(dim), page_size(page), n(tokens) {
    const size_t pool = size_t(num_pages) * kv_heads * page_size * head_dim;
    k_pool.assign(pool, kGuard);
    v_pool.assign(pool, kGuard);
    k_view.head_stride = head_dim + 8;
    k_view.seq_stride = kv_heads * k_view.head_stride + 16;
    v_view = bhsd(nullptr, n, kv_heads, head_dim);  // V in the other layout
    k_new.assign(size_t(n) * size_t(k_view.seq_stride), 0xFFFF);
    v_new.assign(size_t(n) * kv_heads * head_dim, 0xFFFF);
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < kv_heads; ++h)
        for (int d = 0; d < head_dim; ++d) {
          k_new[size_t(i * k_view.seq_stride + h * k_view.head_stride + d)] = value_of(1, 0, 0, i, h, d);
          v_new[size_t(i * v_view.seq_stride + h * v_view.head_stride + d)] = value_of(1, 0, 1, i, h, d);
        }
    k_view.data = k_new.data();
    v_view.data = v_new.data();
  }
  AppendKvParams params(const std::vector<Slot>& slots) {
    AppendKvParams p;
    p.k_new = k_view;
    p.v_new = v_view;
    p.slots = slots.data();
    p.num_tokens = n;
    p.k_pages = k_pool.data();
    p.v_pages = v_pool.data();
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.page_size = page_size;
    p.num_pages = num_pages;
    return p;
  }
  size_t at(Slot slot, int h, int d) const {
    return ((size_t(slot / page_size) * kv_heads + h) * page_size + size_t(slot % page_size)) * head_dim + d;
  }
  // Every pool element is either the right token's value at its slot or the guard.
  bool exact(const std::vector<Slot>& slots) const {
    std::vector<uint16_t> k_want(k_pool.size(), kGuard), v_want(v_pool.size(), kGuard);
    for (int i = 0; i < n; ++i) {
      if (slots[size_t(i)] < 0) continue;
      for (int h = 0; h < kv_heads; ++h)
        for (int d = 0; d < head_dim; ++d) {
          k_want[at(slots[size_t(i)], h, d)] = value_of(1, 0, 0, i, h, d);
          v_want[at(slots[size_t(i)], h, d)] = value_of(1, 0, 1, i, h, d);
        }
    }
    return k_want == k_pool && v_want == v_pool;
  }
  bool untouched() const {
    for (size_t i = 0; i < k_pool.size(); ++i)
      if (k_pool[i] != kGuard || v_pool[i] != kGuard) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("append_kv (CPU): exactly the right elements, guards elsewhere untouched") {
  for (int dim : {64, 128})
    for (int page : {16, 64}) {
      CAPTURE(dim);
      CAPTURE(page);
      AppendCase c(7, dim, page);
      // Scattered over pages and offsets, first and last slot of the pool
      // included, one padding token (-1) skipped.
      const Slot last = Slot{c.num_pages} * page - 1;
      const std::vector<Slot> slots = {5, Slot{3} * page, last, -1, Slot{7} * page + page / 2, 0, Slot{page} - 1};
      const Status st = append_kv(c.params(slots));
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      CHECK(c.exact(slots));
    }
}

TEST_CASE("append_kv: invalid calls are rejected before anything is written") {
  const std::vector<Slot> slots = {1, 2, 3};
  auto expect = [&](AppendCase& c, const AppendKvParams& p, StatusCode code, const char* mentions) {
    const Status s = append_kv(p);
    CHECK(s.code() == code);
    CHECK_MESSAGE(s.message().find(mentions) != std::string::npos, s.message());
    CHECK(c.untouched());
  };
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.slots = nullptr;
    expect(c, p, StatusCode::kInvalidArgument, "slots is null");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.k_new.data = nullptr;
    expect(c, p, StatusCode::kInvalidArgument, "k_new.data");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.v_pages = nullptr;
    expect(c, p, StatusCode::kInvalidArgument, "v_pages");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.head_dim = 48;
    expect(c, p, StatusCode::kUnsupported, "(32, 64, 80, 96, 128, 256)");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.dtype = DType::kFP32;
    expect(c, p, StatusCode::kUnsupported, "bf16, fp16");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.page_size = 48;
    expect(c, p, StatusCode::kInvalidArgument, "page_size");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.v_new.head_stride = 32;  // heads of 64 overlapping
    expect(c, p, StatusCode::kInvalidArgument, "v_new strides");
  }
  {
    // One slot past the pool: the whole call fails, even the good tokens before it.
    AppendCase c(3);
    const std::vector<Slot> bad = {1, 2, Slot{c.num_pages} * c.page_size};
    expect(c, c.params(bad), StatusCode::kInvalidArgument, "past the pool");
  }
  {
    // CUDA's alignment rules are checked on the host, before any launch.
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.device = Device::kCuda;
    p.k_pages = reinterpret_cast<char*>(c.k_pool.data()) + 2;
    expect(c, p, StatusCode::kInvalidArgument, "16-byte aligned");
    AppendKvParams q = c.params(slots);
    q.device = Device::kCuda;
    q.k_new.seq_stride = 3 * 72 + 4;
    expect(c, q, StatusCode::kInvalidArgument, "multiples of 8");
  }
  {
    AppendCase c(3);
    AppendKvParams p = c.params(slots);
    p.num_tokens = 0;
    p.slots = nullptr;  // nothing to do: nothing is read
    CHECK(append_kv(p).ok());
    CHECK(c.untouched());
  }
}
