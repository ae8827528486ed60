// The Hopper prefill kernel's tile scheduler: which work tiles (q-tile,
// q-head, sequence) a CTA takes and in what order.
//
// Not persistent: one work tile per CTA, from the grid (attention_views.cuh's
// cta_view; causal production launches take the longest q-tiles of every
// head first).
//
// PERSISTENT (dense views through TMA, no probes): a grid of G ≤ #SMs CTAs,
// each walking its share of the work tiles, dealt as persistent_deal.h says
// (the deal and the list's order come built from the launcher as hp.deal and
// hp.tiles, their divisions as FastDivmods). A CTA's items are a work tile
// per round, then (split tail, non-causal launches with hp.split set) its
// pieces of the last two rounds' tiles: a work tile's rows and a run of its
// key tiles, so every CTA ends within a key tile of the others; a tile's
// pieces are merged by the last of its holders to finish
// (hopper_epilogue.cuh). 32-bit: a launch has fewer than 2^31 work tiles.
//
// EXTRAS (sliding window, soft-cap: hp.extras; dense views through TMA): a work tile's
// keys are those some row of it sees, [first row's position − window_left,
// last row's position + window_right] within its range, so key tiles outside
// every row's window are never loaded: its cost grows with the window, not
// the context. The start need not be a multiple of the key tile (TMA reads
// from any row). No split tail then (the plan leaves it out).
#pragma once

#include "kernels/attention/attention_views.cuh"
#include "kernels/attention/persistent_deal.h"
#include "kernels/common/math.h"
#include "kernels/hopper/hopper_layout.cuh"

namespace flashscope::kernels::hopper_detail {

// Built in the kernel from its own values, held by reference as the lambdas
// these functions once were held them (which keeps the kernel's code as it was).
template <typename Cfg, bool kCausal, typename View, typename Probe, bool kPersistent, bool kExtras = false>
struct HopperSchedule {
  using Params = typename Probe::template Params<HopperParams<typename View::Params>>;
  static constexpr bool kMaySplit = kPersistent && !kCausal;

  const Params& hp;
  const typename View::Params& p;
  const PersistentDeal& deal;
  const int& whole_rounds;  // items before the split tail's pieces
  const int& items;         // this CTA's work tiles and pieces

  // Whether item `item` gives this CTA a work tile (the deal's last round
  // may leave a CTA without one).
  __device__ __forceinline__ bool has_work(int item) const {
    return !kPersistent || item >= whole_rounds || deal.entry(item, blockIdx.x) >= 0;
  }

  // EXTRAS: the view's keys narrowed to the work tile's windows (row r sits
  // at position r + diag, bottom-right aligned as causal; causal has no
  // window to the right). May leave no keys (kv_begin >= kv_end).
  __device__ __forceinline__ View windowed(View v) const {
    if constexpr (kExtras) {
      const HopperExtras& x = hp.extras;
      if (x.window_left >= 0) v.kv_begin = max(v.kv_begin, v.q0 + v.diag - x.window_left);
      if (!kCausal && x.window_right >= 0)
        v.kv_end = min(v.kv_end, min(v.q0 + Cfg::kBlockQ, v.rows) + v.diag + x.window_right);
    }
    return v;
  }

  // Item `item`'s rows and keys (a piece of a split tile: its key tiles only).
  __device__ __forceinline__ View work_view(int item) const {
    if constexpr (kPersistent) {
      auto tile_view = [&](int linear) {
        const WorkTileList::Tile t = hp.tiles.at(linear);
        if constexpr (kExtras) {
          return windowed(View(p, t.q_tile, t.q_head, t.seq, t.kv_head));
        } else {
          return View(p, t.q_tile, t.q_head, t.seq, t.kv_head);
        }
      };
      if (kMaySplit && item >= whole_rounds) {
        const SplitTail::Piece piece = hp.split.piece_in_order(blockIdx.x, item - whole_rounds);
        View v = tile_view(hp.split.whole_tiles + piece.tile);
        v.kv_begin = piece.unit_begin * Cfg::kBlockKV;
        v.kv_end = min(v.kv_end, piece.unit_end * Cfg::kBlockKV);
        return v;
      }
      return tile_view(deal.entry(item, blockIdx.x));
    } else {
      return windowed(cta_view<View, kCausal && !Probe::kEnabled>(p));
    }
  }

  __device__ __forceinline__ static int kv_tiles_of(const View& v) {
    return v.kv_end > v.kv_begin ? ceil_div(v.kv_end - v.kv_begin, Cfg::kBlockKV) : 0;
  }

  // The last of this CTA's items with keys (-1: none), from `first_item` on:
  // the ping-pong ring leaves out its final hand-over there.
  __device__ __forceinline__ int last_keyed_item(int first_item, int first_kv_tiles) const {
    int last = -1;
    if constexpr (kPersistent) {
      for (int item = items - 1; item >= first_item && last < 0; --item)
        if (has_work(item) && kv_tiles_of(work_view(item)) > 0) last = item;
    } else {
      last = first_kv_tiles > 0 ? 0 : -1;
    }
    return last;
  }
};

}  // namespace flashscope::kernels::hopper_detail
