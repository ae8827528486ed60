// Decode attention driver (see decode_attention.hpp): picks the kernel,
// plans the work items, runs them over the threads and merges the partial
// states.
//
// Plan. Items are (sequence b, KV range), every kv-head of it in one pass
// (decode_attention_impl.hpp). The ranges are cut at multiples of `chunk`
// keys, and chunk depends only on max_kv_len, batch and the thread count:
// never on q_len or a sequence's own length, so a row's partial states, and
// their merge, are the same whichever rows share the call. With T threads a
// KV range splits into s = T / gcd(batch, T) parts (batch · s items divide
// evenly over T; batch 1 on 2 threads: s = 2), none shorter than kMinChunk
// keys; s = 1 once batch >= 4T (enough items to balance). Ranges a
// sequence's rows cannot see (past its length, before every row's window)
// are no items.
//
// Threads. One OpenMP region: the items (dynamic), then the merge per
// sequence. A call below kParallelMinMacs multiply-adds runs on
// the calling thread: a fork/join costs a few µs idle and a scheduler slice
// when another process holds the other core (short contexts).
//
// Merge, per row: M = max_s m_s over the ranges with l_s > 0,
//   L = Σ_s l_s · exp2(m_s − M),  o = (Σ_s acc_s · exp2(m_s − M)) / L,
//   lse = M · ln 2 + ln L;  no range with l_s > 0: o = 0, lse = −inf.
//
// Scratch (allocated before the region, so failure is a Status):
//   per thread: item_scratch_floats (q rows and one block of scores)
//   per item:   m [R], l [R], acc [R, D]  (R = kv_heads · group · q_len)
#include "attention/cpu/decode_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/openmp.hpp"
#include "cpu_features.hpp"
#include "attention/cpu/decode_attention_impl.hpp"
#include "flashscope/half.hpp"
#include "util/math.hpp"

namespace flashscope::cpu {
namespace {

using decode::Item;
using decode::ItemFn;
using decode::kBlock;
using decode::Problem;

constexpr int kMinChunk = 256;                    // keys: shorter ranges cost more in merging than they save
constexpr int64_t kParallelMinMacs = 256 * 1024;  // below this the call runs on one thread

int vector_width(DecodeIsa isa) {
  switch (isa) {
    case DecodeIsa::kScalar: return 1;
    case DecodeIsa::kPortable: return 8;
    case DecodeIsa::kAvx2: return 8;
    case DecodeIsa::kAvx512: return 16;
    case DecodeIsa::kNeon: return 4;
    case DecodeIsa::kAvx512Bf16: return 32;
    case DecodeIsa::kAvx512Vnni: return 32;
    case DecodeIsa::kNeonDot: return 4;
  }
  return 1;
}

ItemFn item_fn(DecodeIsa isa, bool kv_quantized) {
  if (kv_quantized) {
    switch (isa) {
      case DecodeIsa::kScalar:
      case DecodeIsa::kPortable: return decode::kItemQ8Portable;
      case DecodeIsa::kAvx2: return cpu_has_avx2() ? decode::kItemQ8Avx2 : nullptr;
      case DecodeIsa::kAvx512Vnni: return cpu_has_avx512_vnni() ? decode::kItemQ8Avx512Vnni : nullptr;
      case DecodeIsa::kNeonDot: return cpu_has_neon_dotprod() ? decode::kItemQ8NeonDot : nullptr;
      default: return nullptr;
    }
  }
  switch (isa) {
    case DecodeIsa::kScalar: return decode::kItemScalar;
    case DecodeIsa::kPortable: return decode::kItemPortable;
    case DecodeIsa::kAvx2: return cpu_has_avx2() ? decode::kItemAvx2 : nullptr;
    case DecodeIsa::kAvx512: return cpu_has_avx512() ? decode::kItemAvx512 : nullptr;
    case DecodeIsa::kNeon: return decode::kItemNeon;
    case DecodeIsa::kAvx512Bf16: return cpu_has_avx512_bf16() ? decode::kItemAvx512Bf16 : nullptr;
    case DecodeIsa::kAvx512Vnni:
    case DecodeIsa::kNeonDot: return nullptr;
  }
  return nullptr;
}

// Keys [lo, hi) some row of sequence b may see.
void visible_keys(const DecodeParams& p, int b, int64_t* lo, int64_t* hi) {
  const int64_t kv_len = p.kv_lens[b];
  const int64_t shift = kv_len - p.q_len;
  *lo = p.window_left >= 0 ? std::max<int64_t>(0, shift - p.window_left) : 0;
  int64_t h = kv_len;
  if (p.causal) h = std::min(h, shift + p.q_len);
  if (p.window_right >= 0) h = std::min(h, shift + p.q_len - 1 + p.window_right + 1);
  *hi = std::max<int64_t>(*lo, h);
}

int64_t chunk_keys(int64_t max_kv_len, int n, int threads) {
  int splits = 1;
  if (n < 4 * threads) splits = threads / std::gcd(n, threads);
  const int64_t per = ceil_div<int64_t>(max_kv_len, splits);
  return std::max<int64_t>(kMinChunk, ceil_div<int64_t>(per, kBlock) * kBlock);
}

template <bool kFp16>
void store_row(uint16_t* dst, const float* acc, float inv, int dim) {
  for (int d = 0; d < dim; ++d) dst[d] = kFp16 ? float_to_fp16(acc[d] * inv) : float_to_bf16(acc[d] * inv);
}

// Merges the partial states of sequence b: its `count` items' partials,
// R rows each (row h · pr.rows + r). acc: [head_dim] floats of scratch.
void merge(const DecodeParams& p, const Problem& pr, int b, int count, const float* part, size_t part_floats,
           float* acc) {
  const int dim = p.head_dim;
  const int rows = static_cast<int>(decode::item_rows(pr));
  auto* o = static_cast<uint16_t*>(p.o.data);
  for (int row = 0; row < rows; ++row) {
    const int h = row / pr.rows, r = row % pr.rows;
    const int t = r / pr.group, hq = h * pr.group + r % pr.group;
    float big_m = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < count; ++i) {
      const float* pt = part + static_cast<size_t>(i) * part_floats;
      if (pt[rows + row] > 0.0f) big_m = std::max(big_m, pt[row]);
    }
    float big_l = 0.0f;
    std::fill(acc, acc + dim, 0.0f);
    for (int i = 0; i < count; ++i) {
      const float* pt = part + static_cast<size_t>(i) * part_floats;
      const float l = pt[rows + row];
      if (!(l > 0.0f)) continue;
      const float w = std::exp2(pt[row] - big_m);
      big_l += l * w;
      const float* a = pt + 2 * static_cast<size_t>(rows) + static_cast<size_t>(row) * dim;
      for (int d = 0; d < dim; ++d) acc[d] += a[d] * w;
    }
    const float inv = big_l > 0.0f ? 1.0f / big_l : 0.0f;  // no key: acc is 0 too
    uint16_t* dst = o + b * p.o.batch_stride + t * p.o.seq_stride + hq * p.o.head_stride;
    if (p.dtype == DType::kFP16) {
      store_row<true>(dst, acc, inv, dim);
    } else {
      store_row<false>(dst, acc, inv, dim);
    }
    if (p.lse != nullptr) {
      p.lse[(int64_t{b} * p.q_heads + hq) * p.q_len + t] =
          big_l > 0.0f ? big_m * kLn2 + std::log(big_l) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

const char* decode_isa_name(DecodeIsa isa) {
  switch (isa) {
    case DecodeIsa::kScalar: return "scalar";
    case DecodeIsa::kPortable: return "portable";
    case DecodeIsa::kAvx2: return "avx2";
    case DecodeIsa::kAvx512: return "avx512";
    case DecodeIsa::kNeon: return "neon";
    case DecodeIsa::kAvx512Bf16: return "avx512-bf16";
    case DecodeIsa::kAvx512Vnni: return "avx512-vnni";
    case DecodeIsa::kNeonDot: return "neon-dotprod";
  }
  return "?";
}

bool decode_isa_runnable(DecodeIsa isa, int head_dim, bool kv_quantized) {
  if (kv_quantized) return item_fn(isa, true) != nullptr && head_dim > 0 && head_dim % 32 == 0 && head_dim <= 256;
  return item_fn(isa, false) != nullptr && head_dim > 0 && head_dim % vector_width(isa) == 0;
}

DecodeIsa decode_isa_for(int head_dim, bool kv_quantized) {
  for (DecodeIsa isa : {DecodeIsa::kAvx512Vnni, DecodeIsa::kAvx512Bf16, DecodeIsa::kAvx512, DecodeIsa::kAvx2,
                        DecodeIsa::kNeonDot, DecodeIsa::kNeon, DecodeIsa::kPortable})
    if (decode_isa_runnable(isa, head_dim, kv_quantized)) return isa;
  return DecodeIsa::kScalar;
}

Status decode_attention(const DecodeParams& p) {
  return decode_attention(p, decode_isa_for(p.head_dim, p.kv_q8 || p.kv_q4));
}

Status decode_attention(const DecodeParams& p, DecodeIsa isa) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16)
    return unsupported("CPU decode attention runs bf16 or fp16 tensors only");
  if (p.batch < 1 || p.q_heads < 1 || p.kv_heads < 1 || p.q_len < 1 || p.head_dim < 1)
    return invalid_argument("CPU decode attention: batch, heads, q_len and head_dim must be >= 1");
  if (p.q_heads % p.kv_heads != 0) return invalid_argument("q_heads must be a multiple of kv_heads");
  if (p.q.data == nullptr || p.o.data == nullptr || p.kv.k == nullptr || p.kv.v == nullptr || p.kv_lens == nullptr ||
      (p.kv.page_size > 0 && p.kv.block_tables == nullptr))
    return invalid_argument("CPU decode attention: a pointer is null");
  if (p.kv_q8 && p.kv_q4) return invalid_argument("CPU decode attention: kv_q8 and kv_q4 both set");
  const bool quantized = p.kv_q8 || p.kv_q4;
  const char* cache = p.kv_q4 ? "a q4_0 cache" : "a q8_0 cache";
  if (quantized && (p.kv.page_size <= 0 || p.kv.page_size % 16 != 0))
    return invalid_argument(std::string("CPU decode attention: ") + cache + " is paged, page_size a multiple of 16");
  if (!decode_isa_runnable(isa, p.head_dim, quantized))
    return unsupported(std::string("CPU decode attention: the ") + decode_isa_name(isa) + " kernel cannot run " +
                       (quantized ? cache : "here") + " for head_dim " + std::to_string(p.head_dim));
  const ItemFn run = item_fn(isa, quantized);

  Problem pr;
  pr.p = &p;
  pr.group = p.q_heads / p.kv_heads;
  pr.rows = pr.group * p.q_len;
  const float scale = p.softmax_scale != 0.0f ? p.softmax_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  pr.scale_log2 = scale * kLog2e;
  pr.cap_log2 = p.softcap > 0.0f ? p.softcap * kLog2e : 0.0f;

  int64_t max_kv_len = p.max_kv_len;
  for (int b = 0; b < p.batch; ++b) max_kv_len = std::max<int64_t>(max_kv_len, p.kv_lens[b]);
  const int threads = max_threads();
  const int64_t chunk = chunk_keys(max_kv_len, p.batch, threads);
  const size_t part_floats = decode::item_rows(pr) * (2 + static_cast<size_t>(p.head_dim));
  const size_t per_thread = std::max(decode::item_scratch_floats(pr), static_cast<size_t>(p.head_dim));

  std::vector<Item> items;
  std::vector<int> first_item;  // [batch + 1]: sequence b's items are [first[b], first[b + 1])
  std::vector<float> part, scratch;
  int64_t macs = 0;
  try {
    first_item.reserve(static_cast<size_t>(p.batch) + 1);
    for (int b = 0; b < p.batch; ++b) {
      int64_t lo = 0, hi = 0;
      visible_keys(p, b, &lo, &hi);
      macs += (hi - lo) * p.q_heads * p.q_len * p.head_dim * 2;
      first_item.push_back(static_cast<int>(items.size()));
      for (int64_t c0 = lo / chunk * chunk; c0 < hi; c0 += chunk)
        items.push_back({b, static_cast<int>(c0), static_cast<int>(std::min<int64_t>(c0 + chunk, hi))});
    }
    first_item.push_back(static_cast<int>(items.size()));
    part.resize(items.size() * part_floats);
    scratch.resize(per_thread * static_cast<size_t>(threads));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "CPU decode attention: cannot allocate scratch"};
  }

  const int n_items = static_cast<int>(items.size());
  const size_t item_rows = decode::item_rows(pr);
  [[maybe_unused]] const bool parallel = threads > 1 && macs >= kParallelMinMacs;  // unused without OpenMP
#ifdef _OPENMP
#pragma omp parallel if (parallel)
#endif
  {
    float* mine = scratch.data() + static_cast<size_t>(thread_id()) * per_thread;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (int i = 0; i < n_items; ++i) {
      float* pt = part.data() + static_cast<size_t>(i) * part_floats;
      run(pr, items[static_cast<size_t>(i)], mine, pt, pt + item_rows, pt + 2 * item_rows);
    }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (int b = 0; b < p.batch; ++b) {
      const int first = first_item[static_cast<size_t>(b)];
      const int count = first_item[static_cast<size_t>(b) + 1] - first;
      merge(p, pr, b, count, part.data() + static_cast<size_t>(first) * part_floats, part_floats, mine);
    }
  }
  return Status::ok_status();
}

}  // namespace flashscope::cpu
