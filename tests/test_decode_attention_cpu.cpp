// The CPU decode attention path (attention/cpu/decode_attention.hpp), each kernel it
// is built with called by name, against the FP64 paged reference: context
// lengths 1..8192 (odd ones, page boundaries ± 1), GQA 1/3/4/8, page sizes
// 16 (the engine's) and 64/256, q_len 1 and more, windows, soft-cap, and
// the contiguous layout the CPU engine's own cache uses.
//
// A kernel the CPU (or build) lacks is skipped with a message. Tolerances:
// PagedProblem::tolerance() with one rounding fewer in max_abs: this path
// keeps P in float32, so only the store of O rounds to the dtype.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/cpu/decode_attention.hpp"
#include "attention/cpu/paged_attention_cpu.hpp"
#include "flashscope/cpu_kernels.hpp"
#include "flashscope/half.hpp"
#include "support/paged_problem.hpp"

using namespace flashscope;
using flashscope::testing::context_sweep;
using flashscope::testing::PagedProblem;
using flashscope::testing::PagedShape;

namespace {

const cpu::DecodeIsa kIsas[] = {cpu::DecodeIsa::kScalar, cpu::DecodeIsa::kPortable, cpu::DecodeIsa::kAvx2,
                                cpu::DecodeIsa::kAvx512, cpu::DecodeIsa::kAvx512Bf16, cpu::DecodeIsa::kNeon};

PagedShape shape(std::vector<int> lens, int hq, int hkv, int q_len, int dim, int page, uint64_t seed) {
  return flashscope::testing::paged_shape(std::move(lens), hq, hkv, q_len, dim, page, seed);
}

// Runs every kernel this machine has on prob and checks each against the reference.
void check_all(PagedProblem& prob) {
  INFO("case: ", prob.shape().describe());
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.to_string());
  const double u = prob.shape().dtype == DType::kFP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  auto tol = prob.tolerance();
  tol.max_abs -= u * prob.max_abs_v();  // P not rounded: one dtype rounding (the store of O)
  int ran = 0;
  for (cpu::DecodeIsa isa : kIsas) {
    const std::string name = cpu::decode_isa_name(isa);
    if (!cpu::decode_isa_runnable(isa, prob.shape().head_dim)) {
      MESSAGE("skipped: the ", name, " decode kernel cannot run on this machine for head_dim ",
              prob.shape().head_dim);
      continue;
    }
    CAPTURE(name);
    prob.reset_outputs();
    const Status st = cpu::decode_attention(cpu::decode_params(prob.host_params()), isa);
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    ++ran;
    CHECK_MESSAGE(prob.guards_intact(), "a write landed outside o or lse");
    const std::vector<float> out = prob.output_as_float();
    const std::vector<float> lse = prob.lse_values();
    int worst = -1;
    const double nerr = prob.normalized_error(out.data());
    const double serr = prob.worst_sequence_error(out.data(), &worst);
    const double aerr = prob.max_abs_error(out.data());
    const double lerr = prob.lse_max_abs_error(lse.data());
    CHECK_MESSAGE(nerr < tol.normalized, "normalized error ", nerr, " >= ", tol.normalized);
    CHECK_MESSAGE(serr < tol.normalized, "sequence ", worst, " (kv_len ", prob.kv_lens()[size_t(std::max(worst, 0))],
                  ") normalized error ", serr, " >= ", tol.normalized);
    CHECK_MESSAGE(aerr < tol.max_abs, "max abs error ", aerr, " >= ", tol.max_abs);
    CHECK_MESSAGE(lerr < tol.lse_abs, "lse error ", lerr, " >= ", tol.lse_abs);
  }
  CHECK(ran >= 2);  // scalar and portable run everywhere
}

}  // namespace

TEST_CASE("cpu decode attention: every kernel matches the FP64 reference over context lengths 1..8192") {
  struct Case {
    int hq, hkv, q_len, dim, page;
    DType dtype;
  };
  const Case cases[] = {
      {1, 1, 1, 64, 16, DType::kBF16},    // GQA 1
      {9, 3, 1, 64, 16, DType::kBF16},    // GQA 3: SmolLM2's heads, the engine's page size
      {8, 2, 1, 128, 256, DType::kFP16},  // GQA 4
      {8, 1, 1, 64, 64, DType::kBF16},    // GQA 8
      {9, 3, 3, 64, 16, DType::kBF16},    // q_len > 1 (drafted tokens): the causal offset
      {8, 1, 8, 128, 256, DType::kBF16},  // 64 rows per kv-head, the path's widest
      {4, 1, 2, 256, 16, DType::kFP16},   // head_dim 256 (gemma3)
      {4, 1, 2, 256, 16, DType::kBF16},   // and in bf16 (the avx512-bf16 kernel's dot products)
      {6, 2, 1, 96, 16, DType::kBF16},    // head_dim 96 (phi3), 32
      {4, 4, 1, 32, 16, DType::kBF16},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    PagedShape s = shape(context_sweep(c.q_len), c.hq, c.hkv, c.q_len, c.dim, c.page, ++seed);
    s.dtype = c.dtype;
    PagedProblem prob(s);
    check_all(prob);
  }
}

TEST_CASE("cpu decode attention: sliding windows, soft-cap, scale and non-causal rows") {
  std::vector<PagedShape> grid;
  PagedShape a = shape(context_sweep(1), 9, 3, 1, 64, 16, 200);  // a window inside a page, past many pages
  a.window_left = 100;
  grid.push_back(a);
  PagedShape b = shape(context_sweep(4), 8, 2, 4, 128, 256, 201);  // window of a page boundary, drafted tokens
  b.window_left = 255;
  b.dtype = DType::kFP16;
  grid.push_back(b);
  PagedShape c = shape(context_sweep(1), 8, 1, 1, 64, 16, 202);  // gemma2-style soft-cap
  c.softcap = 50.0f;
  c.softmax_scale = 0.25f;  // large logits, so the cap bites
  grid.push_back(c);
  PagedShape d = shape(context_sweep(2), 4, 4, 2, 64, 64, 203);  // soft-cap and a window together
  d.softcap = 30.0f;
  d.window_left = 1000;
  grid.push_back(d);
  PagedShape e = shape(context_sweep(3), 6, 2, 3, 64, 16, 204);  // non-causal, right window
  e.causal = false;
  e.window_left = 40;
  e.window_right = 5;
  grid.push_back(e);
  PagedShape f = shape(context_sweep(1), 3, 1, 1, 64, 16, 205);  // window 0: each row sees its own key
  f.window_left = 0;
  grid.push_back(f);
  for (PagedShape& s : grid) {
    PagedProblem prob(s);
    if (s.window_left >= 0) prob.poison_pages_outside_windows();
    check_all(prob);
  }
}

TEST_CASE("cpu decode attention: the engine's contiguous cache layout") {
  // [capacity, kv_heads, D] per layer (the CPU engine's CpuState), read with
  // page_size 0: the same problem as through the pages gives the same result.
  PagedShape s = shape({1, 17, 500, 4097}, 9, 3, 2, 64, 16, 300);
  PagedProblem prob(s);
  REQUIRE(prob.reference().status.ok());
  const int B = s.batch(), H = s.kv_heads, D = s.head_dim;
  const int capacity = 4100;
  std::vector<uint16_t> k(size_t(B) * capacity * H * D, PagedProblem::kNaNBits), v(k.size(), PagedProblem::kNaNBits);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < s.kv_lens[size_t(b)]; ++j)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t at = ((size_t(b) * capacity + j) * H + h) * D + d;
          k[at] = float_to_bf16(prob.k_at(b, j, h, d));
          v[at] = float_to_bf16(prob.v_at(b, j, h, d));
        }
  cpu::DecodeParams paged = cpu::decode_params(prob.host_params());
  REQUIRE(cpu::decode_attention(paged).ok());
  const std::vector<float> via_pages = prob.output_as_float();
  const std::vector<float> via_pages_lse = prob.lse_values();

  cpu::DecodeParams flat = paged;
  flat.kv = {};
  flat.kv.k = k.data();
  flat.kv.v = v.data();
  flat.kv.page_size = 0;
  flat.kv.page_stride = int64_t{capacity} * H * D;
  flat.kv.head_stride = D;
  flat.kv.row_stride = int64_t{H} * D;
  prob.reset_outputs();
  REQUIRE(cpu::decode_attention(flat).ok());
  CHECK(prob.guards_intact());
  // Same keys, same blocks, same order: the same bits.
  CHECK(prob.output_as_float() == via_pages);
  CHECK(prob.lse_values() == via_pages_lse);
}

TEST_CASE("cpu decode attention: bad params get a status, not a crash") {
  PagedProblem prob(shape({40}, 4, 2, 1, 64, 16, 400));
  cpu::DecodeParams p = cpu::decode_params(prob.host_params());
  cpu::DecodeParams bad = p;
  bad.dtype = DType::kFP32;
  CHECK(cpu::decode_attention(bad).code() == StatusCode::kUnsupported);
  bad = p;
  bad.q_heads = 3;
  CHECK(cpu::decode_attention(bad).code() == StatusCode::kInvalidArgument);
  bad = p;
  bad.kv_lens = nullptr;
  CHECK(cpu::decode_attention(bad).code() == StatusCode::kInvalidArgument);
  bad = p;
  bad.head_dim = 0;
  CHECK(cpu::decode_attention(bad).code() == StatusCode::kInvalidArgument);
  // A kernel named for a head_dim it cannot run is unsupported, not run.
  bad = p;
  bad.head_dim = 60;
  CHECK(cpu::decode_attention(bad, cpu::DecodeIsa::kPortable).code() == StatusCode::kUnsupported);
}

TEST_CASE("cpu kernels: what info names is what the dispatch runs, and each named kernel can run here") {
  // flashscope-cli info prints these names; a user reads them to learn why decoding is as fast as it is.
  auto isa_named = [](const char* name, bool kv_q8, int dim) {
    for (cpu::DecodeIsa isa : {cpu::DecodeIsa::kScalar, cpu::DecodeIsa::kPortable, cpu::DecodeIsa::kAvx2,
                               cpu::DecodeIsa::kAvx512, cpu::DecodeIsa::kNeon, cpu::DecodeIsa::kAvx512Bf16,
                               cpu::DecodeIsa::kAvx512Vnni, cpu::DecodeIsa::kNeonDot})
      if (std::string(cpu::decode_isa_name(isa)) == name) return cpu::decode_isa_runnable(isa, dim, kv_q8);
    return false;
  };
  for (int dim : {40, 64, 96, 128, 256}) {
    CAPTURE(dim);
    const CpuKernels k = cpu_kernels(dim);
    CHECK(std::string(k.decode_attention) == cpu::decode_isa_name(cpu::decode_isa_for(dim)));
    CHECK(isa_named(k.decode_attention, false, dim));
    if (dim % 32 == 0) {
      CHECK(std::string(k.decode_attention_q8) == cpu::decode_isa_name(cpu::decode_isa_for(dim, true)));
      CHECK(isa_named(k.decode_attention_q8, true, dim));
    } else {
      CHECK(std::string(k.decode_attention_q8) == "none");  // a q8_0 cache needs whole 32-dim blocks
    }
    const std::string matmul = k.matmul;
    CHECK((matmul == "portable" || matmul == "avx2" || matmul == "avx512vnni" || matmul == "neon-dotprod"));
  }
  // 40 dims are no multiple of AVX-512's 16 or 32 lanes: a narrower kernel, never the wide one.
  const std::string narrow = cpu_kernels(40).decode_attention;
  CHECK(narrow != "avx512");
  CHECK(narrow != "avx512-bf16");
}
