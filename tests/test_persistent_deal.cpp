// How the Hopper kernel's persistent CTAs share out a launch's work tiles
// (kernels/attention/persistent_deal.h): every tile goes to exactly one CTA,
// and on causal lists (longest q-tiles first, in groups of (q-head,
// sequence) pairs) every CTA's share of the key tiles stays within 5% of
// the mean, which is what makes persistent CTAs faster than one CTA per
// tile there; the list's order and the FastDivmods the kernel finds each
// tile with give what plain division gives. Plain arithmetic: it runs on CI.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/attention/persistent_deal.h"

using flashscope::kernels::BasicWorkTileList;
using flashscope::kernels::FastDivmod;
using flashscope::kernels::PlainDivmod;
using flashscope::kernels::persistent_longest_first_group;
using flashscope::kernels::PersistentDeal;
using flashscope::kernels::WorkTileList;

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

// A causal problem as the kernel lists it (persistent_deal.h,
// WorkTileList): entry → q-tile, longest first within each group.
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

// The split tail of non-causal launches (SplitTail): the last two rounds'
// tiles cut into key tiles, contiguous ranges per CTA.
namespace {

using flashscope::kernels::plan_split_tail;
using flashscope::kernels::SplitTail;

struct TailCase {
  int work, kv_tiles, ctas;
};

// Every key tile of every split tile goes to exactly one piece; the holders
// the merge enumerates are exactly the CTAs with a piece of the tile; a
// CTA's shared pieces have distinct slots; every CTA's total work (whole
// rounds plus its units) is within one key tile of every other's.
void check_tail(const TailCase& c) {
  INFO("work ", c.work, " kv_tiles ", c.kv_tiles, " ctas ", c.ctas);
  const SplitTail tail = plan_split_tail(c.work, c.kv_tiles, c.ctas);
  REQUIRE(tail.split_tiles > 0);
  CHECK(tail.whole_tiles + tail.split_tiles == c.work);
  CHECK(tail.whole_tiles % c.ctas == 0);
  CHECK(tail.split_tiles < 2 * c.ctas);  // the workspace's arrival counters (split_tail_workspace.h)
  std::vector<int> unit_owner(size_t(tail.split_tiles) * c.kv_tiles, -1);
  std::vector<std::vector<int>> holders(tail.split_tiles);
  std::vector<int> units(c.ctas, 0);
  for (int cta = 0; cta < c.ctas; ++cta) {
    int used_slots = 0;
    for (int j = 0; j < tail.pieces(cta); ++j) {
      const SplitTail::Piece piece = tail.piece(cta, j);
      REQUIRE(piece.tile >= 0);
      REQUIRE(piece.tile < tail.split_tiles);
      REQUIRE(piece.unit_begin < piece.unit_end);
      REQUIRE(piece.unit_end <= c.kv_tiles);
      for (int u = piece.unit_begin; u < piece.unit_end; ++u) {
        int& owner = unit_owner[size_t(piece.tile) * c.kv_tiles + u];
        REQUIRE_MESSAGE(owner == -1, "tile ", piece.tile, " key tile ", u, " taken by CTAs ", owner, " and ", cta);
        owner = cta;
      }
      units[cta] += piece.unit_end - piece.unit_begin;
      holders[piece.tile].push_back(cta);
      if (piece.shared) {
        const int slot = tail.slot(cta, piece.tile);
        REQUIRE((slot == 0 || slot == 1));
        CHECK_MESSAGE((used_slots & (1 << slot)) == 0, "CTA ", cta, " writes slot ", slot, " twice");
        used_slots |= 1 << slot;
      }
    }
  }
  CHECK(std::count(unit_owner.begin(), unit_owner.end(), -1) == 0);
  // The kernel's visiting order runs every piece once, the last (shared) one first.
  for (int cta = 0; cta < c.ctas; ++cta) {
    const int n = tail.pieces(cta);
    std::vector<int> tiles;
    for (int j = 0; j < n; ++j) tiles.push_back(tail.piece_in_order(cta, j).tile);
    if (n > 0) CHECK(tiles.front() == tail.piece(cta, n - 1).tile);
    std::sort(tiles.begin(), tiles.end());
    for (int j = 0; j < n; ++j) CHECK(tiles[j] == tail.first_tile(cta) + j);
  }
  for (int tile = 0; tile < tail.split_tiles; ++tile) {
    std::vector<int> expected;
    for (int cta = tail.first_holder(tile); cta <= tail.last_holder(tile); ++cta) expected.push_back(cta);
    CHECK_MESSAGE(holders[tile] == expected, "tile ", tile);
    // A piece is shared exactly when the tile has more than one holder.
    for (int cta : holders[tile])
      for (int j = 0; j < tail.pieces(cta); ++j)
        if (tail.piece(cta, j).tile == tile) CHECK(tail.piece(cta, j).shared == (holders[tile].size() > 1));
  }
  const auto [lo, hi] = std::minmax_element(units.begin(), units.end());
  CHECK(*hi - *lo <= 1);
  // Against whole tiles only: the last CTA finishes sooner.
  const int whole_rounds = (c.work + c.ctas - 1) / c.ctas;
  CHECK(tail.whole_tiles / c.ctas * c.kv_tiles + *hi < whole_rounds * c.kv_tiles);
}

}  // namespace

TEST_CASE("split tail: every key tile once, holders and slots as the merge reads them, CTAs level") {
  // 8k x 8k x 16 heads on 132 SMs (192-key tiles), D64's 4 x 16 x 4096²
  // (192-row q-tiles), two-round grids, an H100 PCIe's 114 SMs, the GPU
  // test's shapes, and a grid of 7 CTAs.
  const TailCase cases[] = {{1024, 43, 132}, {1408, 32, 132}, {216, 22, 132}, {180, 16, 132}, {1000, 43, 114},
                            {288, 9, 132},   {288, 8, 132},   {288, 18, 132}, {400, 7, 132},  {15, 8, 7}};
  for (const TailCase& c : cases) check_tail(c);
}

TEST_CASE("split tail: only where the last round leaves more than 1% idle, and only with keys to split") {
  CHECK(plan_split_tail(1056, 43, 132).split_tiles == 0);  // 8 full rounds
  CHECK(plan_split_tail(100, 43, 132).split_tiles == 0);   // one wave: nothing to wait for
  CHECK(plan_split_tail(1024, 1, 132).split_tiles == 0);   // one key tile per work tile
  CHECK(plan_split_tail(131 * 100 + 130, 8, 131).split_tiles == 0);  // 130 of 131 busy in the last round: < 1%
  CHECK(plan_split_tail(252, 4, 132).split_tiles == 0);  // 1008 key tiles on 132 CTAs: 8 each, as whole tiles take
  CHECK(plan_split_tail(256, 43, 132).split_tiles == 0);  // the seed shape: 84 key tiles against 86, less than it costs
  CHECK(plan_split_tail(1024, 43, 114).split_tiles == 0);  // 9 rounds of 114 but for 2 tiles
  CHECK(plan_split_tail(1024, 43, 132).split_tiles == 132 + 1024 % 132);
  // Beyond 32-bit unit arithmetic it deals whole tiles rather than overflow.
  CHECK(plan_split_tail(200, 1 << 24, 132).split_tiles == 0);
}

TEST_CASE("fast divmod: the same quotient and remainder as division, up to 2^31") {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (uint32_t d : {1151u, 1152u, 4095u, 4096u, 4097u, 65535u, 65536u, 99991u, 1u << 20, (1u << 30) - 1, 1u << 30,
                     (1u << 30) + 1, 2147483647u})
    divisors.push_back(d);
  uint64_t lcg = 12345;
  for (uint32_t d : divisors) {
    const FastDivmod fast(d);
    std::vector<uint32_t> ns = {0, 1, 2, 2147483647u, 2147483646u};
    for (uint32_t k : {1u, 2u, 3u, 7u, 1000u})
      if (uint64_t(k) * d + 1 < (1ull << 31)) {
        ns.push_back(k * d - 1);
        ns.push_back(k * d);
        ns.push_back(k * d + 1);
      }
    for (int i = 0; i < 200; ++i) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      ns.push_back(uint32_t(lcg >> 33));  // below 2^31
    }
    for (uint32_t n = 0; n < 3000; ++n) ns.push_back(n);
    for (uint32_t n : ns) {
      int q = 0, r = 0;
      fast.divmod(int(n), q, r);
      if (uint32_t(q) != n / d || uint32_t(r) != n % d) {
        FAIL_CHECK("n ", n, " d ", d, ": ", q, " r ", r, " against ", n / d, " r ", n % d);
        break;
      }
    }
  }
}

TEST_CASE("work tile list: the order the grid is read in, every tile once, with its kv-head") {
  struct Case {
    int q_tiles, q_heads, batch, per_group, group;
    bool longest_first;
  };
  // Groups that divide the pairs and that do not (a smaller last group),
  // one pair, one q-tile, GQA.
  const Case cases[] = {{8, 9, 16, 144, 3, true}, {8, 9, 16, 72, 1, true}, {8, 9, 16, 7, 3, true},
                        {64, 16, 1, 4, 1, true},  {5, 12, 3, 5, 3, true},  {1, 1, 1, 1, 1, true},
                        {7, 12, 3, 0, 4, false},  {64, 16, 1, 16, 2, false}, {1, 8, 5, 40, 8, false}};
  for (const Case& c : cases) {
    INFO("q_tiles ", c.q_tiles, " heads ", c.q_heads, " batch ", c.batch, " per_group ", c.per_group,
         " longest first ", c.longest_first);
    const WorkTileList list(c.q_tiles, c.q_heads, c.batch, c.per_group, c.longest_first, c.group);
    // What a one-CTA-per-tile grid reads on the device (cta_view).
    const BasicWorkTileList<PlainDivmod> plain(c.q_tiles, c.q_heads, c.batch, c.per_group, c.longest_first, c.group);
    const int pairs = c.q_heads * c.batch;
    std::vector<int> seen(size_t(c.q_tiles) * pairs, 0);
    for (int linear = 0; linear < c.q_tiles * pairs; ++linear) {
      // The list by plain division, as written out in WorkTileList's comment.
      int pair, q_tile;
      if (c.longest_first) {
        const int per = c.per_group > 0 && c.per_group < pairs ? c.per_group : pairs;
        const int g = linear / (per * c.q_tiles);
        const int in_group = std::min(per, pairs - g * per);
        const int rank = linear - g * per * c.q_tiles;
        pair = g * per + rank % in_group;
        q_tile = c.q_tiles - 1 - rank / in_group;
      } else {
        pair = linear / c.q_tiles;
        q_tile = c.q_tiles - 1 - linear % c.q_tiles;
      }
      const WorkTileList::Tile t = list.at(linear);
      REQUIRE(t.q_tile == q_tile);
      REQUIRE(t.q_head == pair % c.q_heads);
      REQUIRE(t.seq == pair / c.q_heads);
      REQUIRE(t.kv_head == t.q_head / c.group);
      const auto u = plain.at(linear);
      REQUIRE((u.q_tile == t.q_tile && u.q_head == t.q_head && u.seq == t.seq && u.kv_head == t.kv_head));
      ++seen[size_t(t.seq * c.q_heads + t.q_head) * c.q_tiles + t.q_tile];
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == int(seen.size()));
  }
}
