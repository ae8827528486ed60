// The merge step of byte-level BPE, on token ids.
//
// A word (one pre-tokenizer piece) starts as the ids of its bytes' one-
// character tokens. Merges are ranked pairs (left id, right id) -> merged id;
// the pair with the lowest rank anywhere in the word is merged first, the
// leftmost on ties (as in HF tokenizers' BPE::merge_word), until no adjacent
// pair has a merge. Symbols live in a linked list over the initial positions
// and candidate merges in a min-heap keyed (rank, position); an entry whose
// symbols changed since it was pushed is skipped when popped. O(n log n) per
// word of n bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace flashscope::tokenizer {

struct BpeMerge {
  int32_t rank;    // index in the merge list: lower merges first
  int32_t result;  // id of the merged token
};

class BpeMerges {
 public:
  void reserve(size_t n) { pairs_.reserve(n); }
  // Adds a merge; returns false (and keeps the earlier one) when the pair
  // already has a merge.
  bool add(int32_t left, int32_t right, BpeMerge merge) {
    return pairs_.emplace(key(left, right), merge).second;
  }
  // The merge of an adjacent pair, or nullptr.
  const BpeMerge* find(int32_t left, int32_t right) const {
    auto it = pairs_.find(key(left, right));
    return it == pairs_.end() ? nullptr : &it->second;
  }
  size_t size() const { return pairs_.size(); }

  // Merges `ids` (the initial symbols of one word) in place.
  void apply(std::vector<int32_t>& ids) const;

 private:
  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  std::unordered_map<uint64_t, BpeMerge> pairs_;
};

}  // namespace flashscope::tokenizer
