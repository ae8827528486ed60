// The key range a sliding-window CTA of the CUDA kernels visits, and its
// split-KV shares (kernels/attention/window_range.h, the arithmetic the
// dense and paged views run on the device), checked on the host against the
// mask written from the API's words: every key a row of the CTA sees is
// visited, the range starts and ends on keys some row sees (tiles outside
// every window are skipped), tiles stay aligned, and the splits cut the
// range into disjoint whole-tile shares.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/attention/window_range.h"

namespace k = flashscope::kernels;

namespace {

// Whether a row at position pos sees key j of kv_len (left/right: -1 unbounded).
bool sees(int64_t pos, int j, int kv_len, int left, int right) {
  if (j < 0 || j >= kv_len) return false;
  if (left >= 0 && j < pos - left) return false;
  if (right >= 0 && j > pos + right) return false;
  return true;
}

struct Case {
  int q_len, kv_len, block_q, block_kv, left, right;
};

void check_case(const Case& c) {
  CAPTURE(c.q_len);
  CAPTURE(c.kv_len);
  CAPTURE(c.block_q);
  CAPTURE(c.block_kv);
  CAPTURE(c.left);
  CAPTURE(c.right);
  const int diag = c.kv_len - c.q_len;  // row r sits at position r + diag (bottom-right)
  for (int q0 = 0; q0 < c.q_len; q0 += c.block_q) {
    CAPTURE(q0);
    const int last_row = std::min(c.q_len, q0 + c.block_q) - 1;
    int lo = 0, begin = 0, end = 0;
    k::windowed_key_range(q0 + diag, last_row + diag, k::window_reach(c.left), k::window_reach(c.right), c.kv_len,
                          c.block_kv, lo, begin, end);
    REQUIRE(begin % c.block_kv == 0);
    REQUIRE(begin <= lo);
    REQUIRE(lo - begin < c.block_kv);
    REQUIRE(begin <= end);
    REQUIRE(end <= c.kv_len);
    bool any = false;
    int first_seen = c.kv_len, last_seen = -1;
    for (int r = q0; r <= last_row; ++r)
      for (int j = 0; j < c.kv_len; ++j)
        if (sees(int64_t(r) + diag, j, c.kv_len, c.left, c.right)) {
          any = true;
          first_seen = std::min(first_seen, j);
          last_seen = std::max(last_seen, j);
        }
    if (!any) {
      CHECK(end == begin);  // no tile visited
      continue;
    }
    // Every visible key is read (not zero-filled) and visited; the range is
    // no wider: it starts at the first key some row sees and ends after the last.
    CHECK(lo == first_seen);
    CHECK(end == last_seen + 1);

    for (int splits : {1, 2, 3, 7, 128}) {
      CAPTURE(splits);
      int next = begin;
      for (int s = 0; s < splits; ++s) {
        int sb = 0, se = 0;
        k::window_split(begin, end, c.block_kv, splits, s, sb, se);
        CHECK(sb <= se);
        if (se > sb) {
          CHECK(sb == next);  // in order, disjoint, nothing left out
          CHECK((sb - begin) % c.block_kv == 0);
          next = se;
        } else {
          CHECK(sb == end);  // an empty share sits at the end
        }
      }
      CHECK(next == end);
    }
  }
}

}  // namespace

TEST_CASE("window range: the keys a windowed CTA visits, over chosen and random shapes") {
  const Case chosen[] = {
      {1, 1, 16, 64, 0, 0},        {17, 17, 128, 64, 1, 0},     {127, 1000, 128, 64, 17, 0},
      {1000, 1000, 128, 64, 128, 0}, {300, 9000, 128, 64, 512, 0}, {40, 10, 128, 64, 1, 1},
      {200, 70, 128, 64, -1, 0},   {1000, 127, 64, 32, 20, 5},  {777, 777, 128, 64, 4096, -1},
      {5, 4096, 16, 16, 512, 0},   {64, 64, 16, 64, -1, -1},    {129, 300, 128, 64, 0, 300},
  };
  for (const Case& c : chosen) check_case(c);
  std::mt19937_64 rng(20);
  for (int i = 0; i < 300; ++i) {
    Case c;
    c.kv_len = int(rng() % 700);
    c.q_len = 1 + int(rng() % 400);
    c.block_q = std::vector<int>{16, 64, 128}[rng() % 3];
    c.block_kv = std::vector<int>{16, 32, 64}[rng() % 3];
    const int lefts[] = {-1, 0, 1, 17, 128, 512};
    c.left = rng() % 4 == 0 ? int(rng() % 300) : lefts[rng() % 6];
    const int rights[] = {-1, 0, 0, 3, 64};  // 0: causal
    c.right = rights[rng() % 5];
    check_case(c);
  }
}
