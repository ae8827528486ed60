// Attention over the paged KV cache on the CPU: the backend (gather +
// tiled online softmax) against the FP64 paged reference over a grid of
// batches, kv lengths (1 to 32k), page sizes, GQA ratios, head_dims and
// q_len 1..8; shared-prefix pages; drafted tokens (q_len > 1, causal) equal
// to decoding them one by one; the KV cache's own layout end to end; and
// invalid params getting the right status with nothing written.
//
// Tolerances come from PagedProblem::tolerance() (tied to the dtype; see
// tests/support/paged_problem.hpp). Pools carry NaN in every element no
// sequence may read, o starts as NaN, guards surround o and lse.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention/cpu/attention_cpu.hpp"
#include "attention/cpu/paged_attention_cpu.hpp"
#include "flashscope/device.hpp"
#include "flashscope/half.hpp"
#include "flashscope/kv_cache.hpp"
#include "flashscope/paged_attention.hpp"
#include "support/paged_problem.hpp"

using namespace flashscope;
using flashscope::testing::CacheTables;
using flashscope::testing::PagedProblem;
using flashscope::testing::PagedShape;
using flashscope::testing::cache_append_params;
using flashscope::testing::cache_attention_params;
using flashscope::testing::cache_tables;
using flashscope::testing::hashed_value;

namespace {

// Short names for the shared grid helpers (support/paged_problem.hpp).
uint64_t mix(uint64_t x) { return flashscope::testing::mix64(x); }
std::vector<int> lengths(int n, int lo, int hi, uint64_t seed) {
  return flashscope::testing::paged_lengths(n, lo, hi, seed);
}
PagedShape shape(std::vector<int> kv_lens, int q_heads, int kv_heads, int q_len, int dim, int page, uint64_t seed) {
  return flashscope::testing::paged_shape(std::move(kv_lens), q_heads, kv_heads, q_len, dim, page, seed);
}

// Runs the public entry point on the problem's host buffers and checks it.
void check_cpu(PagedProblem& prob) {
  INFO("case: ", prob.shape().describe());
  prob.reset_outputs();
  const Status st = paged_attention(prob.host_params());
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.to_string());
  CHECK_MESSAGE(prob.guards_intact(), "a write landed outside o or lse");
  const auto tol = prob.tolerance();
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  int worst_seq = -1;
  const double nerr = prob.normalized_error(out.data());
  const double serr = prob.worst_sequence_error(out.data(), &worst_seq);
  const double aerr = prob.max_abs_error(out.data());
  const double lerr = prob.lse_max_abs_error(lse.data());
  CHECK_MESSAGE(nerr < tol.normalized, "normalized error ", nerr, " >= ", tol.normalized);
  CHECK_MESSAGE(serr < tol.normalized, "sequence ", worst_seq, " normalized error ", serr, " >= ", tol.normalized);
  CHECK_MESSAGE(aerr < tol.max_abs, "max abs error ", aerr, " >= ", tol.max_abs);
  CHECK_MESSAGE(lerr < tol.lse_abs, "lse error ", lerr, " >= ", tol.lse_abs);
}

}  // namespace

// ---------------------------------------------------------------------------
// The grid

TEST_CASE("cpu paged attention matches the reference over the grid") {
  std::vector<PagedShape> grid = {
      shape({1}, 1, 1, 1, 64, 16, 1),
      shape({17, 1, 300}, 9, 3, 1, 64, 16, 2),
      shape({3, 64, 65, 129, 1000}, 8, 2, 3, 128, 64, 3),
      shape(lengths(17, 1, 2000, 4), 8, 1, 1, 128, 256, 4),
      shape(lengths(64, 1, 1500, 5), 4, 1, 1, 64, 16, 5),
      shape(lengths(64, 2, 600, 6), 2, 2, 2, 128, 64, 6),
      shape(lengths(8, 8, 3000, 7), 8, 1, 8, 64, 16, 7),
      shape(lengths(4, 5, 700, 8), 9, 3, 5, 128, 256, 8),
      shape({255, 256, 257, 16, 15}, 3, 1, 1, 64, 256, 9),  // page-size boundaries
      shape({7, 8, 9}, 4, 1, 7, 128, 16, 10),               // kv_len == q_len: prefill of a fresh sequence
      shape(lengths(64, 1, 2048, 11), 9, 3, 1, 64, 16, 11),  // a decode batch of SmolLM2's heads
  };
  grid[2].dtype = DType::kFP16;
  grid[4].padded_q = true;
  grid[5].max_kv_len_slack = 1000;  // a plan sized for growth
  grid[6].contiguous_pages = true;
  grid[7].causal = false;
  grid[8].dtype = DType::kFP16;
  grid[9].softmax_scale = 0.3f;
  for (PagedShape& s : grid) {
    PagedProblem prob(s);
    check_cpu(prob);
  }
}

TEST_CASE("cpu paged attention: long caches (32k keys, few heads)") {
  std::vector<PagedShape> grid = {
      shape({32768}, 4, 1, 1, 128, 256, 20),
      shape({32000, 20001}, 8, 1, 4, 64, 64, 21),
      shape({32768}, 1, 1, 8, 128, 16, 22),
  };
  grid[1].dtype = DType::kFP16;
  for (PagedShape& s : grid) {
    PagedProblem prob(s);
    check_cpu(prob);
  }
}

// ---------------------------------------------------------------------------
// Shared prefix, page order

TEST_CASE("cpu paged attention: shared prefix pages (forked sequences)") {
  // 3 shared pages of 16; two sequences end inside the prefix, so the rest
  // of their last page holds other sequences' keys they must not see.
  PagedShape a = shape({48, 49, 60, 100, 20, 33}, 8, 2, 1, 64, 16, 30);
  a.shared_prefix_pages = 3;
  PagedShape b = shape(lengths(12, 260, 900, 31), 4, 1, 4, 128, 64, 31);
  b.shared_prefix_pages = 4;
  PagedShape c = shape({512, 513, 700}, 3, 3, 2, 64, 256, 32);
  c.shared_prefix_pages = 2;
  c.dtype = DType::kFP16;
  for (const PagedShape& s : {a, b, c}) {
    PagedProblem prob(s);
    check_cpu(prob);
  }
}

TEST_CASE("cpu paged attention: fragmented and contiguous pages give the same bits") {
  PagedShape s = shape(lengths(9, 1, 500, 40), 8, 2, 2, 64, 16, 40);
  s.kv_lens[0] = 2;
  s.shared_prefix_pages = 0;
  PagedProblem fragmented(s);
  s.contiguous_pages = true;
  PagedProblem contiguous(s);
  REQUIRE(fragmented.block_tables() != contiguous.block_tables());
  REQUIRE(paged_attention(fragmented.host_params()).ok());
  REQUIRE(paged_attention(contiguous.host_params()).ok());
  CHECK(fragmented.output_as_float() == contiguous.output_as_float());
  const auto la = fragmented.lse_values(), lb = contiguous.lse_values();
  CHECK(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
}

// ---------------------------------------------------------------------------
// Drafted tokens: verifying q_len tokens at once is decoding them one by one

TEST_CASE("cpu paged attention: q_len > 1 causal equals decoding the tokens one at a time") {
  for (int q_len : {2, 5, 8}) {
    CAPTURE(q_len);
    PagedShape s = shape(lengths(5, q_len, 400, 50 + uint64_t(q_len)), 8, 2, q_len, 64, 16, 50);
    PagedProblem prob(s);
    PagedAttentionParams all = prob.host_params();
    REQUIRE(paged_attention(all).ok());
    const std::vector<float> together = prob.output_as_float();
    const std::vector<float> together_lse = prob.lse_values();
    const auto& ref = prob.reference();
    REQUIRE(ref.status.ok());

    const int B = s.batch(), H = s.q_heads, D = s.head_dim;
    for (int t = 0; t < q_len; ++t) {
      CAPTURE(t);
      // Token t alone: q_len 1, its row of q, the cache cut after it.
      std::vector<int32_t> lens(static_cast<size_t>(B));
      for (int b = 0; b < B; ++b) lens[size_t(b)] = prob.kv_lens()[size_t(b)] - q_len + t + 1;
      std::vector<uint16_t> o(size_t(B) * H * D, 0xFFFF);
      std::vector<float> lse(size_t(B) * H), ref_o(o.size()), ref_lse(lse.size());
      PagedAttentionParams one = all;
      one.q_len = 1;
      one.q.data = static_cast<uint16_t*>(all.q.data) + t * all.q.seq_stride;
      one.o = bshd(o.data(), 1, H, D);
      one.lse = lse.data();
      one.kv_lens = lens.data();
      REQUIRE(paged_attention(one).ok());
      REQUIRE(cpu::paged_attention_reference(one, ref_o.data(), ref_lse.data()).ok());
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h) {
          const size_t row_all = ((size_t(b) * q_len + t) * H + h) * D;
          const size_t row_one = (size_t(b) * H + h) * D;
          for (int d = 0; d < D; ++d) {
            // Same keys, same tiles, same order: equal, not merely close.
            const float x = bf16_to_float(o[row_one + size_t(d)]);
            REQUIRE(x == together[row_all + size_t(d)]);
            REQUIRE(ref_o[row_one + size_t(d)] == ref.o[row_all + size_t(d)]);
          }
          REQUIRE(lse[size_t(b) * H + h] == together_lse[(size_t(b) * H + h) * q_len + t]);
          REQUIRE(ref_lse[size_t(b) * H + h] == ref.lse[(size_t(b) * H + h) * q_len + t]);
        }
    }
  }
}

TEST_CASE("cpu paged attention: non-causal q_len > 1 lets every new token see every key") {
  // Closed form: identical keys make softmax uniform, so o is the mean of
  // the visible V rows: all kv_len of them without the mask.
  PagedShape s = shape({21, 40}, 2, 1, 3, 64, 16, 60);
  s.causal = false;
  PagedProblem prob(s);
  auto p = prob.host_params();
  auto* k = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.k_pages));
  const size_t page_elems = size_t(s.kv_heads) * s.page_size * s.head_dim;
  for (int b = 0; b < s.batch(); ++b)
    for (int pos = 0; pos < s.kv_lens[size_t(b)]; ++pos) {
      const int32_t page = prob.block_tables()[size_t(b * prob.block_table_stride() + pos / s.page_size)];
      for (int d = 0; d < s.head_dim; ++d)
        k[size_t(page) * page_elems + size_t(pos % s.page_size) * s.head_dim + size_t(d)] = float_to_bf16(0.25f);
    }
  REQUIRE(paged_attention(p).ok());
  const auto out = prob.output_as_float();
  for (int b = 0; b < s.batch(); ++b)
    for (int t = 0; t < s.q_len; ++t)
      for (int h = 0; h < s.q_heads; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          double mean = 0;
          for (int pos = 0; pos < s.kv_lens[size_t(b)]; ++pos) mean += prob.v_at(b, pos, 0, d);
          mean /= s.kv_lens[size_t(b)];
          const float got = out[((size_t(b) * s.q_len + t) * s.q_heads + h) * s.head_dim + size_t(d)];
          REQUIRE(std::fabs(got - mean) <= 2 * std::ldexp(1.0, -8) * prob.max_abs_v() + 1e-6);
        }
}

// ---------------------------------------------------------------------------
// End to end with the KV cache's own layout

namespace {

float kv_value(int seq_key, int kv, int pos, int h, int d) {
  return hashed_value(mix(uint64_t(seq_key) * 131 + uint64_t(kv)) ^ (uint64_t(pos) << 20 | uint64_t(h) << 10 | uint64_t(d)));
}

}  // namespace

TEST_CASE("cpu paged attention over a PagedKvCache filled by append_kv, with forks") {
  KvCacheConfig c;
  c.num_layers = 2;
  c.num_pages = 40;
  c.page_size = 16;
  c.kv_heads = 2;
  c.head_dim = 64;
  auto made = PagedKvCache::create(c);
  REQUIRE(made.ok());
  PagedKvCache& cache = made.value();
  const int H = c.kv_heads, D = c.head_dim, Hq = 6, Lq = 2;
  const int row = H * D;

  // Logical K/V of each sequence as the test sees it: [len, H, D] per layer-1.
  std::vector<std::vector<uint16_t>> dense_k(3), dense_v(3);
  auto append = [&](int seq, int key, int n) {
    const int start = cache.length(seq);
    auto slots = cache.append_slots(seq, n);
    REQUIRE_MESSAGE(slots.ok(), slots.status().to_string());
    for (int layer = 0; layer < 2; ++layer) {
      std::vector<uint16_t> k(size_t(n) * row), v(size_t(n) * row);
      for (int i = 0; i < n; ++i)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            // Layer 0 gets other values: attention must read layer 1's pool.
            const int lk = layer == 1 ? key : key + 100;
            k[size_t(i) * row + size_t(h * D + d)] = float_to_bf16(kv_value(lk, 0, start + i, h, d));
            v[size_t(i) * row + size_t(h * D + d)] = float_to_bf16(kv_value(lk, 1, start + i, h, d));
          }
      if (layer == 1) {
        dense_k[size_t(seq)].insert(dense_k[size_t(seq)].end(), k.begin(), k.end());
        dense_v[size_t(seq)].insert(dense_v[size_t(seq)].end(), v.begin(), v.end());
      }
      REQUIRE(append_kv(cache_append_params(cache, layer, k.data(), v.data(), slots->data(), n)).ok());
    }
  };
  const int s0 = cache.create_sequence();
  append(s0, 0, 20);
  append(s0, 0, 17);  // 37: the third page partial
  const int s1 = cache.fork_sequence(s0).value();
  REQUIRE(s1 == 1);
  dense_k[1] = dense_k[0];
  dense_v[1] = dense_v[0];
  append(s1, 1, 5);  // copy-on-write of the shared third page
  append(s0, 0, 3);
  const int s2 = cache.create_sequence();
  append(s2, 2, 50);

  const int B = 3;
  const CacheTables tables = cache_tables(cache, {0, 1, 2});
  const std::vector<int32_t>& lens = tables.lens;
  std::vector<uint16_t> q(size_t(B) * Lq * Hq * D), o(q.size(), 0xFFFF);
  for (size_t i = 0; i < q.size(); ++i) q[i] = float_to_bf16(kv_value(7, 2, int(i), 0, 0));
  std::vector<float> lse(size_t(B) * Hq * Lq);

  PagedAttentionParams p = cache_attention_params(cache, 1, tables, q.data(), o.data(), Hq, Lq);
  p.lse = lse.data();
  p.num_pages = c.num_pages;
  const Status st = paged_attention(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());

  // Against dense attention on what the test appended.
  const double bound = (2 * std::ldexp(1.0, -8) + std::ldexp(1.0, -12)) * 2.5;
  for (int b = 0; b < B; ++b) {
    CAPTURE(b);
    PrefillParams a;
    a.batch = 1;
    a.q_heads = Hq;
    a.kv_heads = H;
    a.q_len = Lq;
    a.kv_len = lens[size_t(b)];
    a.head_dim = D;
    a.causal = true;
    a.q = bshd(q.data() + size_t(b) * Lq * Hq * D, Lq, Hq, D);
    a.k = bshd(dense_k[size_t(b)].data(), a.kv_len, H, D);
    a.v = bshd(dense_v[size_t(b)].data(), a.kv_len, H, D);
    REQUIRE(dense_k[size_t(b)].size() == size_t(a.kv_len) * row);
    std::vector<float> ref(size_t(Lq) * Hq * D), ref_lse(size_t(Hq) * Lq);
    REQUIRE(cpu::attention_reference(a, ref.data(), ref_lse.data()).ok());
    for (size_t i = 0; i < ref.size(); ++i)
      REQUIRE(std::fabs(bf16_to_float(o[size_t(b) * ref.size() + i]) - ref[i]) <= bound);
    for (size_t i = 0; i < ref_lse.size(); ++i) REQUIRE(std::fabs(lse[size_t(b) * ref_lse.size() + i] - ref_lse[i]) < 1e-3);
  }
}

// ---------------------------------------------------------------------------
// Invalid params

namespace {

struct Invalid {
  PagedProblem prob;
  PagedAttentionParams p;
  explicit Invalid(Device device = Device::kCpu)
      : prob(shape({40, 17}, 4, 2, 2, 64, 16, 70)), p(prob.host_params()) {
    p.device = device;
  }
  bool untouched() {
    if (!prob.guards_intact()) return false;
    for (float x : prob.output_as_float())
      if (!std::isnan(x)) return false;
    for (float x : prob.lse_values())
      if (!std::isnan(x)) return false;
    return true;
  }
};

void expect_invalid(Invalid& c, StatusCode code, const char* mentions) {
  const Status v = validate(c.p);
  CHECK(v.code() == code);
  CHECK_MESSAGE(v.message().find(mentions) != std::string::npos, "message: ", v.message());
  CHECK(paged_attention(c.p).code() == code);
  CHECK(plan_paged_attention(c.p).status().code() == code);
  CHECK(c.untouched());
}

}  // namespace

TEST_CASE("paged validate: the valid baseline passes, and the CPU plan is one split, no workspace") {
  Invalid c;
  CHECK(validate(c.p).ok());
  auto plan = plan_paged_attention(c.p);
  REQUIRE(plan.ok());
  CHECK(plan->num_splits == 1);
  CHECK(plan->workspace_bytes == 0);
  Invalid g(Device::kCuda);
  CHECK(validate(g.p).ok());  // host buffers are 16-byte aligned too
}

TEST_CASE("paged validate: every field") {
  struct Case {
    const char* what;
    void (*edit)(PagedAttentionParams&);
    StatusCode code;
    const char* mentions;
  };
  const Case cases[] = {
      {"q null", [](PagedAttentionParams& p) { p.q.data = nullptr; }, StatusCode::kInvalidArgument, "q.data"},
      {"o null", [](PagedAttentionParams& p) { p.o.data = nullptr; }, StatusCode::kInvalidArgument, "o.data"},
      {"k pages", [](PagedAttentionParams& p) { p.k_pages = nullptr; }, StatusCode::kInvalidArgument, "k_pages"},
      {"v pages", [](PagedAttentionParams& p) { p.v_pages = nullptr; }, StatusCode::kInvalidArgument, "v_pages"},
      {"tables", [](PagedAttentionParams& p) { p.block_tables = nullptr; }, StatusCode::kInvalidArgument, "block_tables"},
      {"lens", [](PagedAttentionParams& p) { p.kv_lens = nullptr; }, StatusCode::kInvalidArgument, "kv_lens"},
      {"dim", [](PagedAttentionParams& p) { p.head_dim = 48; }, StatusCode::kUnsupported, "(32, 64, 80, 96, 128, 256)"},
      {"window left", [](PagedAttentionParams& p) { p.window_left = -2; }, StatusCode::kInvalidArgument, "window_left"},
      {"window right", [](PagedAttentionParams& p) { p.window_right = 1; }, StatusCode::kInvalidArgument, "with causal"},
      {"softcap", [](PagedAttentionParams& p) { p.softcap = -0.5f; }, StatusCode::kInvalidArgument, "softcap"},
      {"dtype", [](PagedAttentionParams& p) { p.dtype = DType::kFP32; }, StatusCode::kUnsupported, "bf16, fp16"},
      {"batch", [](PagedAttentionParams& p) { p.batch = 0; }, StatusCode::kInvalidArgument, "batch"},
      {"gqa", [](PagedAttentionParams& p) { p.q_heads = 3; }, StatusCode::kInvalidArgument, "multiple of kv_heads"},
      {"page 24", [](PagedAttentionParams& p) { p.page_size = 24; }, StatusCode::kInvalidArgument, "page_size"},
      {"page 8", [](PagedAttentionParams& p) { p.page_size = 8; }, StatusCode::kInvalidArgument, "page_size"},
      {"page 512", [](PagedAttentionParams& p) { p.page_size = 512; }, StatusCode::kInvalidArgument, "page_size"},
      {"q_len 0", [](PagedAttentionParams& p) { p.q_len = 0; }, StatusCode::kInvalidArgument, "q_len"},
      {"max < q_len", [](PagedAttentionParams& p) { p.max_kv_len = 1; }, StatusCode::kInvalidArgument, "max_kv_len"},
      {"table narrow", [](PagedAttentionParams& p) { p.block_table_stride = 2; }, StatusCode::kInvalidArgument,
       "block_table_stride"},
      {"lens > max", [](PagedAttentionParams& p) { p.max_kv_len = 39; }, StatusCode::kInvalidArgument, "kv_lens[0]"},
      {"splits", [](PagedAttentionParams& p) { p.num_splits = -1; }, StatusCode::kInvalidArgument, "num_splits"},
      {"scale", [](PagedAttentionParams& p) { p.softmax_scale = std::numeric_limits<float>::quiet_NaN(); },
       StatusCode::kInvalidArgument, "softmax_scale"},
      {"o overlap", [](PagedAttentionParams& p) { p.o.head_stride = 32; }, StatusCode::kInvalidArgument, "overlap"},
      {"q strides", [](PagedAttentionParams& p) { p.q.batch_stride = 0; }, StatusCode::kInvalidArgument, "q strides"},
      {"workspace", [](PagedAttentionParams& p) { p.workspace_bytes = 64; }, StatusCode::kInvalidArgument,
       "workspace"},
      {"num_pages", [](PagedAttentionParams& p) { p.num_pages = -1; }, StatusCode::kInvalidArgument, "num_pages"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    Invalid c;
    k.edit(c.p);
    expect_invalid(c, k.code, k.mentions);
  }
}

TEST_CASE("paged validate: kv_lens and block tables are read on the CPU") {
  {
    Invalid c;  // kv_lens count the new tokens: below q_len is malformed
    std::vector<int32_t> lens = c.prob.kv_lens();
    lens[1] = 1;
    c.p.kv_lens = lens.data();
    expect_invalid(c, StatusCode::kInvalidArgument, "kv_lens[1]");
  }
  {
    Invalid c;
    std::vector<int32_t> tables = c.prob.block_tables();
    tables[size_t(c.p.block_table_stride) + 1] = -1;  // sequence 1's second (last) page
    c.p.block_tables = tables.data();
    expect_invalid(c, StatusCode::kInvalidArgument, "block_tables[1][1]");
  }
  {
    Invalid c;
    std::vector<int32_t> tables = c.prob.block_tables();
    tables[2] = c.prob.num_pages();  // sequence 0's third page
    c.p.block_tables = tables.data();
    expect_invalid(c, StatusCode::kInvalidArgument, "block_tables[0][2]");
    c.p.num_pages = 0;  // unknown pool size: only negative ids are caught
    CHECK(validate(c.p).ok());
  }
  {
    Invalid c;  // entries past a sequence's pages are never read
    std::vector<int32_t> tables = c.prob.block_tables();
    tables[3] = -7;
    c.p.block_tables = tables.data();
    CHECK(validate(c.p).ok());
  }
}

TEST_CASE("paged validate: CUDA alignment is checked on the host") {
  Invalid a(Device::kCuda);
  a.p.q.data = reinterpret_cast<char*>(a.p.q.data) + 2;
  expect_invalid(a, StatusCode::kInvalidArgument, "16-byte aligned");
  Invalid b(Device::kCuda);
  b.p.k_pages = reinterpret_cast<const char*>(b.p.k_pages) + 8;
  expect_invalid(b, StatusCode::kInvalidArgument, "16-byte aligned");
  Invalid c(Device::kCuda);
  c.p.o.seq_stride += 4;
  expect_invalid(c, StatusCode::kInvalidArgument, "multiples of 8");
  // Not on the CPU.
  Invalid d;
  d.p.k_pages = reinterpret_cast<const char*>(d.p.k_pages) + 8;
  CHECK(validate(d.p).ok());
}

TEST_CASE("paged attention on CUDA without a device fails cleanly") {
  if (cuda_available()) return;  // the GPU suite covers the real path
  Invalid c(Device::kCuda);
  CHECK_FALSE(paged_attention(c.p).ok());
  CHECK_FALSE(plan_paged_attention(c.p).ok());
  CHECK(c.untouched());
}
