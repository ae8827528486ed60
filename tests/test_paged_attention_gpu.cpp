// Paged attention and the paged KV cache on CUDA, against the host.
//
//  * paged_attention(Device::kCuda) against the FP64 paged reference over
//    the CPU suite's grid (batches 1..64, kv lengths 1..32k, pages 16/64/256,
//    GQA 1/3/4/8, D 64/128, q_len 1..8, shared prefixes, fragmented pages),
//    each with num_splits forced to 1, 2, 7, 64 and 128 (the most) and left
//    to the plan. Seven splits of a 1-token cache leave most splits empty: the
//    combine must ignore them. The split workspace is filled with NaN before each run, o
//    starts as NaN, guards surround o and lse, and pools hold NaN wherever
//    no sequence may read (see tests/support/paged_problem.hpp).
//  * the combine's layouts: every split count that changes how a row is cut
//    over threads (slices of 32, 16 and 8 float4 columns, 1..8 splits per
//    group, 1..16 groups, 1..8 slices per block and a partial last block) at
//    the issue's decode shape and at D64.
//  * two split-KV calls sharing one workspace, captured into a CUDA graph
//    (on sm_90 the combine is a programmatic launch there, an edge that lets
//    it start before the attention grid ends), replay bit for bit like plain
//    calls, and still do after kv_lens changed.
//  * the plan: forced splits are honoured, the workspace it names is
//    enough and a smaller one is refused, it ignores kv_lens' values, and
//    the split counts it picks at the decode shapes the benchmarks and the
//    engine run (one KV tile per split at B1, 2 splits at B64 on an H200).
//  * append_kv's kernel against the CPU copy, bit for bit, guards included.
//  * PagedKvCache on the device (copy-on-write by cudaMemcpy, grow's copy to
//    the moved pools, reserved pages) against the same operations on a host
//    cache, then attention over it.
//
// Tolerances: PagedProblem::tolerance(), tied to the dtype.
// Without a CUDA device each case says it was skipped and passes.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attention/cpu/paged_attention_cpu.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/half.hpp"
#include "flashscope/kv_cache.hpp"
#include "flashscope/paged_attention.hpp"
#include "support/device_attention.hpp"
#include "support/gpu.hpp"
#include "support/paged_problem.hpp"
#include "util/math.hpp"

using namespace flashscope;
using flashscope::testing::skip_without_gpu;
using flashscope::testing::upload;
using flashscope::testing::DevicePagedAttention;
using flashscope::testing::CacheTables;
using flashscope::testing::PagedBuffers;
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

// The outputs in prob's storage (downloaded) against the FP64 reference.
void check_against_reference(PagedProblem& prob, bool with_lse) {
  REQUIRE_MESSAGE(prob.reference().status.ok(), prob.reference().status.to_string());
  const auto tol = prob.tolerance();
  const std::vector<float> out = prob.output_as_float();
  const std::vector<float> lse = prob.lse_values();
  CHECK_MESSAGE(prob.guards_intact(), "a write landed outside o or lse");
  int worst_seq = -1;
  const double nerr = prob.normalized_error(out.data());
  const double serr = prob.worst_sequence_error(out.data(), &worst_seq);
  const double aerr = prob.max_abs_error(out.data());
  CHECK_MESSAGE(nerr < tol.normalized, "normalized error ", nerr, " >= ", tol.normalized);
  CHECK_MESSAGE(serr < tol.normalized, "sequence ", worst_seq, " normalized error ", serr, " >= ", tol.normalized);
  CHECK_MESSAGE(aerr < tol.max_abs, "max abs error ", aerr, " >= ", tol.max_abs);
  if (with_lse) {
    const double lerr = prob.lse_max_abs_error(lse.data());
    CHECK_MESSAGE(lerr < tol.lse_abs, "lse error ", lerr, " >= ", tol.lse_abs);
  } else {
    bool untouched = true;  // lse = null: the poison must still be there
    for (float x : lse) untouched = untouched && std::isnan(x);
    CHECK_MESSAGE(untouched, "lse was written although p.lse is null");
  }
}

// One run with num_splits forced (0: the plan decides), checked against the reference.
void check_on_gpu(PagedProblem& prob, DevicePagedAttention& dev, int num_splits, bool with_lse = true,
                  PrefillKernel kernel = PrefillKernel::kAuto) {
  INFO("case: ", prob.shape().describe(), " num_splits=", num_splits, with_lse ? "" : " no lse", " kernel ",
       std::string(prefill_kernel_name(kernel)));
  dev.poison(prob);

  PagedAttentionParams p = dev.params(prob);
  if (!with_lse) p.lse = nullptr;
  p.num_splits = num_splits;
  p.kernel = kernel;
  auto plan = plan_paged_attention(p);
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  if (num_splits > 0) CHECK(plan->num_splits == num_splits);
  CHECK(plan->num_splits >= 1);
  CHECK((plan->num_splits > 1) == (plan->workspace_bytes > 0));
  DeviceBuffer workspace;
  if (plan->workspace_bytes > 0) {
    auto w = DeviceBuffer::allocate(plan->workspace_bytes);
    REQUIRE_MESSAGE(w.ok(), w.status().to_string());
    workspace = std::move(w.value());
    REQUIRE(workspace.fill_bytes(0xFF).ok());  // NaN: a split read before it is written shows
    // One byte short is refused, before anything is launched.
    p.workspace = workspace.data();
    p.workspace_bytes = plan->workspace_bytes - 1;
    CHECK(paged_attention(p).code() == StatusCode::kInvalidArgument);
  }
  p.workspace = workspace.data();
  p.workspace_bytes = workspace.size();
  const Status st = paged_attention(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  const Status sync = device_synchronize();
  REQUIRE_MESSAGE(sync.ok(), sync.to_string());
  dev.read(prob);
  check_against_reference(prob, with_lse);
}

void check_all_splits(PagedShape s) {
  PagedProblem prob(std::move(s));
  DevicePagedAttention dev(prob);
  for (int splits : {1, 2, 7, 64, 128, 0}) check_on_gpu(prob, dev, splits);
}

// The CPU suite's grid, plus shapes only a GPU run makes cheap.
std::vector<PagedShape> grid() {
  std::vector<PagedShape> g = {
      shape({1}, 1, 1, 1, 64, 16, 1),
      shape({17, 1, 300}, 9, 3, 1, 64, 16, 2),
      shape({3, 64, 65, 129, 1000}, 8, 2, 3, 128, 64, 3),
      shape(lengths(17, 1, 2000, 4), 8, 1, 1, 128, 256, 4),
      shape(lengths(64, 1, 1500, 5), 4, 1, 1, 64, 16, 5),
      shape(lengths(64, 2, 600, 6), 2, 2, 2, 128, 64, 6),
      shape(lengths(8, 8, 3000, 7), 8, 1, 8, 64, 16, 7),
      shape(lengths(4, 5, 700, 8), 9, 3, 5, 128, 256, 8),
      shape({255, 256, 257, 16, 15}, 3, 1, 1, 64, 256, 9),
      shape({7, 8, 9}, 4, 1, 7, 128, 16, 10),
      // GPU-only: every GQA ratio at both head_dims, a full decode batch of
      // SmolLM2's shape, the largest q_len.
      shape(lengths(64, 1, 4096, 11), 9, 3, 1, 64, 16, 11),
      shape(lengths(32, 8, 2048, 12), 32, 8, 8, 128, 64, 12),
      shape(lengths(16, 1, 8192, 13), 8, 1, 1, 128, 16, 13),
      shape(lengths(16, 4, 8192, 14), 16, 4, 4, 64, 256, 14),
      shape(lengths(24, 2, 1024, 15), 12, 4, 2, 128, 16, 15),  // kv_lens >= q_len, as the API requires
  };
  g[2].dtype = DType::kFP16;
  g[4].padded_q = true;
  g[5].max_kv_len_slack = 1000;
  g[6].contiguous_pages = true;
  g[7].causal = false;
  g[8].dtype = DType::kFP16;
  g[9].softmax_scale = 0.3f;
  g[12].dtype = DType::kFP16;
  g[13].causal = false;
  g[14].padded_q = true;
  return g;
}

}  // namespace

TEST_CASE("gpu paged attention: the grid, splits 1, 2, 7, 64, 128 and auto") {
  if (skip_without_gpu()) return;
  for (const PagedShape& s : grid()) check_all_splits(s);
}

TEST_CASE("gpu paged attention: chunked prefill over the cache (the 128-row tile)") {
  if (skip_without_gpu()) return;
  // More than 64 (token, q-head) rows per kv-head switch the kernel from the
  // one-warp decode tile to the 128-row prefill tile.
  PagedShape turn = shape({100, 612, 1000}, 8, 2, 100, 128, 16, 80);  // a new turn after cached history
  PagedShape fresh = shape({300, 301}, 9, 3, 300, 64, 64, 81);         // a first prompt: kv_len == q_len (almost)
  fresh.dtype = DType::kFP16;
  PagedShape wide = shape({129, 2000}, 4, 1, 129, 64, 256, 82);       // group 4 x 129 tokens, page 256
  wide.causal = false;
  for (PagedShape s : {turn, fresh, wide}) check_all_splits(s);
  // The same through the sm_90a kernel where the device runs it.
  if (!prefill_kernel_runnable(PrefillKernel::kHopper)) {
    MESSAGE("the hopper kernel does not run here: its paged path is not tested");
    return;
  }
  for (PagedShape s : {turn, fresh, wide}) {
    PagedProblem prob(std::move(s));
    DevicePagedAttention dev(prob);
    for (int splits : {1, 2, 7, 0}) check_on_gpu(prob, dev, splits, true, PrefillKernel::kHopper);
    check_on_gpu(prob, dev, 0, false, PrefillKernel::kHopper);
  }
}

TEST_CASE("gpu paged attention: long caches (32k keys)") {
  if (skip_without_gpu()) return;
  std::vector<PagedShape> g = {
      shape({32768}, 4, 1, 1, 128, 256, 20),
      shape({32000, 20001}, 8, 1, 4, 64, 64, 21),
      shape({32768}, 1, 1, 8, 128, 16, 22),
      shape({32768, 1, 17, 4000}, 8, 2, 1, 128, 16, 23),  // one long sequence among short ones
  };
  g[1].dtype = DType::kFP16;
  for (const PagedShape& s : g) check_all_splits(s);
}

TEST_CASE("gpu paged attention: shared prefix pages") {
  if (skip_without_gpu()) return;
  PagedShape a = shape({48, 49, 60, 100, 20, 33}, 8, 2, 1, 64, 16, 30);
  a.shared_prefix_pages = 3;
  PagedShape b = shape(lengths(12, 260, 900, 31), 4, 1, 4, 128, 64, 31);
  b.shared_prefix_pages = 4;
  PagedShape c = shape({512, 513, 700}, 3, 3, 2, 64, 256, 32);
  c.shared_prefix_pages = 2;
  c.dtype = DType::kFP16;
  for (const PagedShape& s : {a, b, c}) check_all_splits(s);
}

TEST_CASE("gpu paged attention: lse is optional") {
  if (skip_without_gpu()) return;
  PagedProblem prob(shape(lengths(6, 3, 900, 40), 8, 2, 3, 128, 16, 40));
  DevicePagedAttention dev(prob);
  for (int splits : {1, 3, 64, 128}) check_on_gpu(prob, dev, splits, /*with_lse=*/false);
}

TEST_CASE("gpu paged attention: the combine over every way of cutting a row") {
  if (skip_without_gpu()) return;
  // The combine cuts a row into slices of 32, 16 or 8 float4 columns (at most
  // 16 KiB of partials each), gives a slice ceil(splits / 8) groups (rounded
  // up to whole warps), and packs up to 256 threads and 16 KiB of slices in
  // a block. These counts give every slice width at both head_dims, 1..8
  // splits per group, 1..16 groups (and groups with no split), 1..8 slices
  // per block, and partial last blocks.
  const std::vector<int> counts = {2, 3, 8, 9, 16, 17, 24, 32, 33, 57, 63, 64, 65, 96, 97, 127, 128};
  // The issue's decode shape: B1, 32 q-heads on 8 kv-heads, 4096 keys, page
  // 16; auto is 128 splits (one 32-key tile each) on an H100 or H200.
  PagedShape issue = shape({4096}, 32, 8, 1, 128, 16, 50);
  // D64, q_len 8 (group 4: 32 rows per kv-head), fp16, sequences too short for
  // most splits to see a key (their lse is -inf and must weigh 0).
  PagedShape draft = shape({3000, 9, 40}, 12, 3, 8, 64, 16, 51);
  draft.dtype = DType::kFP16;
  // 2048 rows (B64 x 32 heads) over 2..3 splits: eight rows per block.
  PagedShape wide = shape(lengths(64, 1, 2048, 52), 32, 8, 1, 128, 64, 52);
  for (PagedShape s : {issue, draft}) {
    PagedProblem prob(std::move(s));
    DevicePagedAttention dev(prob);
    for (int splits : counts) check_on_gpu(prob, dev, splits);
    check_on_gpu(prob, dev, 0);
  }
  PagedProblem prob(std::move(wide));
  DevicePagedAttention dev(prob);
  for (int splits : {2, 3, 0}) check_on_gpu(prob, dev, splits);
}

TEST_CASE("gpu paged attention: the plan ignores kv_lens' values (graph-safe)") {
  if (skip_without_gpu()) return;
  PagedProblem prob(shape(lengths(4, 1, 5000, 41), 8, 1, 1, 128, 16, 41));
  DevicePagedAttention dev(prob);
  PagedAttentionParams p = dev.params(prob);
  auto before = plan_paged_attention(p);
  REQUIRE(before.ok());
  std::vector<int32_t> other(prob.kv_lens().size(), 1);
  REQUIRE(dev.lens.upload(other.data(), other.size() * 4).ok());
  auto after = plan_paged_attention(p);
  REQUIRE(after.ok());
  CHECK(before->num_splits == after->num_splits);
  CHECK(before->workspace_bytes == after->workspace_bytes);
}

TEST_CASE("gpu paged attention: the plan's split counts at the decode shapes") {
  if (skip_without_gpu()) return;
  auto info = query_device();
  REQUIRE_MESSAGE(info.ok(), info.status().to_string());
  const int sms = info->sm_count;
  // The plan reads shapes only: one small aligned device buffer stands in
  // for every tensor.
  DeviceBuffer any = upload(std::vector<uint8_t>(256).data(), 256);
  struct Case {
    const char* what;
    int batch, q_heads, kv_heads, q_len, max_kv_len, head_dim, page, expected;
  };
  // The plan aims at 8 one-warp CTAs per SM and gives a split at least 64
  // keys (128 splits of one 32-key tile were measured slower at B1 D128),
  // unless that leaves SMs without a CTA: then splits of one key tile (16
  // keys at D256, 32 at D128, 64 at D64).
  const Case cases[] = {
      // The benchmark's B1 decode: 8 CTAs per split; 64 splits of 64 keys
      // on an H100 or H200 (132 SMs).
      {"B1 32/8 4096 D128", 1, 32, 8, 1, 4096, 128, 16, std::min(64, sms)},
      // The LLM engine's decode (SmolLM2, 640 keys): 10 splits of 64 keys.
      {"B1 9/3 640 D64", 1, 9, 3, 1, 640, 64, 64, std::min(10, std::max(1, 8 * sms / 3))},
      // Gemma 3's decode (4 q-heads over one kv-head, 640 keys): 10 splits
      // of 64 keys would be 10 CTAs; 40 splits of one 16-key tile.
      {"B1 4/1 640 D256", 1, 4, 1, 1, 640, 256, 64, sms > 10 ? std::min(40, sms) : 10},
      // A short chat at D128: 10 splits of 64 keys are 80 CTAs; on 132 SMs
      // 20 splits of one 32-key tile.
      {"B1 32/8 640 D128", 1, 32, 8, 1, 640, 128, 16, 80 < sms ? std::min(sms, 20) : 10},
      // A full batch: 512 CTAs already, 2 splits on 132 SMs.
      {"B64 32/8 4096 D128", 64, 32, 8, 1, 4096, 128, 16, std::clamp(8 * sms / 512, 1, 128)},
      // Chunked prefill (400 rows per kv-head: 4 tiles of 128): 64 keys per split.
      {"B1 8/2 q_len 100 4096 D128", 1, 8, 2, 100, 4096, 128, 16, std::min(64, std::max(1, 8 * sms / 8))},
  };
  for (const Case& c : cases) {
    INFO("case: ", c.what, " on ", sms, " SMs");
    PagedAttentionParams p;
    p.q = p.o = bshd(any.data(), c.q_len, c.q_heads, c.head_dim);
    p.k_pages = p.v_pages = any.data();
    p.block_tables = p.kv_lens = static_cast<const int32_t*>(any.data());
    p.block_table_stride = (c.max_kv_len + c.page - 1) / c.page;
    p.batch = c.batch;
    p.q_heads = c.q_heads;
    p.kv_heads = c.kv_heads;
    p.q_len = c.q_len;
    p.head_dim = c.head_dim;
    p.page_size = c.page;
    p.max_kv_len = c.max_kv_len;
    p.device = Device::kCuda;
    auto plan = plan_paged_attention(p);
    REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
    CHECK(plan->num_splits == c.expected);
    // The workspace: each split's float o [rows, D] and lse [rows].
    const size_t rows = size_t(c.batch) * c.q_heads * c.q_len;
    CHECK(plan->workspace_bytes ==
          (plan->num_splits > 1 ? size_t(plan->num_splits) * rows * size_t(c.head_dim + 1) * sizeof(float) : 0));
  }
}

namespace {

// The CUDA driver's stream and graph calls, loaded at run time: this binary
// does not link the CUDA runtime (the library keeps its static copy to
// itself), and libcuda.so.1 is there wherever a GPU is. A driver stream is a
// cudaStream_t to the library; capture is a property of the stream, so the
// library's launches into it are captured.
class DriverGraphs {
 public:
  using Handle = void*;
  DriverGraphs() : lib_(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (lib_ == nullptr) return;
    bool all = load(stream_create_, "cuStreamCreate") && load(stream_destroy_, "cuStreamDestroy_v2") &&
               load(begin_capture_, "cuStreamBeginCapture_v2") && load(end_capture_, "cuStreamEndCapture") &&
               load(instantiate_, "cuGraphInstantiateWithFlags") && load(launch_, "cuGraphLaunch") &&
               load(synchronize_, "cuStreamSynchronize") && load(exec_destroy_, "cuGraphExecDestroy") &&
               load(graph_destroy_, "cuGraphDestroy");
    if (!all) {
      dlclose(lib_);
      lib_ = nullptr;
    }
  }
  ~DriverGraphs() {
    if (lib_ != nullptr) dlclose(lib_);
  }
  DriverGraphs(const DriverGraphs&) = delete;
  DriverGraphs& operator=(const DriverGraphs&) = delete;
  bool loaded() const { return lib_ != nullptr; }

  // Each returns the CUresult (0 = CUDA_SUCCESS).
  int create_stream(Handle* stream) const { return stream_create_(stream, kDefaultFlags); }
  int destroy_stream(Handle stream) const { return stream_destroy_(stream); }
  int begin_capture(Handle stream) const { return begin_capture_(stream, kThreadLocal); }
  int end_capture(Handle stream, Handle* graph) const { return end_capture_(stream, graph); }
  int instantiate(Handle* exec, Handle graph) const { return instantiate_(exec, graph, 0); }
  int launch(Handle exec, Handle stream) const { return launch_(exec, stream); }
  int synchronize(Handle stream) const { return synchronize_(stream); }
  int destroy_exec(Handle exec) const { return exec_destroy_(exec); }
  int destroy_graph(Handle graph) const { return graph_destroy_(graph); }

 private:
  // A blocking stream: its work waits for the legacy stream's, where
  // DeviceBuffer's memsets and uploads run (they may return before they land).
  static constexpr unsigned kDefaultFlags = 0;
  static constexpr int kThreadLocal = 1;       // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, as the engine captures
  template <typename Fn>
  bool load(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(lib_, name));
    return fn != nullptr;
  }
  void* lib_;
  int (*stream_create_)(Handle*, unsigned) = nullptr;
  int (*stream_destroy_)(Handle) = nullptr;
  int (*begin_capture_)(Handle, int) = nullptr;
  int (*end_capture_)(Handle, Handle*) = nullptr;
  int (*instantiate_)(Handle*, Handle, unsigned long long) = nullptr;
  int (*launch_)(Handle, Handle) = nullptr;
  int (*synchronize_)(Handle) = nullptr;
  int (*exec_destroy_)(Handle) = nullptr;
  int (*graph_destroy_)(Handle) = nullptr;
};

// Output buffers of one call (o and lse with the problem's guards), poisoned
// before every run and read back into prob's storage.
struct CallOutputs {
  DeviceBuffer o, lse;
  explicit CallOutputs(PagedProblem& prob)
      : o(upload(prob.o_storage().data(), prob.o_storage().size() * 2)),
        lse(upload(prob.lse_storage().data(), prob.lse_storage().size() * 4)) {}
  void poison(PagedProblem& prob) {
    prob.reset_outputs();
    REQUIRE(o.upload(prob.o_storage().data(), prob.o_storage().size() * 2).ok());
    REQUIRE(lse.upload(prob.lse_storage().data(), prob.lse_storage().size() * 4).ok());
  }
  void download(PagedProblem& prob) {
    REQUIRE(o.download(prob.o_storage().data(), prob.o_storage().size() * 2).ok());
    REQUIRE(lse.download(prob.lse_storage().data(), prob.lse_storage().size() * 4).ok());
  }
};

}  // namespace

TEST_CASE("gpu paged attention: split-KV calls captured into a CUDA graph replay like plain calls") {
  if (skip_without_gpu()) return;
  const DriverGraphs drv;
  if (!drv.loaded()) {
    MESSAGE("libcuda.so.1 has no stream-capture entry points here: graph case skipped");
    flashscope::testing::mark_skipped();
    return;
  }
  // Two calls, A and B, share one workspace as an engine's layers do: B's
  // attention grid overwrites the partials A's combine reads, so a combine
  // that ran past its own grid's end, or a B that started before A's combine
  // finished, corrupts A. B has another softmax scale, so its partials differ.
  PagedShape a_shape = shape({4096}, 32, 8, 1, 128, 16, 60);  // the issue's decode shape, 128 splits (auto)
  PagedShape d64 = shape({700, 33, 2000}, 8, 2, 4, 64, 16, 61);
  d64.dtype = DType::kFP16;
  for (const auto& [base, splits] :
       {std::pair{a_shape, 0}, std::pair{a_shape, 128}, std::pair{d64, 64}, std::pair{d64, 128}}) {
    PagedShape b_shape = base;
    b_shape.softmax_scale = 0.5f / std::sqrt(float(base.head_dim));
    PagedProblem prob_a(base), prob_b(b_shape);  // the same inputs, B's reference with B's scale
    INFO("case: ", base.describe(), " num_splits=", splits);
    DevicePagedAttention dev(prob_a);
    CallOutputs out_a(prob_a), out_b(prob_b);

    void* stream = nullptr;
    REQUIRE(drv.create_stream(&stream) == 0);
    PagedAttentionParams a = dev.params(prob_a);
    a.o.data = static_cast<uint16_t*>(out_a.o.data()) + PagedProblem::kOutGuard;
    a.lse = static_cast<float*>(out_a.lse.data()) + PagedProblem::kLseGuard;
    a.num_splits = splits;
    a.stream = stream;
    PagedAttentionParams b = a;
    b.o.data = static_cast<uint16_t*>(out_b.o.data()) + PagedProblem::kOutGuard;
    b.lse = static_cast<float*>(out_b.lse.data()) + PagedProblem::kLseGuard;
    b.softmax_scale = b_shape.softmax_scale;
    auto plan = plan_paged_attention(a);
    REQUIRE(plan.ok());
    REQUIRE(plan->num_splits > 1);
    DeviceBuffer workspace = std::move(DeviceBuffer::allocate(plan->workspace_bytes).value());
    a.workspace = b.workspace = workspace.data();
    a.workspace_bytes = b.workspace_bytes = workspace.size();

    // Plain calls on the stream: A then B. Bits to compare the replays with.
    auto run_plain = [&] {
      REQUIRE(workspace.fill_bytes(0xFF).ok());
      out_a.poison(prob_a);
      out_b.poison(prob_b);
      REQUIRE(paged_attention(a).ok());
      REQUIRE(paged_attention(b).ok());
      REQUIRE(drv.synchronize(stream) == 0);
      out_a.download(prob_a);
      out_b.download(prob_b);
      return std::pair{prob_a.o_storage(), prob_b.o_storage()};
    };
    auto plain_lse = [&] { return std::pair{prob_a.lse_storage(), prob_b.lse_storage()}; };
    const auto plain = run_plain();
    const auto plain_l = plain_lse();
    check_against_reference(prob_a, true);
    check_against_reference(prob_b, true);

    // The same two calls captured, then replayed twice back to back.
    void* graph = nullptr;
    void* exec = nullptr;
    REQUIRE(drv.begin_capture(stream) == 0);
    const Status sa = paged_attention(a);
    const Status sb = paged_attention(b);
    REQUIRE(drv.end_capture(stream, &graph) == 0);
    REQUIRE_MESSAGE(sa.ok(), sa.to_string());
    REQUIRE_MESSAGE(sb.ok(), sb.to_string());
    REQUIRE(drv.instantiate(&exec, graph) == 0);
    auto replay = [&] {
      REQUIRE(workspace.fill_bytes(0xFF).ok());
      out_a.poison(prob_a);
      out_b.poison(prob_b);
      REQUIRE(drv.launch(exec, stream) == 0);
      REQUIRE(drv.launch(exec, stream) == 0);
      REQUIRE(drv.synchronize(stream) == 0);
      out_a.download(prob_a);
      out_b.download(prob_b);
    };
    replay();
    CHECK_MESSAGE(prob_a.o_storage() == plain.first, "call A replayed from the graph differs from plain calls");
    CHECK_MESSAGE(prob_b.o_storage() == plain.second, "call B replayed from the graph differs from plain calls");
    CHECK(std::memcmp(prob_a.lse_storage().data(), plain_l.first.data(), plain_l.first.size() * 4) == 0);
    CHECK(std::memcmp(prob_b.lse_storage().data(), plain_l.second.data(), plain_l.second.size() * 4) == 0);
    check_against_reference(prob_a, true);

    // The graph reads kv_lens when it runs: shorter caches, same graph, and
    // plain calls on the new lengths must agree bit for bit.
    std::vector<int32_t> shorter = prob_a.kv_lens();
    for (int32_t& len : shorter) len = std::max(base.q_len, len / 3);
    REQUIRE(dev.lens.upload(shorter.data(), shorter.size() * 4).ok());
    replay();
    const std::vector<uint16_t> replayed_a = prob_a.o_storage(), replayed_b = prob_b.o_storage();
    const auto replayed_l = plain_lse();
    const auto plain_short = run_plain();
    const auto plain_short_l = plain_lse();
    CHECK_MESSAGE(replayed_a == plain_short.first, "call A replayed on shorter caches differs from plain calls");
    CHECK_MESSAGE(replayed_b == plain_short.second, "call B replayed on shorter caches differs from plain calls");
    CHECK(std::memcmp(replayed_l.first.data(), plain_short_l.first.data(), plain_short_l.first.size() * 4) == 0);
    CHECK(std::memcmp(replayed_l.second.data(), plain_short_l.second.data(), plain_short_l.second.size() * 4) == 0);
    CHECK_MESSAGE(replayed_a != plain.first, "the shorter caches changed nothing: the case tests nothing");

    CHECK(drv.destroy_exec(exec) == 0);
    CHECK(drv.destroy_graph(graph) == 0);
    CHECK(drv.destroy_stream(stream) == 0);
  }
}

// ---------------------------------------------------------------------------
// append_kv and the cache on the device

TEST_CASE("gpu append_kv: the kernel writes what the CPU writes, bit for bit") {
  if (skip_without_gpu()) return;
  for (int dim : {64, 128})
    for (int page : {16, 256}) {
      CAPTURE(dim);
      CAPTURE(page);
      const int H = 3, pages = 12, n = 40;
      const size_t pool = size_t(pages) * H * page * dim;
      std::vector<uint16_t> k_pool(pool, 0x7E57), v_pool(pool, 0x7E57);
      // New tokens in a padded layout whose gaps hold NaN.
      AttnTensor kt, vt;
      kt.head_stride = dim + 8;
      kt.seq_stride = H * kt.head_stride + 8;
      vt = bhsd(nullptr, n, H, dim);
      std::vector<uint16_t> k_new(size_t(n) * size_t(kt.seq_stride), 0xFFFF), v_new(size_t(n) * H * dim, 0xFFFF);
      for (int i = 0; i < n; ++i)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < dim; ++d) {
            k_new[size_t(i * kt.seq_stride + h * kt.head_stride + d)] = uint16_t(mix(uint64_t(i * 1000 + h * 200 + d)) | 1);
            v_new[size_t(i * vt.seq_stride + h * vt.head_stride + d)] = uint16_t(mix(uint64_t(i * 1000 + h * 200 + d + 7)) | 1);
          }
      // Distinct scattered slots: a permutation of the pool's slots; two
      // padding tokens (-1) and one past the pool, which the kernel skips.
      std::vector<Slot> slots(static_cast<size_t>(n));
      const Slot total = Slot{pages} * page;
      for (int i = 0; i < n; ++i) slots[size_t(i)] = Slot((uint64_t(i) * 7919 + 13) % uint64_t(total));
      slots[5] = -1;
      slots[17] = -1;
      slots[30] = total + 3;

      DeviceBuffer dk = upload(k_pool.data(), pool * 2), dv = upload(v_pool.data(), pool * 2);
      DeviceBuffer dkn = upload(k_new.data(), k_new.size() * 2), dvn = upload(v_new.data(), v_new.size() * 2);
      DeviceBuffer ds = upload(slots.data(), slots.size() * sizeof(Slot));

      AppendKvParams p;
      p.num_tokens = n;
      p.kv_heads = H;
      p.head_dim = dim;
      p.page_size = page;
      p.num_pages = pages;
      p.device = Device::kCuda;
      p.k_new = kt;
      p.v_new = vt;
      p.k_new.data = dkn.data();
      p.v_new.data = dvn.data();
      p.slots = static_cast<const Slot*>(ds.data());
      p.k_pages = dk.data();
      p.v_pages = dv.data();
      const Status st = append_kv(p);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      REQUIRE(device_synchronize().ok());

      // The CPU rejects the slot past the pool; without it, it must agree.
      std::vector<Slot> cpu_slots = slots;
      cpu_slots[30] = -1;
      AppendKvParams c = p;
      c.device = Device::kCpu;
      c.k_new.data = k_new.data();
      c.v_new.data = v_new.data();
      c.slots = cpu_slots.data();
      c.k_pages = k_pool.data();
      c.v_pages = v_pool.data();
      REQUIRE(append_kv(c).ok());
      std::vector<uint16_t> k_gpu(pool), v_gpu(pool);
      REQUIRE(dk.download(k_gpu.data(), pool * 2).ok());
      REQUIRE(dv.download(v_gpu.data(), pool * 2).ok());
      CHECK(k_gpu == k_pool);
      CHECK(v_gpu == v_pool);
    }
}

namespace {

// Copies a device KV pool [pages, H, P, D] to the host with public calls
// only (the test does not link the CUDA runtime): append_kv, whose kernel
// the case above checks bit for bit, moves one page at a time from the
// pool, viewed as P tokens of H heads (seq_stride D, head_stride P·D), to
// the same slots of a DeviceBuffer of the pool's size.
std::vector<uint16_t> download_pool(const void* k_pool, const void* v_pool, const KvCacheConfig& c,
                                    std::vector<uint16_t>* v_out) {
  const int H = c.kv_heads, P = c.page_size, D = c.head_dim;
  const size_t page_elems = size_t(H) * P * D, pool = page_elems * size_t(c.num_pages);
  auto k_copy = DeviceBuffer::allocate(pool * 2);
  auto v_copy = DeviceBuffer::allocate(pool * 2);
  REQUIRE(k_copy.ok());
  REQUIRE(v_copy.ok());
  for (int page = 0; page < c.num_pages; ++page) {
    std::vector<Slot> slots(static_cast<size_t>(P));
    for (int off = 0; off < P; ++off) slots[size_t(off)] = Slot{page} * P + off;
    DeviceBuffer dslots = upload(slots.data(), slots.size() * sizeof(Slot));
    AppendKvParams a;
    a.k_new = {const_cast<uint16_t*>(static_cast<const uint16_t*>(k_pool)) + size_t(page) * page_elems, 0, D,
               int64_t{P} * D};
    a.v_new = {const_cast<uint16_t*>(static_cast<const uint16_t*>(v_pool)) + size_t(page) * page_elems, 0, D,
               int64_t{P} * D};
    a.slots = static_cast<const Slot*>(dslots.data());
    a.num_tokens = P;
    a.k_pages = k_copy->data();
    a.v_pages = v_copy->data();
    a.kv_heads = H;
    a.head_dim = D;
    a.page_size = P;
    a.num_pages = c.num_pages;
    a.device = Device::kCuda;
    REQUIRE(append_kv(a).ok());
    REQUIRE(device_synchronize().ok());
  }
  std::vector<uint16_t> k(pool);
  v_out->assign(pool, 0);
  REQUIRE(k_copy->download(k.data(), pool * 2).ok());
  REQUIRE(v_copy->download(v_out->data(), pool * 2).ok());
  return k;
}

}  // namespace

TEST_CASE("gpu KV cache: append, fork and copy-on-write match a host cache, and attention over it") {
  if (skip_without_gpu()) return;
  KvCacheConfig cfg;
  cfg.num_layers = 2;
  cfg.num_pages = 24;
  cfg.page_size = 16;
  cfg.kv_heads = 2;
  cfg.head_dim = 128;
  const KvCacheConfig host_cfg = cfg;
  cfg.device = Device::kCuda;
  auto made_dev = PagedKvCache::create(cfg);
  REQUIRE_MESSAGE(made_dev.ok(), made_dev.status().to_string());
  auto made_host = PagedKvCache::create(host_cfg);
  REQUIRE(made_host.ok());
  PagedKvCache& dev = made_dev.value();
  PagedKvCache& host = made_host.value();
  const int H = cfg.kv_heads, D = cfg.head_dim, P = cfg.page_size, row = H * D;

  // The same tokens into both caches: host through the CPU copy, device
  // through the kernel.
  auto append_both = [&](int seq, int n, int key) {
    auto hs = host.append_slots(seq, n);
    auto ds = dev.append_slots(seq, n);
    REQUIRE_MESSAGE(ds.ok(), ds.status().to_string());
    REQUIRE(hs.ok());
    REQUIRE(hs.value() == ds.value());  // same bookkeeping, same page ids
    DeviceBuffer dslots = upload(ds->data(), ds->size() * sizeof(Slot));
    for (int l = 0; l < cfg.num_layers; ++l) {
      std::vector<uint16_t> k(size_t(n) * row), v(size_t(n) * row);
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = float_to_bf16(hashed_value(uint64_t(key * 100 + l) * 1000003 + i));
        v[i] = float_to_bf16(hashed_value(uint64_t(key * 100 + l + 50) * 1000003 + i));
      }
      AppendKvParams a = cache_append_params(host, l, k.data(), v.data(), hs->data(), n);
      REQUIRE(append_kv(a).ok());
      DeviceBuffer dk = upload(k.data(), k.size() * 2), dv = upload(v.data(), v.size() * 2);
      a.device = Device::kCuda;
      a.k_new.data = dk.data();
      a.v_new.data = dv.data();
      a.slots = static_cast<const Slot*>(dslots.data());
      a.k_pages = dev.k_pages(l);
      a.v_pages = dev.v_pages(l);
      const Status st = append_kv(a);
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      REQUIRE(device_synchronize().ok());
    }
  };
  const int s0 = host.create_sequence();
  REQUIRE(dev.create_sequence() == s0);
  append_both(s0, 37, 1);
  const int s1 = host.fork_sequence(s0).value();
  REQUIRE(dev.fork_sequence(s0).value() == s1);
  append_both(s1, 5, 2);  // copy-on-write on the device: cudaMemcpy of a page, both layers, K and V
  append_both(s0, 20, 3);
  const int s2 = host.fork_sequence(s1).value();
  REQUIRE(dev.fork_sequence(s1).value() == s2);
  REQUIRE(host.truncate(s2, 40).ok());
  REQUIRE(dev.truncate(s2, 40).ok());
  append_both(s2, 3, 4);  // into the page it shares with s1: copied again
  const std::vector<int> seqs = {s0, s1, s2};
  for (int s : seqs) CHECK(host.block_table(s) == dev.block_table(s));
  CHECK(host.free_pages() == dev.free_pages());

  // Every position a sequence has written holds the same bytes on both sides.
  auto check_same_bytes = [&](const std::vector<int>& which) {
    for (int l = 0; l < cfg.num_layers; ++l) {
      CAPTURE(l);
      std::vector<uint16_t> v;
      const std::vector<uint16_t> k = download_pool(dev.k_pages(l), dev.v_pages(l), dev.config(), &v);
      const auto* hk = static_cast<const uint16_t*>(host.k_pages(l));
      const auto* hv = static_cast<const uint16_t*>(host.v_pages(l));
      for (int s : which)
        for (int pos = 0; pos < host.length(s); ++pos)
          for (int h = 0; h < H; ++h) {
            CAPTURE(s);
            CAPTURE(pos);
            const size_t at = ((size_t(host.block_table(s)[size_t(pos / P)]) * H + size_t(h)) * P + size_t(pos % P)) * D;
            REQUIRE(std::memcmp(&k[at], &hk[at], size_t(D) * 2) == 0);
            REQUIRE(std::memcmp(&v[at], &hv[at], size_t(D) * 2) == 0);
          }
    }
  };
  check_same_bytes(seqs);

  // What the engine does with it: grow (the device pools move, the held
  // pages are copied to the new ones) and a sequence's pages reserved up front.
  const void* old_k = dev.k_pages(0);
  REQUIRE(host.grow(16).ok());
  const Status grown = dev.grow(16);
  REQUIRE_MESSAGE(grown.ok(), grown.to_string());
  CHECK(dev.k_pages(0) != old_k);
  CHECK(dev.num_pages() == cfg.num_pages + 16);
  check_same_bytes(seqs);
  const int s3 = host.create_sequence();
  REQUIRE(dev.create_sequence() == s3);
  REQUIRE(host.reserve(s3, 100).ok());
  REQUIRE(dev.reserve(s3, 100).ok());
  const std::vector<int32_t> reserved = dev.block_table(s3);
  append_both(s3, 70, 5);
  append_both(s3, 30, 6);
  CHECK(dev.block_table(s3) == reserved);
  CHECK(host.block_table(s3) == reserved);
  check_same_bytes({s0, s1, s2, s3});

  // Attention over the device cache against the reference over the host cache.
  const int B = 3, Hq = 8, Lq = 3;
  const CacheTables cached = cache_tables(host, seqs);
  const std::vector<int32_t>& tables = cached.tables;
  const std::vector<int32_t>& lens = cached.lens;
  std::vector<uint16_t> q(size_t(B) * Lq * Hq * D), o(q.size(), 0xFFFF);
  for (size_t i = 0; i < q.size(); ++i) q[i] = float_to_bf16(hashed_value(i + 99));
  std::vector<float> ref(q.size()), ref_lse(size_t(B) * Hq * Lq);
  PagedAttentionParams p = cache_attention_params(host, 1, cached, q.data(), o.data(), Hq, Lq);
  REQUIRE(cpu::paged_attention_reference(p, ref.data(), ref_lse.data()).ok());

  DeviceBuffer dq = upload(q.data(), q.size() * 2), dout = upload(o.data(), o.size() * 2);
  DeviceBuffer dt = upload(tables.data(), tables.size() * 4), dl = upload(lens.data(), lens.size() * 4);
  p.device = Device::kCuda;
  p.q.data = dq.data();
  p.o.data = dout.data();
  p.k_pages = dev.k_pages(1);
  p.v_pages = dev.v_pages(1);
  p.block_tables = static_cast<const int32_t*>(dt.data());
  p.kv_lens = static_cast<const int32_t*>(dl.data());
  auto plan = plan_paged_attention(p);
  REQUIRE(plan.ok());
  DeviceBuffer workspace;
  if (plan->workspace_bytes > 0) workspace = std::move(DeviceBuffer::allocate(plan->workspace_bytes).value());
  p.workspace = workspace.data();
  p.workspace_bytes = workspace.size();
  const Status st = paged_attention(p);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  REQUIRE(device_synchronize().ok());
  REQUIRE(dout.download(o.data(), o.size() * 2).ok());
  const double bound = (2 * std::ldexp(1.0, -8) + std::ldexp(1.0, -12)) * 2.5;  // |v| <= 2.5
  for (size_t i = 0; i < o.size(); ++i) {
    CAPTURE(i);
    REQUIRE(std::fabs(bf16_to_float(o[i]) - ref[i]) <= bound);
  }
}
