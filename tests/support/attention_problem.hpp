// AttentionProblem: one prefill problem with host buffers, its reference
// answer, and the checks every attention test makes (CPU and GPU alike);
// SmallPrefill: the constant one the validation and plan tests build.
//
// What it owns, all on the host:
//   q, k, v  : uint16_t in the shape's dtype and layout, seeded values with
//              mean 0 and variance 1, bell-shaped (support/random.hpp).
//              Values depend on (seed, operand, sequence, token, head, dim)
//              only, never on the layout, so BSHD and BHSD runs of one seed
//              compute the same attention. Gaps of a padded layout hold NaN:
//              an implementation that lets an element it should not read
//              reach its output fails loudly.
//   o        : [guard | output | guard]; the output's logical elements start
//              as NaN (an element never written fails the error check) and
//              everything else, guards and layout gaps, holds kOutGuardBits
//              (any stray write changes it: guards_intact()).
//   lse      : [guard | lse | guard] float, same idea.
//   cu_seqlens_q / _k for varlen shapes (int32, batch + 1 prefix sums).
//
// A GPU test mirrors the buffers: allocate device copies of every storage
// vector at the same size, upload, run on params_for(device pointers,
// Device::kCuda) (same strides, same guard offsets), download o and lse
// into o_storage() / lse_storage(), then run the same checks.
//
// Tolerances (tolerance()) are derived from the dtype's unit roundoff u,
// not from observed errors; see the comment there.
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

#include "attention/cpu/attention_cpu.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/half.hpp"
#include "support/random.hpp"

namespace flashscope::testing {

// How q/k/v/o are laid out in memory (head_dim is always contiguous).
enum class Layout {
  kBSHD,        // [batch, seq, heads, dim], contiguous: the engine's layout
  kBHSD,        // [batch, heads, seq, dim], contiguous: PyTorch's layout
  kPaddedBSHD,  // BSHD with 8 spare elements after every head, token and batch,
                // so no stride equals the product of the inner extents; 8
                // elements keep the GPU's 16-byte alignment
};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kBSHD: return "bshd";
    case Layout::kBHSD: return "bhsd";
    case Layout::kPaddedBSHD: return "bshd+pad";
  }
  return "?";
}

struct AttentionShape {
  int batch = 1, q_heads = 1, kv_heads = 1, q_len = 1, kv_len = 1, head_dim = 64;
  bool causal = false;
  bool varlen = false;
  // Varlen only: one length per sequence. batch, q_len and kv_len are then
  // derived (count and maxima) by AttentionProblem.
  std::vector<int> q_lens, kv_lens;
  Layout layout = Layout::kBSHD;
  DType dtype = DType::kBF16;
  uint64_t seed = 1;
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim), as in PrefillParams
  int window_left = -1;        // as in PrefillParams: -1 unbounded
  int window_right = -1;
  float softcap = 0.0f;        // 0: off

  // One line that reproduces the case, e.g.
  // "b2 hq9/hkv3 lq17 lk1000 d64 causal bf16 bshd seed=7".
  std::string describe() const {
    std::ostringstream s;
    s << "b" << batch << " hq" << q_heads << "/hkv" << kv_heads;
    if (varlen) {
      s << " varlen q_lens={";
      for (size_t i = 0; i < q_lens.size(); ++i) s << (i ? "," : "") << q_lens[i];
      s << "} kv_lens={";
      for (size_t i = 0; i < kv_lens.size(); ++i) s << (i ? "," : "") << kv_lens[i];
      s << "}";
    } else {
      s << " lq" << q_len << " lk" << kv_len;
    }
    s << " d" << head_dim << (causal ? " causal" : " full") << " " << dtype_name_of(dtype) << " "
      << layout_name(layout) << " seed=" << seed;
    if (softmax_scale != 0.0f) s << " scale=" << softmax_scale;
    if (window_left >= 0 || window_right >= 0) s << " window=(" << window_left << "," << window_right << ")";
    if (softcap > 0.0f) s << " softcap=" << softcap;
    return s.str();
  }

 private:
  // Local so the fixture does not need the library's dtype_name() symbol.
  static const char* dtype_name_of(DType t) {
    return t == DType::kBF16 ? "bf16" : t == DType::kFP16 ? "fp16" : "fp32";
  }
};

// The shapes the suites build: a dense batch, or varlen sequences (batch,
// q_len and kv_len then come from the lengths). Layout, dtype and scale stay
// at their defaults for the caller to set.
inline AttentionShape dense_shape(int batch, int q_heads, int kv_heads, int q_len, int kv_len, int dim, bool causal,
                                  uint64_t seed = 1) {
  AttentionShape s;
  s.batch = batch;
  s.q_heads = q_heads;
  s.kv_heads = kv_heads;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.head_dim = dim;
  s.causal = causal;
  s.seed = seed;
  return s;
}
inline AttentionShape varlen_shape(std::vector<int> q_lens, std::vector<int> kv_lens, int q_heads, int kv_heads,
                                   int dim, bool causal, uint64_t seed = 1) {
  AttentionShape s = dense_shape(1, q_heads, kv_heads, 0, 0, dim, causal, seed);
  s.varlen = true;
  s.q_lens = std::move(q_lens);
  s.kv_lens = std::move(kv_lens);
  return s;
}

// A small constant-valued prefill over host buffers, for the tests of what is
// decided before any arithmetic (validation, planning, a plan's reuse), where
// AttentionProblem's seeded data and reference would be wasted: batch 2, 4
// q-heads over 2 kv-heads, BSHD bf16 with q = 0.5 and k = v = 0.25. o starts
// as kOutFill, so a test sees whether a refused call wrote anything.
struct SmallPrefill {
  static constexpr uint16_t kOutFill = 0x7777;
  std::vector<uint16_t> q, k, v, o;
  PrefillParams p;
  explicit SmallPrefill(Device device = Device::kCpu, int head_dim = 64, int q_len = 33, int kv_len = 40) {
    constexpr int kBatch = 2, kQHeads = 4, kKvHeads = 2;
    q.assign(size_t{kBatch} * kQHeads * size_t(q_len) * size_t(head_dim), float_to_bf16(0.5f));
    k.assign(size_t{kBatch} * kKvHeads * size_t(kv_len) * size_t(head_dim), float_to_bf16(0.25f));
    v = k;
    o.assign(q.size(), kOutFill);
    p.device = device;
    p.batch = kBatch;
    p.q_heads = kQHeads;
    p.kv_heads = kKvHeads;
    p.q_len = q_len;
    p.kv_len = kv_len;
    p.head_dim = head_dim;
    p.q = bshd(q.data(), q_len, kQHeads, head_dim);
    p.k = bshd(k.data(), kv_len, kKvHeads, head_dim);
    p.v = bshd(v.data(), kv_len, kKvHeads, head_dim);
    p.o = bshd(o.data(), q_len, kQHeads, head_dim);
  }
  bool output_untouched() const {
    return std::all_of(o.begin(), o.end(), [](uint16_t x) { return x == kOutFill; });
  }
};

// Bounds a correct implementation stays within; see AttentionProblem::tolerance().
struct Tolerance {
  double normalized = 0;  // ||out − ref|| / ||ref|| over the whole output
  double max_abs = 0;     // largest |out − ref| of any element
  double lse_abs = 0;     // largest |lse − lse_ref| (both -inf counts as 0)
};

// Base pointers of the seven allocations, laid out like the problem's storage
// vectors (o and lse include their guards). Host or device.
struct AttentionBuffers {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
};

enum class Operand { kQ, kK, kV };

class AttentionProblem {
 public:
  static constexpr int64_t kOutGuard = 64;      // elements each side of o (128 B: keeps alignment)
  static constexpr int64_t kLseGuard = 32;      // floats each side of lse
  static constexpr uint16_t kOutGuardBits = 0xA5A5;
  static constexpr uint16_t kNaNBits = 0xFFFF;  // a NaN in both bf16 and fp16
  static constexpr float kLseGuardValue = -12345.5f;

  struct Reference {
    Status status;
    std::vector<float> o;    // dense [rows, q_heads, head_dim], rows = batch·q_len or total_q
    std::vector<float> lse;  // dense lse layout
  };

  explicit AttentionProblem(AttentionShape shape) : shape_(std::move(shape)) {
    if (shape_.varlen) {
      shape_.batch = static_cast<int>(shape_.q_lens.size());
      shape_.q_len = shape_.q_lens.empty() ? 0 : *std::max_element(shape_.q_lens.begin(), shape_.q_lens.end());
      shape_.kv_len = shape_.kv_lens.empty() ? 0 : *std::max_element(shape_.kv_lens.begin(), shape_.kv_lens.end());
      cu_q_.push_back(0);
      cu_k_.push_back(0);
      for (int b = 0; b < shape_.batch; ++b) {
        cu_q_.push_back(cu_q_.back() + shape_.q_lens[static_cast<size_t>(b)]);
        cu_k_.push_back(cu_k_.back() + shape_.kv_lens[static_cast<size_t>(b)]);
      }
    }
    const int dim = shape_.head_dim;
    q_view_ = make_view(q_tokens(), shape_.q_heads, dim, &q_size_);
    k_view_ = make_view(kv_tokens(), shape_.kv_heads, dim, &kv_size_);
    o_view_ = q_view_;

    q_.assign(static_cast<size_t>(q_size_), kNaNBits);
    k_.assign(static_cast<size_t>(kv_size_), kNaNBits);
    v_.assign(static_cast<size_t>(kv_size_), kNaNBits);
    fill_random(Operand::kQ);
    fill_random(Operand::kK);
    fill_random(Operand::kV);

    o_.assign(static_cast<size_t>(q_size_ + 2 * kOutGuard), kOutGuardBits);
    o_logical_.assign(o_.size(), 0);
    for_each_q_element([&](int64_t at) { o_logical_[static_cast<size_t>(kOutGuard + at)] = 1; });
    lse_.assign(static_cast<size_t>(lse_count() + 2 * kLseGuard), kLseGuardValue);
    reset_outputs();
  }

  const AttentionShape& shape() const { return shape_; }

  // Per-sequence lengths (equal to q_len / kv_len for dense batches).
  int seq_q_len(int b) const { return shape_.varlen ? shape_.q_lens[static_cast<size_t>(b)] : shape_.q_len; }
  int seq_kv_len(int b) const { return shape_.varlen ? shape_.kv_lens[static_cast<size_t>(b)] : shape_.kv_len; }
  // Rows of the dense output: batch·q_len, or total_q for varlen.
  int64_t out_rows() const { return shape_.varlen ? cu_q_.back() : int64_t{shape_.batch} * shape_.q_len; }
  int64_t lse_count() const { return out_rows() * shape_.q_heads; }

  // Strides of q/o and of k/v (data is null): what a device copy must use.
  AttnTensor q_strides() const { return q_view_; }
  AttnTensor kv_strides() const { return k_view_; }

  const std::vector<uint16_t>& q_storage() const { return q_; }
  const std::vector<uint16_t>& k_storage() const { return k_; }
  const std::vector<uint16_t>& v_storage() const { return v_; }
  std::vector<uint16_t>& o_storage() { return o_; }
  std::vector<float>& lse_storage() { return lse_; }
  const std::vector<int32_t>& cu_seqlens_q() const { return cu_q_; }
  const std::vector<int32_t>& cu_seqlens_k() const { return cu_k_; }

  // Params over buffers laid out like this problem's storage (host or device).
  PrefillParams params_for(const AttentionBuffers& base, Device device) const {
    PrefillParams p;
    p.q = q_view_;
    p.k = k_view_;
    p.v = k_view_;
    p.o = o_view_;
    p.q.data = base.q;
    p.k.data = base.k;
    p.v.data = base.v;
    p.o.data = base.o == nullptr ? nullptr : static_cast<uint16_t*>(base.o) + kOutGuard;
    p.lse = base.lse == nullptr ? nullptr : base.lse + kLseGuard;
    p.device = device;
    p.dtype = shape_.dtype;
    p.batch = shape_.batch;
    p.q_heads = shape_.q_heads;
    p.kv_heads = shape_.kv_heads;
    p.q_len = shape_.q_len;
    p.kv_len = shape_.kv_len;
    p.head_dim = shape_.head_dim;
    if (shape_.varlen) {
      p.cu_seqlens_q = base.cu_seqlens_q;
      p.cu_seqlens_k = base.cu_seqlens_k;
    }
    p.causal = shape_.causal;
    p.softmax_scale = shape_.softmax_scale;
    p.window_left = shape_.window_left;
    p.window_right = shape_.window_right;
    p.softcap = shape_.softcap;
    return p;
  }

  PrefillParams host_params() {
    return params_for({q_.data(), k_.data(), v_.data(), o_.data(), lse_.data(), cu_q_.data(), cu_k_.data()},
                      Device::kCpu);
  }

  // Puts the poison back into o and lse, so the next run must write them again.
  void reset_outputs() {
    for (size_t i = 0; i < o_.size(); ++i) o_[i] = o_logical_[i] ? kNaNBits : kOutGuardBits;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill(lse_.begin(), lse_.end(), kLseGuardValue);
    std::fill(lse_.begin() + kLseGuard, lse_.end() - kLseGuard, nan);
  }

  // Element access by (sequence, token within it, head, dim). set() rounds to
  // the dtype and forgets the cached reference.
  float get(Operand which, int b, int token, int head, int d) const {
    const uint16_t x = storage(which)[static_cast<size_t>(offset(which, b, token, head, d))];
    return to_float(x);
  }
  void set(Operand which, int b, int token, int head, int d, float value) {
    mutable_storage(which)[static_cast<size_t>(offset(which, b, token, head, d))] = from_float(value);
    reference_.reset();
  }

  // The FP64 reference answer, computed once.
  const Reference& reference() {
    if (!reference_) {
      Reference r;
      r.o.assign(static_cast<size_t>(out_rows() * shape_.q_heads * shape_.head_dim), 0.0f);
      r.lse.assign(static_cast<size_t>(lse_count()), 0.0f);
      r.status = cpu::attention_reference(host_params(), r.o.data(), r.lse.data());
      reference_ = std::move(r);
    }
    return *reference_;
  }

  // o (in the dtype, through its strides) as dense float [rows, q_heads, head_dim].
  std::vector<float> output_as_float() const {
    std::vector<float> out(static_cast<size_t>(out_rows() * shape_.q_heads * shape_.head_dim));
    size_t n = 0;
    for_each_q_element([&](int64_t at) { out[n++] = to_float(o_[static_cast<size_t>(kOutGuard + at)]); });
    return out;
  }
  // lse without its guards, in the dense lse layout.
  std::vector<float> lse_values() const {
    return std::vector<float>(lse_.begin() + kLseGuard, lse_.end() - kLseGuard);
  }

  // True when nothing outside the logical output changed: o's guards and
  // layout gaps, and lse's guards (compared bit for bit).
  bool guards_intact() const {
    for (size_t i = 0; i < o_.size(); ++i) {
      if (!o_logical_[i] && o_[i] != kOutGuardBits) return false;
    }
    for (int64_t i = 0; i < kLseGuard; ++i) {
      if (!same_bits(lse_[static_cast<size_t>(i)], kLseGuardValue)) return false;
      if (!same_bits(lse_[lse_.size() - 1 - static_cast<size_t>(i)], kLseGuardValue)) return false;
    }
    return true;
  }

  // ||out − ref|| / ||ref|| over dense float output. Infinity when out holds a
  // NaN or inf anywhere, so a NaN can never pass a `<` bound; 0/0 (all rows
  // masked, output all zero) is 0.
  double normalized_error(const float* out) {
    const std::vector<float>& ref = reference().o;
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
      const double d = static_cast<double>(out[i]) - ref[i];
      diff2 += d * d;
      ref2 += static_cast<double>(ref[i]) * ref[i];
    }
    if (ref2 == 0) return diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(diff2 / ref2);
  }

  // max |out − ref|; infinity for any non-finite element.
  double max_abs_error(const float* out) {
    const std::vector<float>& ref = reference().o;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - ref[i]));
    }
    return worst;
  }

  // max |lse − lse_ref| over the dense lse layout. Rows with no visible key
  // must be -inf in both (difference 0); any other non-finite value, or -inf
  // on one side only, is infinity.
  double lse_max_abs_error(const float* lse) {
    const std::vector<float>& ref = reference().lse;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const bool ref_empty = std::isinf(ref[i]) && ref[i] < 0;
      const bool out_empty = std::isinf(lse[i]) && lse[i] < 0;
      if (ref_empty && out_empty) continue;
      if (ref_empty != out_empty || !std::isfinite(lse[i])) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(static_cast<double>(lse[i]) - ref[i]));
    }
    return worst;
  }

  // Error bounds for this problem, from the precision of its dtype.
  //
  // Let u be the unit roundoff of the output dtype: 2^-8 for bf16 (8
  // significant bits), 2^-11 for fp16. A FlashAttention-2 kernel rounds twice
  // beyond float32: P to the dtype before P·V, and O on the final store. Each
  // rounding changes an element by at most u relative:
  //   P: |Σ_j (p̂_j − p_j) v_j| / l <= u · Σ_j p_j |v_j| / l <= u · max|v|
  //      (l sums the unrounded p, as in FlashAttention-2)
  //   O: |ô − o| <= u · |o| <= u · max|v|
  // so max_abs <= 2u·max|v| plus float32 accumulation: a dot of D terms and
  // a sum over up to kv_len keys, worst case n·2^-24 relative for n terms,
  // which 2^-12·max|v| covers for n up to 4096.
  // The normalized (RMS) error is the same two roundings averaged over many
  // elements: typically about u (≈3e-3 for bf16), at most about 2u; the
  // bounds 1e-2 (≈2.6u) for bf16 and 2e-3 (≈4u) for fp16 leave room for the
  // float32 part, which is a larger share of fp16's smaller u.
  // lse does not see P's rounding; its error is float32 arithmetic only: the
  // logit's dot product (D·2^-24 relative to scale·Σ|q_d k_d|, about 1e-4
  // for unit-variance data at D = 128) plus ln(l) over kv_len keys (kv_len·2^-24),
  // so 1e-3 for the fixture's data and default scales. Tests with large
  // scales or large values state their own bound.
  Tolerance tolerance() const {
    const double u = shape_.dtype == DType::kFP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    Tolerance t;
    t.normalized = shape_.dtype == DType::kFP16 ? 2e-3 : 1e-2;
    t.max_abs = (2 * u + std::ldexp(1.0, -12)) * max_abs_v();
    t.lse_abs = 1e-3;
    return t;
  }

  // Largest |v| of any logical V element.
  double max_abs_v() const {
    double m = 0;
    for_each_kv_element([&](int64_t at) { m = std::max(m, std::fabs(double{to_float(v_[static_cast<size_t>(at)])})); });
    return m;
  }

 private:
  int64_t q_tokens() const { return shape_.varlen ? cu_q_.back() : shape_.q_len; }
  int64_t kv_tokens() const { return shape_.varlen ? cu_k_.back() : shape_.kv_len; }
  int tensor_batch() const { return shape_.varlen ? 1 : shape_.batch; }

  // Strides of a [tensor_batch, seq, heads, dim] tensor in this layout; *size
  // gets the elements it spans.
  AttnTensor make_view(int64_t seq, int64_t heads, int64_t dim, int64_t* size) const {
    AttnTensor t;
    constexpr int64_t kPad = 8;
    switch (shape_.layout) {
      case Layout::kBSHD: t = bshd(nullptr, seq, heads, dim); break;
      case Layout::kBHSD: t = bhsd(nullptr, seq, heads, dim); break;
      case Layout::kPaddedBSHD:
        t.head_stride = dim + kPad;
        t.seq_stride = heads * t.head_stride + kPad;
        t.batch_stride = seq * t.seq_stride + kPad;
        break;
    }
    *size = tensor_batch() * t.batch_stride;
    return t;
  }

  int64_t offset(Operand which, int b, int token, int head, int d) const {
    const AttnTensor& t = which == Operand::kQ ? q_view_ : k_view_;
    const int64_t row = shape_.varlen ? int64_t{(which == Operand::kQ ? cu_q_ : cu_k_)[static_cast<size_t>(b)]} + token
                                      : token;
    const int64_t base = shape_.varlen ? 0 : int64_t{b} * t.batch_stride;
    return base + row * t.seq_stride + int64_t{head} * t.head_stride + d;
  }

  // Offsets of every logical q (= o) element, in dense [rows, heads, dim] order.
  template <typename F>
  void for_each_q_element(F&& f) const {
    for (int b = 0; b < shape_.batch; ++b)
      for (int i = 0; i < seq_q_len(b); ++i)
        for (int h = 0; h < shape_.q_heads; ++h)
          for (int d = 0; d < shape_.head_dim; ++d) f(offset(Operand::kQ, b, i, h, d));
  }
  template <typename F>
  void for_each_kv_element(F&& f) const {
    for (int b = 0; b < shape_.batch; ++b)
      for (int j = 0; j < seq_kv_len(b); ++j)
        for (int h = 0; h < shape_.kv_heads; ++h)
          for (int d = 0; d < shape_.head_dim; ++d) f(offset(Operand::kK, b, j, h, d));
  }

  void fill_random(Operand which) {
    const bool is_q = which == Operand::kQ;
    const int heads = is_q ? shape_.q_heads : shape_.kv_heads;
    std::vector<uint16_t>& dst = mutable_storage(which);
    for (int b = 0; b < shape_.batch; ++b) {
      const int len = is_q ? seq_q_len(b) : seq_kv_len(b);
      for (int t = 0; t < len; ++t)
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < shape_.head_dim; ++d)
            dst[static_cast<size_t>(offset(which, b, t, h, d))] =
                from_float(static_cast<float>(seeded_normal(shape_.seed, static_cast<int>(which),
                                                            static_cast<uint64_t>(b), t, h, d)));
    }
  }

  const std::vector<uint16_t>& storage(Operand which) const {
    return which == Operand::kQ ? q_ : which == Operand::kK ? k_ : v_;
  }
  std::vector<uint16_t>& mutable_storage(Operand which) {
    return which == Operand::kQ ? q_ : which == Operand::kK ? k_ : v_;
  }

  float to_float(uint16_t x) const { return shape_.dtype == DType::kFP16 ? fp16_to_float(x) : bf16_to_float(x); }
  uint16_t from_float(float f) const { return shape_.dtype == DType::kFP16 ? float_to_fp16(f) : float_to_bf16(f); }
  static bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

  AttentionShape shape_;
  AttnTensor q_view_, k_view_, o_view_;
  int64_t q_size_ = 0, kv_size_ = 0;
  std::vector<uint16_t> q_, k_, v_, o_;
  std::vector<uint8_t> o_logical_;  // 1 where o_ holds an output element
  std::vector<float> lse_;
  std::vector<int32_t> cu_q_, cu_k_;
  std::optional<Reference> reference_;
};

}  // namespace flashscope::testing
