// SentencePiece BPE merge loop (see spm.hpp).
#include "tokenizer/spm.hpp"

#include <algorithm>
#include <queue>

namespace flashscope::tokenizer {

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t offset;  // into the text
  uint32_t size;    // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of the joined text when pushed
};

// Highest score first, then leftmost: std::priority_queue pops the largest.
struct Lower {
  bool operator()(const Bigram& a, const Bigram& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

// The byte length llama.cpp gives a UTF-8 sequence from its lead byte alone
// (continuation and invalid bytes count as 1, F8..FF as 4).
size_t lead_length(uint8_t b) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[b >> 4];
}

}  // namespace

size_t spm_encode(const SpmVocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  size_t dropped = std::string_view::npos;
  if (text.empty()) return dropped;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(lead_length(static_cast<uint8_t>(text[off])), text.size() - off);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, off + len == text.size() ? -1 : index + 1, static_cast<uint32_t>(off),
                       static_cast<uint32_t>(len)});
    off += len;
  }

  const auto& ids = *vocab.piece_to_id;
  const auto& scores = *vocab.scores;
  std::priority_queue<Bigram, std::vector<Bigram>, Lower> heap;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].size + symbols[right].size;
    auto it = ids.find(text.substr(symbols[left].offset, size));
    if (it == ids.end()) return;
    heap.push({scores[it->second], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale: a side was merged away, or grew, since this was pushed.
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.offset, s.size);
    auto it = ids.find(piece);
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (size_t k = 0; k < piece.size(); ++k) {
      const int32_t id = (*vocab.byte_token)[static_cast<uint8_t>(piece[k])];
      if (id >= 0) {
        out.push_back(id);
      } else if (vocab.unk_id >= 0) {
        out.push_back(vocab.unk_id);
      } else if (dropped == std::string_view::npos) {
        dropped = s.offset + k;
      }
    }
  }
  return dropped;
}

}  // namespace flashscope::tokenizer
