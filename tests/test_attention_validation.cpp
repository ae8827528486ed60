// Invalid attention calls get the right status and a message, never a crash,
// and leave the output untouched. These run without a GPU: validation happens
// on the host before anything is launched, for Device::kCuda too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flashscope/attention.hpp"
#include "flashscope_lab/lab.hpp"
#include "flashscope/device.hpp"
#include "flashscope/half.hpp"
#include "support/attention_problem.hpp"

using namespace flashscope;

namespace {

// The valid baseline every case breaks one way.
using Valid = testing::SmallPrefill;

void expect(const PrefillParams& p, StatusCode code, const char* mentions) {
  const Status s = validate(p);
  CHECK(s.code() == code);
  CHECK_MESSAGE(s.message().find(mentions) != std::string::npos, "message: ", s.message());
}

}  // namespace

TEST_CASE("validate: the valid baseline passes on both devices") {
  CHECK(validate(Valid(Device::kCpu).p).ok());
  CHECK(validate(Valid(Device::kCuda).p).ok());
}

TEST_CASE("validate: null pointers are named") {
  for (int which = 0; which < 4; ++which) {
    Valid c;
    AttnTensor* t[] = {&c.p.q, &c.p.k, &c.p.v, &c.p.o};
    const char* names[] = {"q.data", "k.data", "v.data", "o.data"};
    t[which]->data = nullptr;
    expect(c.p, StatusCode::kInvalidArgument, names[which]);
    CHECK(prefill(c.p).code() == StatusCode::kInvalidArgument);
    CHECK(c.output_untouched());
  }
}

TEST_CASE("validate: unsupported head_dim and dtype say what is supported") {
  Valid c;
  c.p.head_dim = 48;
  expect(c.p, StatusCode::kUnsupported, "(32, 64, 80, 96, 128, 256)");
  // The CUDA list is the kernels' own: whatever it is, the message names it.
  Valid g(Device::kCuda);
  g.p.head_dim = 48;
  expect(g.p, StatusCode::kUnsupported, ("(" + supported_head_dims_text(Device::kCuda) + ")").c_str());
  Valid f;
  f.p.dtype = DType::kFP32;
  expect(f.p, StatusCode::kUnsupported, "bf16, fp16");
}

TEST_CASE("validate: head_dim per device") {
  for (int d : {32, 64, 80, 96, 128, 256}) {
    CHECK(supported_head_dim(d));
    CHECK(head_dim_supported(Device::kCpu, d));
    Valid c(Device::kCpu, d);
    CHECK(validate(c.p).ok());
  }
  for (int d : {0, -64, 16, 48, 112, 192, 512}) {
    CHECK_FALSE(supported_head_dim(d));
    CHECK_FALSE(head_dim_supported(Device::kCpu, d));
    CHECK_FALSE(head_dim_supported(Device::kCuda, d));
  }
  // What the CUDA kernels run is a subset of what some path runs, and
  // includes the dims they have always run.
  CHECK(head_dim_supported(Device::kCuda, 64));
  CHECK(head_dim_supported(Device::kCuda, 128));
  for (int d = 0; d <= 512; ++d)
    if (head_dim_supported(Device::kCuda, d)) CHECK(supported_head_dim(d));
}

TEST_CASE("validate: window and soft-cap") {
  struct Case {
    int left, right;
    float cap;
    bool causal;
    StatusCode code;
    const char* mentions;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {-1, -1, 0.0f, false, StatusCode::kOk, ""},
      {0, -1, 0.0f, true, StatusCode::kOk, ""},
      {512, 0, 0.0f, true, StatusCode::kOk, ""},       // window_right 0 is what causal means
      {17, 5, 0.0f, false, StatusCode::kOk, ""},       // two-sided local window
      {-1, 0, 30.0f, false, StatusCode::kOk, ""},
      {-2, -1, 0.0f, true, StatusCode::kInvalidArgument, "window_left"},
      {-1, -7, 0.0f, false, StatusCode::kInvalidArgument, "window_right"},
      {4, 1, 0.0f, true, StatusCode::kInvalidArgument, "with causal"},
      {-1, -1, -1.0f, true, StatusCode::kInvalidArgument, "softcap"},
      {-1, -1, inf, true, StatusCode::kInvalidArgument, "softcap"},
      {-1, -1, std::nanf(""), true, StatusCode::kInvalidArgument, "softcap"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.left);
    CAPTURE(k.right);
    CAPTURE(k.cap);
    Valid c;
    c.p.causal = k.causal;
    c.p.window_left = k.left;
    c.p.window_right = k.right;
    c.p.softcap = k.cap;
    expect(c.p, k.code, k.mentions);
    if (k.code != StatusCode::kOk) {
      CHECK(prefill(c.p).code() == k.code);
      CHECK(c.output_untouched());
    }
  }
}

TEST_CASE("validate: GQA ratio must be whole") {
  Valid c;
  c.p.q_heads = 5;
  c.p.kv_heads = 2;
  expect(c.p, StatusCode::kInvalidArgument, "multiple of kv_heads");
}

TEST_CASE("validate: bad sizes and strides") {
  Valid a;
  a.p.batch = 0;
  expect(a.p, StatusCode::kInvalidArgument, "batch");
  Valid b;
  b.p.kv_len = -1;
  expect(b.p, StatusCode::kInvalidArgument, "kv_len");
  Valid c;
  c.p.k.seq_stride = 0;
  expect(c.p, StatusCode::kInvalidArgument, "k strides");
  Valid d;
  d.p.o.head_stride = 32;  // heads of 64 elements overlapping by half
  expect(d.p, StatusCode::kInvalidArgument, "must not overlap");
  CHECK(prefill(d.p).code() == StatusCode::kInvalidArgument);
  CHECK(d.output_untouched());
  Valid e;
  e.p.softmax_scale = -1.0f;
  expect(e.p, StatusCode::kInvalidArgument, "softmax_scale");
}

TEST_CASE("validate: CUDA needs 16-byte aligned pointers and strides") {
  Valid a(Device::kCuda);
  a.p.k.data = reinterpret_cast<char*>(a.k.data()) + 2;
  expect(a.p, StatusCode::kInvalidArgument, "16-byte aligned");
  Valid b(Device::kCuda);
  b.p.v.seq_stride = 2 * 64 + 4;
  expect(b.p, StatusCode::kInvalidArgument, "multiples of 8");
  // The CPU backend has no such requirement.
  Valid c(Device::kCpu);
  c.p.k.data = reinterpret_cast<char*>(c.k.data()) + 2;
  c.p.kv_len = 39;
  CHECK(validate(c.p).ok());
}

TEST_CASE("validate: a workspace is a pointer and its size, aligned on CUDA") {
  Valid a;
  a.p.workspace_bytes = 1024;
  expect(a.p, StatusCode::kInvalidArgument, "workspace is null");
  CHECK(prefill(a.p).code() == StatusCode::kInvalidArgument);
  CHECK(a.output_untouched());
  Valid b(Device::kCuda);
  std::vector<uint8_t> scratch(1024 + 16);
  b.p.workspace = scratch.data() + 1 + (16 - reinterpret_cast<uintptr_t>(scratch.data()) % 16) % 16;
  b.p.workspace_bytes = 1024;
  expect(b.p, StatusCode::kInvalidArgument, "workspace must be 16-byte aligned");
  // On the CPU it is accepted and unused, and nothing asks for one there.
  Valid c;
  c.p.workspace = scratch.data();
  c.p.workspace_bytes = 1024;
  CHECK(validate(c.p).ok());
  CHECK(prefill_workspace_bytes(c.p) == 0);
}

TEST_CASE("validate: varlen needs both prefix sums, well-formed") {
  Valid a;
  std::vector<int32_t> cu_q{0, 10, 33};
  a.p.cu_seqlens_q = cu_q.data();
  expect(a.p, StatusCode::kInvalidArgument, "both");
  std::vector<int32_t> cu_k{0, 30, 20};
  a.p.cu_seqlens_k = cu_k.data();
  expect(a.p, StatusCode::kInvalidArgument, "non-decreasing");
  std::vector<int32_t> cu_k_long{0, 41, 45};
  a.p.cu_seqlens_k = cu_k_long.data();
  expect(a.p, StatusCode::kInvalidArgument, "longer than");
}

TEST_CASE("prefill on CUDA: a window or a soft-cap on a kernel that lacks it is refused by name, before any launch") {
  // The Hopper kernel and auto's sm80 kernel run windows and the soft-cap;
  // v6 at head_dim 64 (asked for by name here) is built without them and
  // refuses them with kUnsupported naming the feature, never a silently
  // ignored parameter. Host pointers are safe here: the refusal comes
  // before anything is read.
  for (int which = 0; which < 3; ++which) {
    Valid c(Device::kCuda);
    c.p.kernel = PrefillKernel::kV6;
    c.p.causal = true;
    if (which == 0) c.p.window_left = 512;
    if (which == 1) c.p.softcap = 30.0f;
    if (which == 2) {
      c.p.causal = false;
      c.p.window_right = 8;
    }
    CAPTURE(which);
    const Status s = prefill(c.p);
    CHECK_FALSE(s.ok());
    CHECK_FALSE(plan_prefill(c.p).ok());
    if (cuda_available()) {
      CHECK(s.code() == StatusCode::kUnsupported);
      CHECK_MESSAGE(s.message().find(which == 1 ? "soft-cap" : "sliding window") != std::string::npos, s.message());
    }
    CHECK(c.output_untouched());
  }
}

TEST_CASE("prefill on CUDA without a device or CUDA build fails cleanly") {
  if (cuda_available()) return;  // the GPU suites cover the real path
  Valid c(Device::kCuda);
  const Status s = prefill(c.p);
  CHECK_FALSE(s.ok());
  CHECK(c.output_untouched());
}

TEST_CASE("prefill: empty problems succeed without touching anything") {
  Valid c;
  c.p.q_len = 0;
  CHECK(prefill(c.p).ok());
  CHECK(c.output_untouched());
}

TEST_CASE("kernel names round-trip") {
  for (PrefillKernel k : lab::ladder_kernels()) {
    PrefillKernel parsed = PrefillKernel::kAuto;
    REQUIRE(parse_prefill_kernel(prefill_kernel_name(k), &parsed));
    CHECK(parsed == k);
  }
  PrefillKernel k;
  REQUIRE(parse_prefill_kernel("hopper", &k));
  CHECK(k == PrefillKernel::kHopper);
  CHECK(std::string(prefill_kernel_name(PrefillKernel::kHopper)) == "hopper");
  CHECK_FALSE(parse_prefill_kernel("v7", &k));
  CHECK_FALSE(parse_prefill_kernel("V5", &k));
}

TEST_CASE("SOL table: Hopper and the reference figures") {
  // 132 SMs x 1.83 GHz x 4096 = 989.4 TFLOPS, the H100 SXM figure.
  CHECK(132 * 1.83 * tensor_flops_per_clk_per_sm(9, 0, "NVIDIA H100 80GB HBM3") * 1e-3 == doctest::Approx(989.4).epsilon(1e-3));
  // RTX 5090: 170 SMs x 2.407 GHz x 512 = 209.5 TFLOPS (GeForce: half-rate FP32 accumulate).
  CHECK(170 * 2.407 * tensor_flops_per_clk_per_sm(12, 0, "NVIDIA GeForce RTX 5090") * 1e-3 == doctest::Approx(209.5).epsilon(1e-3));
  // A100: 108 x 1.41 x 2048 = 312 TFLOPS.
  CHECK(108 * 1.41 * tensor_flops_per_clk_per_sm(8, 0, "NVIDIA A100-SXM4-80GB") * 1e-3 == doctest::Approx(312).epsilon(2e-3));
}
