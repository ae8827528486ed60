// PagedProblem: one attention-over-the-paged-cache problem with host
// buffers, its FP64 reference, and the checks every paged test makes (CPU
// and GPU alike). The paged sibling of attention_problem.hpp.
//
// What it owns, all on the host:
//   q        : [batch, q_len, q_heads, D] (dense, or padded strides: 8 spare
//              elements after every head, token and sequence); gaps NaN.
//   k/v pool : [num_pages, kv_heads, page_size, D] each. Pages are handed
//              out in a seeded random order (fragmented, like a cache that
//              has lived a while) or in order (contiguous_pages). Every
//              element that no sequence may read is NaN (kNaNBits): pages
//              nobody owns (guard pages, at least two, spread through the
//              pool by the shuffle) and each sequence's last page past its
//              kv_len. Real pages hold stale data there; a kernel that lets
//              an element past kv_len reach o — loading a whole page and
//              relying on P = 0, since 0·NaN = NaN, or adding -inf to a NaN
//              score instead of replacing it — fails loudly.
//   block_tables : [batch, stride] int32, stride = pages of max_kv_len plus
//              table_slack; entries past a sequence's last page name a guard
//              page, so reading one gives NaN, not a fault.
//   kv_lens  : [batch] int32, counting the q_len new tokens.
//   o        : [guard | output | guard]: logical elements start NaN (an
//              element never written fails the error check), guards and
//              layout gaps hold kOutGuardBits (guards_intact()).
//   lse      : [guard | batch·q_heads·q_len | guard] float, same idea.
// Shared prefix: the first shared_prefix_pages pages of every sequence are
// the same physical pages with the same data (forked sequences); a sequence
// shorter than the prefix uses a part of them, and the rest of such a page
// holds other sequences' (finite) keys it must not see.
//
// Values depend on (seed, operand, owner, position, head, dim) only — owner
// being the sequence, or "shared" for prefix pages — never on which page
// holds them, so fragmented and contiguous runs of one seed compute the
// same attention.
//
// A GPU test mirrors the buffers: device copies of every storage vector at
// the same size, params_for(device pointers, Device::kCuda) (same strides,
// guard offsets and page ids), then download o and lse into o_storage() /
// lse_storage() and run the same checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attention/cpu/paged_attention_cpu.hpp"
#include "flashscope/half.hpp"
#include "flashscope/kv_cache.hpp"
#include "flashscope/paged_attention.hpp"
#include "support/attention_problem.hpp"  // Tolerance
#include "support/random.hpp"
#include "util/math.hpp"

namespace flashscope::testing {

struct PagedShape {
  std::vector<int> kv_lens = {1};  // one per sequence (batch = size), each >= q_len
  int q_heads = 1, kv_heads = 1, q_len = 1, head_dim = 64, page_size = 16;
  int shared_prefix_pages = 0;  // pages at the start of every sequence shared by all
  int max_kv_len_slack = 0;     // params' max_kv_len = max(kv_lens) + slack (a plan sized for growth)
  int table_slack = 2;          // block-table columns past the pages of max_kv_len
  bool causal = true;
  bool contiguous_pages = false;
  bool padded_q = false;  // q/o strides with gaps
  DType dtype = DType::kBF16;
  uint64_t seed = 1;
  float softmax_scale = 0.0f;
  int window_left = -1;  // as in PagedAttentionParams: -1 unbounded
  int window_right = -1;
  float softcap = 0.0f;  // 0: off

  int batch() const { return static_cast<int>(kv_lens.size()); }
  int max_kv_len() const { return kv_lens.empty() ? 0 : *std::max_element(kv_lens.begin(), kv_lens.end()); }

  // One line that reproduces the case.
  std::string describe() const {
    std::ostringstream s;
    s << "b" << batch() << " hq" << q_heads << "/hkv" << kv_heads << " lq" << q_len << " kv_lens={";
    const size_t shown = std::min<size_t>(kv_lens.size(), 8);
    for (size_t i = 0; i < shown; ++i) s << (i ? "," : "") << kv_lens[i];
    if (shown < kv_lens.size()) s << ",... max " << max_kv_len();
    s << "} d" << head_dim << " page" << page_size << (causal ? " causal" : " full")
      << (dtype == DType::kFP16 ? " fp16" : " bf16");
    if (shared_prefix_pages) s << " shared=" << shared_prefix_pages << "pages";
    if (contiguous_pages) s << " contiguous";
    if (padded_q) s << " padded";
    if (max_kv_len_slack) s << " slack=" << max_kv_len_slack;
    if (softmax_scale != 0.0f) s << " scale=" << softmax_scale;
    if (window_left >= 0 || window_right >= 0) s << " window=(" << window_left << "," << window_right << ")";
    if (softcap > 0.0f) s << " softcap=" << softcap;
    s << " seed=" << seed;
    return s.str();
  }
};

// Base pointers of the buffers, laid out like the problem's storage vectors
// (o and lse include their guards). Host or device.
struct PagedBuffers {
  void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* kv_lens = nullptr;
};

class PagedProblem {
 public:
  static constexpr int64_t kOutGuard = 64;  // elements each side of o (128 B: keeps alignment)
  static constexpr int64_t kLseGuard = 32;  // floats each side of lse
  static constexpr uint16_t kOutGuardBits = 0xA5A5;
  static constexpr uint16_t kNaNBits = 0xFFFF;  // a NaN in both bf16 and fp16
  static constexpr float kLseGuardValue = -12345.5f;

  struct Reference {
    Status status;
    std::vector<float> o;    // dense [batch, q_len, q_heads, D]
    std::vector<float> lse;  // dense [batch, q_heads, q_len]
  };

  explicit PagedProblem(PagedShape shape) : s_(std::move(shape)) {
    const int B = s_.batch(), P = s_.page_size, D = s_.head_dim;
    max_kv_len_ = s_.max_kv_len() + s_.max_kv_len_slack;
    table_stride_ = ceil_div(max_kv_len_, P) + s_.table_slack;

    // q / o views.
    constexpr int64_t kPad = 8;
    if (s_.padded_q) {
      q_view_.head_stride = D + kPad;
      q_view_.seq_stride = s_.q_heads * q_view_.head_stride + kPad;
      q_view_.batch_stride = s_.q_len * q_view_.seq_stride + kPad;
    } else {
      q_view_ = bshd(nullptr, s_.q_len, s_.q_heads, D);
    }
    const int64_t q_size = B * q_view_.batch_stride;
    q_.assign(static_cast<size_t>(q_size), kNaNBits);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < s_.q_len; ++t)
        for (int h = 0; h < s_.q_heads; ++h)
          for (int d = 0; d < D; ++d)
            q_[static_cast<size_t>(q_offset(b, t, h, d))] =
                from_float(float(seeded_normal(s_.seed, 0, uint64_t(b), t, h, d)));

    o_.assign(static_cast<size_t>(q_size + 2 * kOutGuard), kOutGuardBits);
    o_logical_.assign(o_.size(), 0);
    for_each_q_element([&](int64_t at) { o_logical_[static_cast<size_t>(kOutGuard + at)] = 1; });
    lse_.assign(static_cast<size_t>(lse_count() + 2 * kLseGuard), kLseGuardValue);

    assign_pages();
    fill_pools();
    reset_outputs();
  }

  const PagedShape& shape() const { return s_; }
  int num_pages() const { return num_pages_; }
  int block_table_stride() const { return table_stride_; }
  int max_kv_len() const { return max_kv_len_; }
  int64_t out_count() const { return int64_t{s_.batch()} * s_.q_len * s_.q_heads * s_.head_dim; }
  int64_t lse_count() const { return int64_t{s_.batch()} * s_.q_heads * s_.q_len; }
  // Pages the problem's sequences own (shared ones once); the rest are guards.
  int used_pages() const { return used_pages_; }

  const std::vector<uint16_t>& q_storage() const { return q_; }
  const std::vector<uint16_t>& k_pool() const { return k_; }
  const std::vector<uint16_t>& v_pool() const { return v_; }
  const std::vector<int32_t>& block_tables() const { return tables_; }
  const std::vector<int32_t>& kv_lens() const { return kv_lens_; }
  std::vector<uint16_t>& o_storage() { return o_; }
  std::vector<float>& lse_storage() { return lse_; }

  PagedAttentionParams params_for(const PagedBuffers& base, Device device) const {
    PagedAttentionParams p;
    p.q = q_view_;
    p.o = q_view_;
    p.q.data = base.q;
    p.o.data = base.o == nullptr ? nullptr : static_cast<uint16_t*>(base.o) + kOutGuard;
    p.lse = base.lse == nullptr ? nullptr : base.lse + kLseGuard;
    p.k_pages = base.k_pages;
    p.v_pages = base.v_pages;
    p.block_tables = base.block_tables;
    p.block_table_stride = table_stride_;
    p.kv_lens = base.kv_lens;
    p.batch = s_.batch();
    p.q_heads = s_.q_heads;
    p.kv_heads = s_.kv_heads;
    p.q_len = s_.q_len;
    p.head_dim = s_.head_dim;
    p.page_size = s_.page_size;
    p.max_kv_len = max_kv_len_;
    p.causal = s_.causal;
    p.softmax_scale = s_.softmax_scale;
    p.window_left = s_.window_left;
    p.window_right = s_.window_right;
    p.softcap = s_.softcap;
    p.dtype = s_.dtype;
    p.device = device;
    p.num_pages = num_pages_;
    return p;
  }

  PagedAttentionParams host_params() {
    return params_for({q_.data(), o_.data(), lse_.data(), k_.data(), v_.data(), tables_.data(), kv_lens_.data()},
                      Device::kCpu);
  }

  // Puts the poison back into o and lse, so the next run must write them again.
  void reset_outputs() {
    for (size_t i = 0; i < o_.size(); ++i) o_[i] = o_logical_[i] ? kNaNBits : kOutGuardBits;
    std::fill(lse_.begin(), lse_.end(), kLseGuardValue);
    std::fill(lse_.begin() + kLseGuard, lse_.end() - kLseGuard, std::numeric_limits<float>::quiet_NaN());
  }

  // With a left window: fills with NaN every page that holds only keys
  // before every new token's window, for every sequence that uses it (a
  // page shared by a sequence that still sees it keeps its data). A path
  // that reads such a page instead of skipping it, and lets it reach o,
  // fails. Returns the pages poisoned. The reference skips them too (it
  // reads K and V rows only inside each query's window).
  int poison_pages_outside_windows() {
    if (s_.window_left < 0) return 0;
    const int P = s_.page_size;
    std::vector<uint8_t> needed(static_cast<size_t>(num_pages_), 0), used(needed.size(), 0);
    for (int b = 0; b < s_.batch(); ++b) {
      const int64_t first_key = int64_t{kv_lens_[size_t(b)]} - s_.q_len - s_.window_left;
      const int pages = ceil_div(kv_lens_[size_t(b)], P);
      for (int i = 0; i < pages; ++i) {
        const int32_t page = tables_[size_t(int64_t{b} * table_stride_ + i)];
        used[size_t(page)] = 1;
        if (int64_t{i + 1} * P > first_key) needed[size_t(page)] = 1;
      }
    }
    const size_t page_elems = size_t(s_.kv_heads) * P * s_.head_dim;
    int poisoned = 0;
    for (int page = 0; page < num_pages_; ++page) {
      if (!used[size_t(page)] || needed[size_t(page)]) continue;
      std::fill(k_.begin() + page * page_elems, k_.begin() + (page + 1) * page_elems, kNaNBits);
      std::fill(v_.begin() + page * page_elems, v_.begin() + (page + 1) * page_elems, kNaNBits);
      ++poisoned;
    }
    reference_.reset();
    return poisoned;
  }

  // Logical K/V of sequence b at position pos (read through its block table).
  float k_at(int b, int pos, int head, int d) const { return to_float(k_[pool_index(b, pos, head, d)]); }
  float v_at(int b, int pos, int head, int d) const { return to_float(v_[pool_index(b, pos, head, d)]); }
  float q_at(int b, int t, int head, int d) const { return to_float(q_[static_cast<size_t>(q_offset(b, t, head, d))]); }

  const Reference& reference() {
    if (!reference_) {
      Reference r;
      r.o.assign(static_cast<size_t>(out_count()), 0.0f);
      r.lse.assign(static_cast<size_t>(lse_count()), 0.0f);
      r.status = cpu::paged_attention_reference(host_params(), r.o.data(), r.lse.data());
      reference_ = std::move(r);
    }
    return *reference_;
  }

  // o (in the dtype, through its strides) as dense float [batch, q_len, q_heads, D].
  std::vector<float> output_as_float() const {
    std::vector<float> out(static_cast<size_t>(out_count()));
    size_t n = 0;
    for_each_q_element([&](int64_t at) { out[n++] = to_float(o_[static_cast<size_t>(kOutGuard + at)]); });
    return out;
  }
  std::vector<float> lse_values() const { return std::vector<float>(lse_.begin() + kLseGuard, lse_.end() - kLseGuard); }

  // True when nothing outside the logical output changed (bit for bit).
  bool guards_intact() const {
    for (size_t i = 0; i < o_.size(); ++i)
      if (!o_logical_[i] && o_[i] != kOutGuardBits) return false;
    for (int64_t i = 0; i < kLseGuard; ++i) {
      if (!same_bits(lse_[static_cast<size_t>(i)], kLseGuardValue)) return false;
      if (!same_bits(lse_[lse_.size() - 1 - static_cast<size_t>(i)], kLseGuardValue)) return false;
    }
    return true;
  }

  // ||out − ref|| / ||ref|| over [first, last) sequences' outputs; infinity
  // for any non-finite output element.
  double normalized_error(const float* out, int first = 0, int last = -1) {
    if (last < 0) last = s_.batch();
    const std::vector<float>& ref = reference().o;
    const size_t per_seq = static_cast<size_t>(int64_t{s_.q_len} * s_.q_heads * s_.head_dim);
    double diff2 = 0, ref2 = 0;
    for (size_t i = size_t(first) * per_seq; i < size_t(last) * per_seq; ++i) {
      if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
      const double d = double(out[i]) - ref[i];
      diff2 += d * d;
      ref2 += double(ref[i]) * ref[i];
    }
    if (ref2 == 0) return diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(diff2 / ref2);
  }
  // The largest normalized error of any one sequence: a batch-wide norm
  // would dilute one short sequence's wrong rows among 63 right ones.
  double worst_sequence_error(const float* out, int* worst_seq = nullptr) {
    double worst = 0;
    for (int b = 0; b < s_.batch(); ++b) {
      const double e = normalized_error(out, b, b + 1);
      if (!(e <= worst)) {  // NaN-safe: infinity replaces
        worst = e;
        if (worst_seq) *worst_seq = b;
      }
    }
    return worst;
  }
  double max_abs_error(const float* out) {
    const std::vector<float>& ref = reference().o;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(double(out[i]) - ref[i]));
    }
    return worst;
  }
  // Every row sees at least one key (kv_len >= q_len), so lse is finite.
  double lse_max_abs_error(const float* lse) {
    const std::vector<float>& ref = reference().lse;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(lse[i])) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(double(lse[i]) - ref[i]));
    }
    return worst;
  }

  // Error bounds, from the dtype's unit roundoff u (2^-8 bf16, 2^-11 fp16);
  // the derivation is AttentionProblem::tolerance()'s: two roundings beyond
  // float32 (P before P·V, O on the store), each <= u·max|v|, plus float32
  // accumulation over up to n = max_kv_len keys, worst case n·2^-24
  // relative, which the prefill fixture covers with 2^-12 for n <= 4096.
  // Long caches (32k keys) need the n·2^-24 term itself. lse: 1e-3 for the
  // logits' dot products plus n·2^-24 for ln(l).
  // Split-KV: a split's partial (m, l, o) kept in float32 and merged with
  // exact rescaling adds float32 roundings only, covered by the same terms;
  // a kernel that rounds partial o to the dtype adds a third u and is
  // outside these bounds on purpose.
  Tolerance tolerance() const {
    const double u = s_.dtype == DType::kFP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double accumulate = std::max(std::ldexp(1.0, -12), max_kv_len_ * std::ldexp(1.0, -24));
    Tolerance t;
    t.normalized = s_.dtype == DType::kFP16 ? 2e-3 : 1e-2;
    t.max_abs = (2 * u + accumulate) * max_abs_v();
    t.lse_abs = 1e-3 + max_kv_len_ * std::ldexp(1.0, -24);
    return t;
  }

  // Largest |v| any sequence may read.
  double max_abs_v() const {
    double m = 0;
    for (int b = 0; b < s_.batch(); ++b)
      for (int pos = 0; pos < kv_lens_[size_t(b)]; ++pos)
        for (int h = 0; h < s_.kv_heads; ++h)
          for (int d = 0; d < s_.head_dim; ++d) {
            const double x = std::fabs(double(v_at(b, pos, h, d)));
            if (x > m) m = x;  // NaN (a poisoned page) never counts
          }
    return m;
  }

 private:
  static constexpr uint64_t kSharedOwner = 0xffffffffull;

  int64_t q_offset(int b, int t, int h, int d) const {
    return b * q_view_.batch_stride + t * q_view_.seq_stride + h * q_view_.head_stride + d;
  }
  size_t pool_index(int b, int pos, int h, int d) const {
    const int P = s_.page_size;
    const int64_t page = tables_[size_t(int64_t{b} * table_stride_ + pos / P)];
    return static_cast<size_t>(((page * s_.kv_heads + h) * P + pos % P) * s_.head_dim + d);
  }

  template <typename F>
  void for_each_q_element(F&& f) const {
    for (int b = 0; b < s_.batch(); ++b)
      for (int t = 0; t < s_.q_len; ++t)
        for (int h = 0; h < s_.q_heads; ++h)
          for (int d = 0; d < s_.head_dim; ++d) f(q_offset(b, t, h, d));
  }

  void assign_pages() {
    const int B = s_.batch(), P = s_.page_size;
    const int shared = s_.shared_prefix_pages;
    std::vector<int> own(static_cast<size_t>(B));
    int used = shared;
    for (int b = 0; b < B; ++b) {
      const int pages = ceil_div(s_.kv_lens[size_t(b)], P);
      own[size_t(b)] = std::max(0, pages - shared);
      used += own[size_t(b)];
    }
    used_pages_ = used;
    num_pages_ = used + std::max(2, used / 8);
    std::vector<int32_t> order(static_cast<size_t>(num_pages_));
    for (int i = 0; i < num_pages_; ++i) order[size_t(i)] = i;
    if (!s_.contiguous_pages) {  // Fisher–Yates with splitmix64
      uint64_t state = mix64(s_.seed ^ 0x5eedull);
      for (int i = num_pages_ - 1; i > 0; --i) {
        state = mix64(state);
        std::swap(order[size_t(i)], order[size_t(state % uint64_t(i + 1))]);
      }
    }
    size_t next = 0;
    std::vector<int32_t> shared_pages(order.begin(), order.begin() + shared);
    next = size_t(shared);
    const int32_t guard = order.back();  // never handed out: used < num_pages
    tables_.assign(size_t(int64_t{B} * table_stride_), guard);
    kv_lens_.assign(s_.kv_lens.begin(), s_.kv_lens.end());
    for (int b = 0; b < B; ++b) {
      int32_t* row = &tables_[size_t(int64_t{b} * table_stride_)];
      const int pages = ceil_div(s_.kv_lens[size_t(b)], P);
      for (int i = 0; i < pages; ++i) row[i] = i < shared ? shared_pages[size_t(i)] : order[next++];
    }
    shared_pages_ = std::move(shared_pages);
  }

  void fill_pools() {
    const int P = s_.page_size, D = s_.head_dim, H = s_.kv_heads;
    const size_t pool = size_t(num_pages_) * H * P * D;
    k_.assign(pool, kNaNBits);
    v_.assign(pool, kNaNBits);
    auto put = [&](int32_t page, uint64_t owner, int pos) {
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t at = size_t(((int64_t{page} * H + h) * P + pos % P) * D + d);
          k_[at] = from_float(float(seeded_normal(s_.seed, 1, owner, pos, h, d)));
          v_[at] = from_float(float(seeded_normal(s_.seed, 2, owner, pos, h, d)));
        }
    };
    // Shared pages are whole (the parent filled them before the forks).
    for (size_t i = 0; i < shared_pages_.size(); ++i)
      for (int off = 0; off < P; ++off) put(shared_pages_[i], kSharedOwner, int(i) * P + off);
    const int shared_tokens = s_.shared_prefix_pages * P;
    for (int b = 0; b < s_.batch(); ++b)
      for (int pos = shared_tokens; pos < s_.kv_lens[size_t(b)]; ++pos)
        put(tables_[size_t(int64_t{b} * table_stride_ + pos / P)], uint64_t(b), pos);
  }

  float to_float(uint16_t x) const { return s_.dtype == DType::kFP16 ? fp16_to_float(x) : bf16_to_float(x); }
  uint16_t from_float(float f) const { return s_.dtype == DType::kFP16 ? float_to_fp16(f) : float_to_bf16(f); }
  static bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

  PagedShape s_;
  int max_kv_len_ = 0, table_stride_ = 0, num_pages_ = 0, used_pages_ = 0;
  AttnTensor q_view_;
  std::vector<uint16_t> q_, o_, k_, v_;
  std::vector<uint8_t> o_logical_;
  std::vector<float> lse_;
  std::vector<int32_t> tables_, kv_lens_, shared_pages_;
  std::optional<Reference> reference_;
};

// Grid helpers shared by the CPU and GPU paged suites.

// n lengths in [lo, hi], seeded; the first is lo and the last hi so the
// extremes are always there.
inline std::vector<int> paged_lengths(int n, int lo, int hi, uint64_t seed) {
  std::vector<int> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) {
    s = mix64(s);
    v[size_t(i)] = lo + int(s % uint64_t(hi - lo + 1));
  }
  v.front() = lo;
  if (n > 1) v.back() = hi;
  return v;
}

// Context lengths 1..8192 of at least q_len keys: small and odd ones, and
// every page size's boundaries ± 1 (16, 64, 256 and the 64-key blocks of the
// CPU decode kernels divide these).
inline std::vector<int> context_sweep(int q_len) {
  std::vector<int> v = {1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 129, 255, 256, 257,
                        511, 513, 1000, 1023, 1025, 2047, 2049, 3001, 4095, 4096, 4097, 8191, 8192};
  std::vector<int> out;
  for (int n : v)
    if (n >= q_len) out.push_back(n);
  return out;
}

inline PagedShape paged_shape(std::vector<int> kv_lens, int q_heads, int kv_heads, int q_len, int dim, int page,
                              uint64_t seed) {
  PagedShape s;
  s.kv_lens = std::move(kv_lens);
  s.q_heads = q_heads;
  s.kv_heads = kv_heads;
  s.q_len = q_len;
  s.head_dim = dim;
  s.page_size = page;
  s.seed = seed;
  return s;
}

// Builders of the suites that run attention over a PagedKvCache's own pages.

// A value in [-2.5, 2.5] in steps of 1/400 from a key (their K, V and q).
inline float hashed_value(uint64_t key) { return float(int(mix64(key) % 2001) - 1000) / 400.0f; }

// append_kv's params for n new tokens k, v [n, kv_heads, head_dim] at slots,
// into layer `layer` of cache (host pointers; a device run swaps them).
inline AppendKvParams cache_append_params(const PagedKvCache& cache, int layer, uint16_t* k, uint16_t* v,
                                          const Slot* slots, int n) {
  const KvCacheConfig& c = cache.config();
  AppendKvParams a;
  a.k_new = bshd(k, n, c.kv_heads, c.head_dim);
  a.v_new = bshd(v, n, c.kv_heads, c.head_dim);
  a.slots = slots;
  a.num_tokens = n;
  a.k_pages = cache.k_pages(layer);
  a.v_pages = cache.v_pages(layer);
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.page_size = c.page_size;
  a.num_pages = cache.num_pages();
  return a;
}

// The block tables of a cache's sequences packed [batch, stride] and their
// lengths, as paged_attention reads them.
struct CacheTables {
  std::vector<int32_t> tables, lens;
  int stride = 0, max_len = 0;
};
inline CacheTables cache_tables(const PagedKvCache& cache, const std::vector<int>& seqs) {
  CacheTables t;
  for (int s : seqs) {
    t.lens.push_back(cache.length(s));
    t.max_len = std::max(t.max_len, t.lens.back());
  }
  t.stride = ceil_div(t.max_len, cache.config().page_size);
  t.tables.assign(seqs.size() * size_t(t.stride), 0);
  for (size_t b = 0; b < seqs.size(); ++b) {
    const auto& table = cache.block_table(seqs[b]);
    std::copy(table.begin(), table.end(), t.tables.begin() + long(b * size_t(t.stride)));
  }
  return t;
}

// paged_attention's params for q_len new tokens of q_heads heads per
// sequence, q and o [batch, q_len, q_heads, head_dim], over layer `layer`
// (host pointers; lse, num_pages and a device run left to the caller).
inline PagedAttentionParams cache_attention_params(const PagedKvCache& cache, int layer, const CacheTables& t,
                                                   uint16_t* q, uint16_t* o, int q_heads, int q_len) {
  const KvCacheConfig& c = cache.config();
  PagedAttentionParams p;
  p.q = bshd(q, q_len, q_heads, c.head_dim);
  p.o = bshd(o, q_len, q_heads, c.head_dim);
  p.k_pages = cache.k_pages(layer);
  p.v_pages = cache.v_pages(layer);
  p.block_tables = t.tables.data();
  p.block_table_stride = t.stride;
  p.kv_lens = t.lens.data();
  p.batch = int(t.lens.size());
  p.q_heads = q_heads;
  p.kv_heads = c.kv_heads;
  p.q_len = q_len;
  p.head_dim = c.head_dim;
  p.page_size = c.page_size;
  p.max_kv_len = t.max_len;
  return p;
}

}  // namespace flashscope::testing
