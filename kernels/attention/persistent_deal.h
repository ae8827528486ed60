// How persistent attention CTAs share out the work tiles (q-tile, q-head,
// sequence) of a launch: plain arithmetic, for the kernel (device) and for
// the launcher and the tests (host).
//
// The list is the order cta_view reads the grid in (attention_views.cuh):
// causal lists are a run of groups of (q-head, sequence) pairs, each group
// longest q-tiles first; other lists are one group. Each group is dealt
// on its own, G entries per round (one per CTA), back and forth: round k of
// group g gives CTA b entry k·G + b when g + k is even and k·G + G−1−b when
// odd. With the longest q-tiles first, the CTA that takes a round's longest
// takes the next round's shortest, so every CTA's total stays close to the
// others'; consecutive groups start from opposite ends of the grid, so a
// group's short last round does not leave out the same CTAs each time.
// Dealt as one list, a round straddling two groups held the short end of one
// before the long end of the next, and the CTAs' totals drifted apart
// (bench/TUNING.md#figures-moved-out-of-product-comments).
#pragma once

#include "kernels/common/fast_divmod.h"
#include "kernels/common/math.h"

#if defined(__CUDACC__)
#define FLASHSCOPE_HOST_DEVICE __host__ __device__
#else
#define FLASHSCOPE_HOST_DEVICE
#endif

namespace flashscope::kernels {

// The (q-head, sequence) pairs per longest-first group: the requested count,
// or all pairs where it is 0 (not chosen) or larger.
FLASHSCOPE_HOST_DEVICE inline int longest_first_pairs(int requested, int pairs) {
  return requested > 0 && requested < pairs ? requested : pairs;
}

// Calls visit(d) for the divisors d of n > 0, smallest first, until it
// returns true: the pairs (d, n / d) up to sqrt(n), no allocation.
template <typename Visit>
inline void visit_divisors_ascending(long long n, Visit&& visit) {
  long long d = 1;
  for (; d * d <= n; ++d)
    if (n % d == 0 && visit(d)) return;
  for (--d; d >= 1; --d)
    if (n % d == 0 && d * d != n && visit(n / d)) return;
}

// Built on the host (its FastDivmod), read by every CTA from the launch's parameters.
struct PersistentDeal {
  int work_count = 1;        // entries in the list
  int group_tiles = 1;       // entries per group (the last group may have fewer)
  int ctas = 1;              // G, at most work_count
  int rounds_per_group = 1;  // ceil(group_tiles / G)
  int rounds = 1;            // over all groups
  FastDivmod by_rounds_per_group;

  PersistentDeal() = default;
  FLASHSCOPE_HOST_DEVICE PersistentDeal(int work, int group, int grid)
      : work_count(work),
        group_tiles(group < 1 ? 1 : group),
        ctas(grid < 1 ? 1 : grid),
        rounds_per_group(ceil_div(group_tiles, ctas)),
        rounds(ceil_div(work_count, group_tiles) * rounds_per_group),
        by_rounds_per_group(uint32_t(rounds_per_group)) {}

  // The entry of the list CTA `cta` takes in `round`, or -1 (a group's last
  // round may not reach every CTA).
  FLASHSCOPE_HOST_DEVICE int entry(int round, int cta) const {
    int group, k;
    by_rounds_per_group.divmod(round, group, k);
    const int first = group * group_tiles;
    const int in_group = work_count - first < group_tiles ? work_count - first : group_tiles;
    const int pos = k * ctas + (((group + k) & 1) ? ctas - 1 - cta : cta);
    return pos < in_group ? first + pos : -1;
  }
};

// The order of a launch's work tiles (q-tile, q-head, sequence), the list
// PersistentDeal deals (the same order cta_view reads a grid in,
// attention_views.cuh): pairs p = sequence · q_heads + q-head. Longest first
// (causal): groups of per_group pairs, each group's entries ordered by
// q-tile from the last (the longest) down, its pairs in turn within each
// q-tile; otherwise pair-major, each pair's q-tiles from the last down.
// Also gives each tile's kv-head. Div does the divisions: FastDivmod for
// persistent CTAs (WorkTileList, built on the host, looked up per work
// tile), PlainDivmod where a CTA looks up only its own tile on the device.
template <typename Div>
struct BasicWorkTileList {
  int q_tiles = 1, pairs = 1, per_group = 1;
  bool longest_first = false;
  Div by_group_tiles, by_per_group, by_last_group, by_q_tiles, by_q_heads, by_group;

  struct Tile {
    int q_tile, q_head, seq, kv_head;
  };

  BasicWorkTileList() = default;
  // per_group_: pairs per longest-first group as requested (0: all);
  // group: q-heads per kv-head.
  FLASHSCOPE_HOST_DEVICE BasicWorkTileList(int q_tiles_, int q_heads, int batch, int per_group_, bool longest_first_,
                                           int group)
      : q_tiles(q_tiles_ < 1 ? 1 : q_tiles_),
        pairs(q_heads * batch < 1 ? 1 : q_heads * batch),
        per_group(longest_first_ ? longest_first_pairs(per_group_, pairs) : pairs),
        longest_first(longest_first_),
        by_group_tiles(uint32_t(per_group * q_tiles)),
        by_per_group(uint32_t(per_group)),
        by_last_group(uint32_t(pairs - (pairs - 1) / per_group * per_group)),
        by_q_tiles(uint32_t(q_tiles)),
        by_q_heads(uint32_t(q_heads < 1 ? 1 : q_heads)),
        by_group(uint32_t(group < 1 ? 1 : group)) {}

  // Entry `linear` of the list (0 <= linear < q_tiles · pairs).
  FLASHSCOPE_HOST_DEVICE Tile at(int linear) const {
    int pair, from_last;
    if (longest_first) {
      int group, rank;
      by_group_tiles.divmod(linear, group, rank);
      const int first_pair = group * per_group;
      // The last group may be smaller than the others.
      const Div& in_group = pairs - first_pair < per_group ? by_last_group : by_per_group;
      int in_pair;
      in_group.divmod(rank, from_last, in_pair);
      pair = first_pair + in_pair;
    } else {
      by_q_tiles.divmod(linear, pair, from_last);
    }
    Tile t;
    t.q_tile = q_tiles - 1 - from_last;
    by_q_heads.divmod(pair, t.seq, t.q_head);
    t.kv_head = int(by_group.quotient(uint32_t(t.q_head)));
    return t;
  }
};
using WorkTileList = BasicWorkTileList<FastDivmod>;

// The split tail of a non-causal persistent launch. Work tiles cost the
// same there, so W tiles on G CTAs take ceil(W / G) tile times although the
// work is W / G: 1024 tiles of 8k x 8k on 132 SMs run 8 rounds with 32 CTAs
// idle in the last. The first `whole_tiles` entries of the list (a multiple
// of G) are dealt whole, as PersistentDeal says; the last `split_tiles` are
// cut into their key tiles ("units", kv_tiles per work tile) and CTA c takes
// the contiguous units [begin(c), begin(c + 1)), so every CTA ends within a
// unit of the others. A work tile shared by several CTAs ("pieces") is
// merged by the last of them to finish (hopper_prefill_kernel.cuh). Each
// CTA has at most two shared pieces, in its first and its last work tile:
// slot 0 and slot 1 of its partial results.
struct SplitTail {
  int whole_tiles;  // list entries [0, whole_tiles) dealt whole
  int split_tiles;  // list entries [whole_tiles, whole_tiles + split_tiles), split by key tiles
  int kv_tiles;     // key tiles per work tile
  int ctas;         // G
  // (32-bit: the launcher splits only when split_tiles · kv_tiles · G < 2^31.)

  FLASHSCOPE_HOST_DEVICE int units() const { return split_tiles * kv_tiles; }
  // First unit of CTA c (c may be G: the end of the last range).
  FLASHSCOPE_HOST_DEVICE int begin(int cta) const { return units() * cta / ctas; }
  // The CTA whose range holds unit u: the largest c with begin(c) <= u.
  FLASHSCOPE_HOST_DEVICE int owner(int unit) const { return ((unit + 1) * ctas - 1) / units(); }
  FLASHSCOPE_HOST_DEVICE int first_tile(int cta) const { return begin(cta) / kv_tiles; }
  // Work tiles CTA c takes a piece of (0 when its range is empty).
  FLASHSCOPE_HOST_DEVICE int pieces(int cta) const {
    const int b = begin(cta), e = begin(cta + 1);
    return e > b ? (e - 1) / kv_tiles - b / kv_tiles + 1 : 0;
  }
  struct Piece {
    int tile;                // index among the split tiles
    int unit_begin, unit_end;  // key tiles [unit_begin, unit_end) of that work tile
    bool shared;             // other CTAs hold the tile's other key tiles
  };
  // The j-th piece CTA c runs: its last piece first, then the others in key
  // order. The last piece (a tile's first keys) and the first (the last keys
  // of the tile before) are the shared ones, so both are done early, and the
  // holder that merges a tile does so in the middle of its range, where the
  // other warpgroups' GEMMs cover it, rather than last (where the kernel
  // waits on it); the first keys of every CTA's first piece start level.
  FLASHSCOPE_HOST_DEVICE Piece piece_in_order(int cta, int j) const {
    const int n = pieces(cta);
    return piece(cta, (j + n - 1) % n);
  }
  // Piece j < pieces(c) of CTA c, in key order.
  FLASHSCOPE_HOST_DEVICE Piece piece(int cta, int j) const {
    const int tile = first_tile(cta) + j, base = tile * kv_tiles;
    const int b = begin(cta) > base ? begin(cta) - base : 0;
    const int end = begin(cta + 1) - base;
    const int e = end < kv_tiles ? end : kv_tiles;
    return {tile, b, e, first_holder(tile) != last_holder(tile)};
  }
  // The CTAs holding pieces of split tile k: first_holder(k) .. last_holder(k),
  // in the order of their key ranges.
  FLASHSCOPE_HOST_DEVICE int first_holder(int tile) const { return owner(tile * kv_tiles); }
  FLASHSCOPE_HOST_DEVICE int last_holder(int tile) const { return owner((tile + 1) * kv_tiles - 1); }
  // Where CTA c keeps its partial result of split tile k: 0 for its first tile, 1 for its last.
  FLASHSCOPE_HOST_DEVICE int slot(int cta, int tile) const { return first_tile(cta) == tile ? 0 : 1; }
};

// What splitting costs a CTA, in key tiles: about one more work tile to
// start and finish (its own Q, a pipeline that fills and drains), and the
// shared pieces' partial results written, fenced and merged
// (bench/TUNING.md#hopper-prefill).
constexpr int kSplitCostKeyTiles = 4;

// The split for W work tiles of kv_tiles key tiles each on G CTAs, or
// split_tiles = 0 where dealing them whole is as good: a single wave, a last
// round nearly full, or the last CTA finishing fewer than kSplitCostKeyTiles
// key tiles sooner. The split takes the last round and the one before it
// (G + W mod G tiles, each CTA between one and two tiles' worth), so pieces
// stay long; 32-bit limits as SplitTail says.
inline SplitTail plan_split_tail(int work, int kv_tiles, int ctas) {
  SplitTail none{work, 0, kv_tiles < 1 ? 1 : kv_tiles, ctas < 1 ? 1 : ctas};
  if (work <= ctas || ctas < 1 || kv_tiles < 2 || work % ctas == 0) return none;
  const int split = ctas + work % ctas;
  if (static_cast<long long>(split) * kv_tiles * (ctas + 1) >= (1LL << 31)) return none;
  // Finishing times in key tiles: whole rounds, against whole rounds then the longest range.
  const long long rounds = ceil_div(work, ctas);
  const long long whole = rounds * kv_tiles;
  const long long with_split =
      (rounds - 2) * kv_tiles + ceil_div(static_cast<long long>(split) * kv_tiles, static_cast<long long>(ctas));
  if (whole - with_split <= kSplitCostKeyTiles || (whole - with_split) * 100 <= whole) return none;
  return {work - split, split, kv_tiles, ctas};
}

// The longest-first group (in pairs) a persistent causal launch deals by,
// from the one the L2 asks for (`group`, causal_longest_first_group): the
// smallest divisor of `pairs` not below it whose group is at least a round
// long and whose last round is empty or at least half full, where a short
// last round would leave most CTAs without a tile of that group (and, by
// the same CTAs each time, its longest); all pairs where none is.
inline int persistent_longest_first_group(int pairs, int q_tiles, int ctas, int group) {
  if (pairs <= 1) return 1;
  int chosen = pairs;
  visit_divisors_ascending(pairs, [&](long long d) {
    const long long tiles = d * q_tiles, rest = tiles % ctas;
    if (d < group || tiles < ctas || (rest != 0 && 2 * rest < ctas)) return false;
    chosen = static_cast<int>(d);
    return true;
  });
  return chosen;
}

}  // namespace flashscope::kernels
