// BPE merge loop (see bpe.hpp).
#include "tokenizer/bpe.hpp"

#include <queue>

namespace flashscope::tokenizer {

namespace {

struct Candidate {
  int32_t rank;
  int32_t left;   // position of the left symbol
  int32_t right;  // position of the right symbol when pushed
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

// Lowest rank first, then leftmost: std::priority_queue pops the largest.
struct Later {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  }
};

}  // namespace

void BpeMerges::apply(std::vector<int32_t>& ids) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  if (n == 2) {  // common short case: no list, no heap
    if (const BpeMerge* m = find(ids[0], ids[1])) ids.assign(1, m->result);
    return;
  }
  // Symbols are the initial positions; next/prev link the alive ones and a
  // merge keeps the left position, so positions keep their order.
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, Later> heap;
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    if (const BpeMerge* m = find(ids[l], ids[r])) heap.push({m->rank, l, r, ids[l], ids[r], m->result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale: one side was merged away or changed since this was pushed.
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || ids[c.left] != c.left_id ||
        ids[c.right] != c.right_id) {
      continue;
    }
    ids[c.left] = c.result;
    alive[c.right] = 0;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }
  int32_t w = 0;
  for (int32_t i = 0; i != -1; i = next[i]) ids[w++] = ids[i];
  ids.resize(w);
}

}  // namespace flashscope::tokenizer
