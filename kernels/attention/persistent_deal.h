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
// before the long end of the next, and 8k x 8k causal ran a third slower.
#pragma once


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

struct PersistentDeal {
  int work_count;        // entries in the list
  int group_tiles;       // entries per group (the last group may have fewer)
  int ctas;              // G, at most work_count
  int rounds_per_group;  // ceil(group_tiles / G)
  int rounds;            // over all groups

  FLASHSCOPE_HOST_DEVICE PersistentDeal(int work, int group, int grid)
      : work_count(work),
        group_tiles(group < 1 ? 1 : group),
        ctas(grid < 1 ? 1 : grid),
        rounds_per_group((group_tiles + ctas - 1) / ctas),
        rounds((work_count + group_tiles - 1) / group_tiles * rounds_per_group) {}

  // The entry of the list CTA `cta` takes in `round`, or -1 (a group's last
  // round may not reach every CTA).
  FLASHSCOPE_HOST_DEVICE int entry(int round, int cta) const {
    const int group = round / rounds_per_group, k = round % rounds_per_group;
    const int first = group * group_tiles;
    const int in_group = work_count - first < group_tiles ? work_count - first : group_tiles;
    const int pos = k * ctas + (((group + k) & 1) ? ctas - 1 - cta : cta);
    return pos < in_group ? first + pos : -1;
  }
};

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
