// How the Hopper kernel's persistent CTAs share out a launch's work tiles
// (kernels/attention/persistent_deal.h): every tile goes to exactly one CTA,
// and on causal lists (longest q-tiles first, in groups of (q-head,
// sequence) pairs) every CTA's share of the key tiles stays within 5% of
// the mean, which is what makes persistent CTAs faster than one CTA per
// tile there. Plain arithmetic: it runs on CI.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/attention/persistent_deal.h"

using flashscope::kernels::persistent_longest_first_group;
using flashscope::kernels::PersistentDeal;

namespace {

// Which CTA takes each entry of the list (-1: none); fails on an entry dealt twice.
std::vector<int> owners(const PersistentDeal& deal) {
  std::vector<int> owner(deal.work_count, -1);
  for (int cta = 0; cta < deal.ctas; ++cta)
    for (int round = 0; round < deal.rounds; ++round) {
      const int e = deal.entry(round, cta);
      if (e < 0) continue;
      REQUIRE(e < deal.work_count);
      REQUIRE_MESSAGE(owner[e] == -1, "entry ", e, " dealt to CTAs ", owner[e], " and ", cta);
      owner[e] = cta;
    }
  return owner;
}

// A causal problem as the kernel lists it (attention_views.cuh,
// work_tile_view): entry → q-tile, longest first within each group.
struct CausalList {
  int q_tiles, pairs, group;
  int q_tile(int entry) const {
    const int per = std::min(group, pairs);
    const int g = entry / (per * q_tiles);
    const int in_group = std::min(per, pairs - g * per);
    const int rank = entry - g * per * q_tiles;
    return q_tiles - 1 - rank / in_group;
  }
};

// Max over mean of the CTAs' loads: key tiles seen (square causal problem,
// q-tile i sees i + 1 key tiles of its own width) plus one per work tile for
// its fill and drain.
double imbalance(const CausalList& list, int ctas) {
  const int group = persistent_longest_first_group(list.pairs, list.q_tiles, ctas, list.group);
  const CausalList dealt{list.q_tiles, list.pairs, group};
  const PersistentDeal deal(list.q_tiles * list.pairs, std::min(group, list.pairs) * list.q_tiles, ctas);
  const std::vector<int> owner = owners(deal);
  std::vector<double> load(ctas, 0.0);
  for (int e = 0; e < deal.work_count; ++e) {
    REQUIRE_MESSAGE(owner[e] >= 0, "entry ", e, " dealt to no CTA");
    load[owner[e]] += dealt.q_tile(e) + 1 + 1;
  }
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / ctas;
  return *std::max_element(load.begin(), load.end()) / mean;
}

}  // namespace

TEST_CASE("persistent deal: every work tile goes to exactly one CTA") {
  struct Case {
    int work, group, ctas;
  };
  // Groups that divide the list and that do not, shorter and longer than a
  // round, one CTA, as many CTAs as tiles.
  const Case cases[] = {{1152, 576, 132}, {1152, 1152, 132}, {1024, 256, 132}, {1000, 96, 132}, {252, 252, 132},
                        {100, 7, 132},    {37, 5, 1},        {132, 132, 132},  {133, 20, 132},  {5000, 3, 64}};
  for (const Case& c : cases) {
    INFO("work ", c.work, " group ", c.group, " ctas ", c.ctas);
    const PersistentDeal deal(c.work, c.group, std::min(c.ctas, c.work));
    const std::vector<int> owner = owners(deal);
    CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
  }
}

TEST_CASE("persistent deal: causal lists are shared evenly across 132 CTAs") {
  // (q-tiles, pairs, the group the L2 asks for): SmolLM2's 16 x 9 x 1024² at
  // head_dim 64, 8 x 9 x 2048², 4 x 16 x 4096² at 64 (192-row tiles), the
  // 8k² and 4 x 16 x 4096² causal anchors at 128, and groups far below a
  // round that the launcher must widen.
  const CausalList lists[] = {{8, 144, 72}, {16, 72, 72}, {22, 64, 16}, {64, 16, 4}, {32, 64, 8},
                              {8, 144, 1},  {32, 64, 4},  {64, 16, 1}};
  for (const CausalList& list : lists) {
    INFO("q-tiles ", list.q_tiles, " pairs ", list.pairs, " group ", list.group);
    CHECK(imbalance(list, 132) <= 1.05);
  }
}

TEST_CASE("persistent deal: the group is a divisor, at least a round, never below the L2's") {
  for (int pairs : {1, 7, 16, 64, 144}) {
    for (int q_tiles : {1, 8, 64}) {
      for (int group : {1, 4, 16}) {
        INFO("pairs ", pairs, " q-tiles ", q_tiles, " group ", group);
        const int chosen = persistent_longest_first_group(pairs, q_tiles, 132, group);
        CHECK(pairs % chosen == 0);
        CHECK((chosen >= std::min(group, pairs)));
        CHECK((chosen == pairs || chosen * q_tiles >= 132));
      }
    }
  }
}
