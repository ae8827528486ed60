// QueryTap: the query rows a sequence's forward passes computed for the
// layers an attention capture armed (attention_capture.hpp), kept so the
// capture can run the layer's attention again on the real Q.
//
// Why keep Q rather than recompute it: Q of layer l is a function of the
// residual stream entering l, which the cache does not hold; recomputing it
// means running the whole conversation through layers 0..l again, in a
// prefill whose numerics (tiled matmuls, another GEMM) differ from the
// decode steps that really ran. Kept rows are the exact bf16 operand each
// step's attention read: rotated, QK-normed where the family has it.
//
// Cost: nothing while disarmed (a sequence without a tap is a null pointer
// the forward tests once per layer on the host; no copy, no kernel change);
// armed, one copy of H·D bf16 values per token and armed layer.
//
// Rows are kept by cache slot from `first` on. A forward that writes slot s
// drops the kept rows at s and after (the sequence was truncated, or a failed
// call is being redone) before it appends, so the rows of [first, n_tokens)
// are always the ones that produced the cache's K and V.
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope::model {

struct QueryTap {
  int row_elems = 0;                           // n_heads · head_dim
  int first = 0;                               // slot of the first kept row
  std::vector<char> armed;                     // [n_layers]
  std::vector<std::vector<uint16_t>> rows;     // [n_layers][kept, row_elems] bf16 (host)
  // Per kept slot: fed by a forward of one token (a decode step), kept with
  // the first armed layer's rows. The CUDA capture traces those rows again
  // through the decode kernel, one step each.
  std::vector<uint8_t> alone;

  bool armed_layer(int l) const { return armed[static_cast<size_t>(l)] != 0; }
  // Rows kept for layer l: slots [first, first + kept(l)).
  int kept(int l) const { return static_cast<int>(rows[static_cast<size_t>(l)].size() / size_t(row_elems)); }

  int first_armed() const {
    for (size_t l = 0; l < armed.size(); ++l)
      if (armed[l]) return static_cast<int>(l);
    return -1;
  }

  // Keeps q [n, row_elems] of layer l for slots [slot, slot + n); a no-op for
  // a layer not armed. kOutOfMemory when the rows cannot grow.
  Status keep(int l, int slot, const uint16_t* q, int n) {
    if (!armed_layer(l)) return {};
    if (slot < first) {  // truncated before the first kept row: start again from here
      for (auto& r : rows) r.clear();
      alone.clear();
      first = slot;
    }
    std::vector<uint16_t>& r = rows[static_cast<size_t>(l)];
    const size_t at = static_cast<size_t>(slot - first) * size_t(row_elems);
    if (r.size() < at) {  // a gap (a forward failed before this layer): nothing after it is contiguous
      r.clear();
      return {};
    }
    try {
      r.resize(at);
      r.insert(r.end(), q, q + static_cast<size_t>(n) * size_t(row_elems));
      if (l == first_armed()) {
        alone.resize(static_cast<size_t>(slot - first));
        alone.insert(alone.end(), static_cast<size_t>(n), n == 1 ? 1 : 0);
      }
    } catch (const std::bad_alloc&) {
      return {StatusCode::kOutOfMemory, "attention capture: cannot keep the query rows of layer " + std::to_string(l)};
    }
    return {};
  }
};

}  // namespace flashscope::model
