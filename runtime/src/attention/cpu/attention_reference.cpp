// Reference attention: the yardstick for every other implementation.
//
// Algorithm, for each sequence b, q-head h and query i at position
// pos = i + (kv_len - q_len), over the keys j the mask allows: all of them;
// j <= pos when causal; pos - window_left <= j when window_left >= 0;
// j <= pos + window_right when window_right >= 0:
//   s_j = scale · (q_i · k_j)            in double
//   s_j = cap · tanh(s_j / cap)          when softcap = cap > 0
//   m   = max_j s_j
//   l   = Σ_j exp(s_j − m)                two passes: max first, then the sum
//   o_i = Σ_j exp(s_j − m) · v_j / l
//   lse = m + ln l                        (-inf, and o_i = 0, when no key is allowed)
// No tiling, no online rescaling, no rounding of P: the only rounding is the
// inputs' own (they are read exactly from bf16/fp16) and the final float
// store, so any other implementation's error against this is its own.
//
// Layouts: q/k/v through the PrefillParams strides; o_out dense float
// [batch, q_len, q_heads, head_dim] (varlen [total_q, q_heads, head_dim]);
// lse_out dense [batch, q_heads, q_len] (varlen [q_heads, total_q]).
//
// The indexing here is written independently of attention_tiled.cpp on
// purpose: a helper shared by the yardstick and the thing it measures would
// hide the bugs it has in both.
//
// Speed only matters because tests run it on 1000-token problems: K and V of
// one (sequence, kv-head) are converted to double once, and the rows of the
// q-heads that read them run in parallel with OpenMP when it is available.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/cpu/openmp.hpp"
#include "attention/cpu/attention_cpu.hpp"
#include "attention/cpu/prefill_sequences.hpp"
#include "flashscope/half.hpp"

namespace flashscope::cpu {
namespace {

double load(const uint16_t* data, int64_t index, bool bf16) {
  return bf16 ? bf16_to_float(data[index]) : fp16_to_float(data[index]);
}

}  // namespace

Status attention_reference(const PrefillParams& p, float* o_out, float* lse_out) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) {
    return unsupported("attention_reference reads bf16 or fp16 inputs only");
  }
  if (o_out == nullptr) return invalid_argument("attention_reference: o_out is null");
  if (p.q_heads <= 0 || p.kv_heads <= 0 || p.head_dim <= 0 || p.batch <= 0) return Status::ok_status();
  // validate() rejects this too; the q-head to kv-head mapping below assumes it.
  if (p.q_heads % p.kv_heads != 0) return invalid_argument("q_heads must be a multiple of kv_heads");

  const bool bf16 = p.dtype == DType::kBF16;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int dim = p.head_dim;
  const int q_heads = p.q_heads;
  const int group = q_heads / p.kv_heads;  // q-heads per kv-head
  const double scale = p.softmax_scale != 0.0f ? static_cast<double>(p.softmax_scale)
                                               : 1.0 / std::sqrt(static_cast<double>(dim));
  const double softcap = static_cast<double>(p.softcap);
  const int64_t total_q = varlen ? p.cu_seqlens_q[p.batch] : 0;
  const auto* q = static_cast<const uint16_t*>(p.q.data);
  const auto* k = static_cast<const uint16_t*>(p.k.data);
  const auto* v = static_cast<const uint16_t*>(p.v.data);

  int max_kv = 0;
  for (int b = 0; b < p.batch; ++b) max_kv = std::max(max_kv, prefill_sequence(p, b).kv_len);

  // K and V of one (sequence, kv-head) in double: [kv_len, head_dim] each.
  // Per thread: scores [max_kv] and a query row [head_dim].
  const int threads = max_threads();
  std::vector<double> k_f64, v_f64, scores, q_rows;
  try {
    k_f64.resize(static_cast<size_t>(max_kv) * dim);
    v_f64.resize(static_cast<size_t>(max_kv) * dim);
    scores.resize(static_cast<size_t>(threads) * std::max(max_kv, 1));
    q_rows.resize(static_cast<size_t>(threads) * dim);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "attention_reference: cannot allocate scratch"};
  }

  for (int b = 0; b < p.batch; ++b) {
    const Sequence seq = prefill_sequence(p, b);
    if (seq.q_len == 0) continue;
    const int64_t out_row = varlen ? seq.lse_offset : int64_t(b) * p.q_len;  // row of query 0 in o_out
    const int causal_shift = seq.kv_len - seq.q_len;  // bottom-right alignment
    for (int g = 0; g < p.kv_heads; ++g) {
      for (int j = 0; j < seq.kv_len; ++j) {
        const int64_t k_row = seq.k_offset + j * p.k.seq_stride + g * p.k.head_stride;
        const int64_t v_row = seq.v_offset + j * p.v.seq_stride + g * p.v.head_stride;
        for (int d = 0; d < dim; ++d) {
          k_f64[static_cast<size_t>(j) * dim + d] = load(k, k_row + d, bf16);
          v_f64[static_cast<size_t>(j) * dim + d] = load(v, v_row + d, bf16);
        }
      }

      // Rows of every q-head that reads kv-head g: h = g * group + r / q_len.
      const int rows = group * seq.q_len;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
      for (int r = 0; r < rows; ++r) {
        const int h = g * group + r / seq.q_len;
        const int i = r % seq.q_len;
        double* s = scores.data() + static_cast<size_t>(thread_id()) * std::max(max_kv, 1);
        double* q_row = q_rows.data() + static_cast<size_t>(thread_id()) * dim;

        const int64_t q_at = seq.q_offset + i * p.q.seq_stride + h * p.q.head_stride;
        for (int d = 0; d < dim; ++d) q_row[d] = load(q, q_at + d, bf16);

        // The allowed keys are the run [first, first + keys).
        const int64_t pos = int64_t{i} + causal_shift;
        int64_t first = 0, last = seq.kv_len - 1;
        if (p.causal) last = std::min(last, pos);
        if (p.window_right >= 0) last = std::min(last, pos + p.window_right);
        if (p.window_left >= 0) first = std::max(first, pos - p.window_left);
        const int keys = last >= first ? static_cast<int>(last - first + 1) : 0;

        float* o_row = o_out + ((out_row + i) * q_heads + h) * dim;
        const int64_t lse_at = varlen ? h * total_q + out_row + i
                                      : (static_cast<int64_t>(b) * q_heads + h) * p.q_len + i;
        if (keys == 0) {
          std::fill(o_row, o_row + dim, 0.0f);
          if (lse_out != nullptr) lse_out[lse_at] = -std::numeric_limits<float>::infinity();
          continue;
        }

        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < keys; ++j) {
          const double* k_row = k_f64.data() + static_cast<size_t>(first + j) * dim;
          double dot = 0.0;
          // Lets the compiler split the sum into vector lanes; in double the
          // order is immaterial at float32 output precision.
#ifdef _OPENMP
#pragma omp simd reduction(+ : dot)
#endif
          for (int d = 0; d < dim; ++d) dot += q_row[d] * k_row[d];
          s[j] = scale * dot;
          if (softcap > 0.0) s[j] = softcap * std::tanh(s[j] / softcap);
          m = std::max(m, s[j]);
        }

        double l = 0.0;
        for (int j = 0; j < keys; ++j) {
          s[j] = std::exp(s[j] - m);
          l += s[j];
        }

        // o_row accumulates in double through q_row, which is no longer needed.
        double* acc = q_row;
        std::fill(acc, acc + dim, 0.0);
        for (int j = 0; j < keys; ++j) {
          const double* v_row = v_f64.data() + static_cast<size_t>(first + j) * dim;
          for (int d = 0; d < dim; ++d) acc[d] += s[j] * v_row[d];
        }
        for (int d = 0; d < dim; ++d) o_row[d] = static_cast<float>(acc[d] / l);
        if (lse_out != nullptr) lse_out[lse_at] = static_cast<float>(m + std::log(l));
      }
    }
  }
  return Status::ok_status();
}

}  // namespace flashscope::cpu
