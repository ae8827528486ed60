// `flashscope-cli bench prefill`: times prefill kernels on one shape.
// Each launch is timed alone with CUDA events after a warm-up; the median of
// the runs is reported (the minimum too), as TFLOPS (4·B·Hq·Lq·Lk·D, halved
// when causal: the count PyTorch and FlashAttention use) and % of the
// device's SOL from `flashscope-cli info`. With a sliding window the FLOPs
// are those of the (query, key) pairs the window lets in (prefill_flops).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/half.hpp"
#include "flashscope/paged_attention.hpp"
#include "flashscope_lab/lab.hpp"
#include "json_line.hpp"
#include "random_inputs.hpp"
#include "viz/throughput.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli bench prefill [--batch B] [--q-heads H] [--kv-heads HK] [--q-len LQ] [--kv-len LK]\n"
    "                                    [--head-dim D] [--causal] [--window W] [--window-right R] [--softcap C]\n"
    "                                    [--kernel v1..v6|hopper|auto|all] [--dtype bf16|fp16]\n"
    "                                    [--device cuda|cpu] [--iters N] [--warmup N] [--no-workspace] [--json]\n"
    "defaults: the seed shape 1 x 8 heads x 4096 x 8192 x 128, kernel auto, bf16, 50 iterations after 5 warm-ups\n"
    "--no-workspace runs without PrefillParams::workspace (non-causal hopper launches then split no tiles)\n"
    "--window W: the query at position i sees keys >= i - W (window_left); --window-right R: keys <= i + R\n"
    "(non-causal); --softcap C: logits capped at C*tanh(s/C). FLOPs count only the pairs the window lets in\n";

struct Timing {
  double median_ms = 0, min_ms = 0;
  // Calls back to back on the stream (CUDA): the median over batches of a
  // batch's time per call. Host work between calls overlaps the GPU's here,
  // so this is the kernel's own pace, where a call alone between two events
  // also holds whatever the host did before the launch reached the GPU.
  double stream_ms = 0;
};

using viz::median;

Result<Timing> time_runs(const PrefillParams& p, int warmup, int iters) {
  std::vector<double> ms;
  double stream_ms = 0;
  for (int i = 0; i < warmup; ++i) FLASHSCOPE_RETURN_IF_ERROR(prefill(p));
  if (p.device == Device::kCuda) {
    FLASHSCOPE_RETURN_IF_ERROR(device_synchronize());
    EventTimer timer;
    for (int i = 0; i < iters; ++i) {
      FLASHSCOPE_RETURN_IF_ERROR(timer.start(p.stream));
      FLASHSCOPE_RETURN_IF_ERROR(prefill(p));
      FLASHSCOPE_RETURN_IF_ERROR(timer.stop(p.stream));
      auto t = timer.elapsed_ms();
      if (!t.ok()) return t.status();
      ms.push_back(t.value());
    }
    FLASHSCOPE_RETURN_IF_ERROR(device_synchronize());
    constexpr int kBatches = 5, kPerBatch = 10;
    std::vector<double> per_call;
    for (int b = 0; b < kBatches; ++b) {
      FLASHSCOPE_RETURN_IF_ERROR(timer.start(p.stream));
      for (int i = 0; i < kPerBatch; ++i) FLASHSCOPE_RETURN_IF_ERROR(prefill(p));
      FLASHSCOPE_RETURN_IF_ERROR(timer.stop(p.stream));
      auto t = timer.elapsed_ms();
      if (!t.ok()) return t.status();
      per_call.push_back(t.value() / kPerBatch);
    }
    stream_ms = median(per_call);
  } else {
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      FLASHSCOPE_RETURN_IF_ERROR(prefill(p));
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  Timing t;
  t.median_ms = median(ms);
  t.min_ms = *std::min_element(ms.begin(), ms.end());
  t.stream_ms = stream_ms > 0 ? stream_ms : t.median_ms;  // the CPU path runs one call at a time anyway
  return t;
}

constexpr const char* kDecodeUsage =
    "usage: flashscope-cli bench decode [--batch B] [--q-heads H] [--kv-heads HK] [--context L] [--head-dim D]\n"
    "                                   [--page-size P] [--q-len N] [--splits auto|N[,N...]] [--dtype bf16|fp16]\n"
    "                                   [--window W] [--softcap C] [--kernel auto|hopper] [--iters N] [--warmup N]\n"
    "                                   [--copy-ceiling] [--json]\n"
    "defaults: B1, 32/8 heads, context 4096, D128, page 16, one new token, auto splits\n"
    "--splits 1,2,4 times each split count in turn over the same pages (one line each)\n"
    "--copy-ceiling also times a 1 GiB device-to-device copy (read + written bytes per second) and gives\n"
    "each step's K/V GB/s as a fraction of it: the ceiling a streaming kernel can reach on this device\n"
    "--kernel hopper runs chunked prefill (more than 64 rows per kv-head) through the sm_90a kernel\n"
    "K/V bytes/s counts each sequence's K and V read once; pages are scattered in a random order\n"
    "--window W (window_left): each new token sees the W keys before it; bytes count only the keys some\n"
    "new token's window holds (W + q_len, at most the context)\n";

int time_decode(const PagedAttentionParams& p, const PagedAttentionPlan& plan, const DeviceInfo& dev, int context,
                int iters, int warmup, const std::string& dtype_s, double copy_gbps, bool json);

// `bench decode`: paged attention of q_len new tokens per sequence against
// `context` cached ones, pages handed out in a shuffled order so the block
// tables are as fragmented as a long-running server's.
int bench_decode(int argc, char** argv) {
  Args args(argc, argv,
            {"batch", "q-heads", "kv-heads", "context", "head-dim", "page-size", "q-len", "splits", "dtype", "iters",
             "warmup", "kernel", "window", "softcap"},
            {"json", "help", "copy-ceiling"});
  if (args.has("help")) {
    std::printf("%s", kDecodeUsage);
    return 0;
  }
  PagedAttentionParams p;
  p.batch = int(args.get_int("batch", 1));
  p.q_heads = int(args.get_int("q-heads", 32));
  p.kv_heads = int(args.get_int("kv-heads", 8));
  const int context = int(args.get_int("context", 4096));
  p.head_dim = int(args.get_int("head-dim", 128));
  p.page_size = int(args.get_int("page-size", 16));
  p.q_len = int(args.get_int("q-len", 1));
  p.window_left = int(args.get_int_in("window", -1, -1, 0x7fffffff));
  p.softcap = float(args.get_double("softcap", 0.0));
  const std::string splits_s = args.get("splits", "auto");
  const int iters = int(args.get_int("iters", 100));
  const int warmup = int(args.get_int("warmup", 10));
  const std::string dtype_s = args.get("dtype", "bf16");
  if (!args.ok() || (dtype_s != "bf16" && dtype_s != "fp16") || iters < 1 || warmup < 0 || context < 1) {
    std::fprintf(stderr, "flashscope-cli bench decode: %s\n%s", args.ok() ? "bad option value" : args.error().c_str(),
                 kDecodeUsage);
    return 2;
  }
  const std::string kernel_s = args.get("kernel", "auto");
  if (kernel_s != "auto" && kernel_s != "hopper") {
    std::fprintf(stderr, "flashscope-cli bench decode: --kernel must be auto or hopper\n%s", kDecodeUsage);
    return 2;
  }
  p.kernel = kernel_s == "hopper" ? PrefillKernel::kHopper : PrefillKernel::kAuto;
  std::vector<int> split_counts;  // 0: the plan's choice
  if (splits_s == "auto") {
    split_counts.push_back(0);
  } else {
    for (size_t at = 0; at <= splits_s.size();) {
      const size_t comma = std::min(splits_s.find(',', at), splits_s.size());
      const int n = std::atoi(splits_s.substr(at, comma - at).c_str());
      if (n < 1) {
        std::fprintf(stderr, "flashscope-cli bench decode: --splits must be auto or a list of counts >= 1\n%s",
                     kDecodeUsage);
        return 2;
      }
      split_counts.push_back(n);
      at = comma + 1;
    }
  }
  p.num_splits = split_counts.front();
  p.dtype = dtype_s == "bf16" ? DType::kBF16 : DType::kFP16;
  p.device = Device::kCuda;
  p.max_kv_len = context;
  if (!cuda_available()) {
    std::fprintf(stderr, "flashscope-cli bench decode: needs a CUDA device\n");
    return 1;
  }
  auto info = query_device(0);
  if (!info.ok()) {
    std::fprintf(stderr, "flashscope-cli bench decode: %s\n", info.status().to_string().c_str());
    return 1;
  }
  const int pages_per_seq = (context + p.page_size - 1) / std::max(p.page_size, 1);
  const int num_pages = p.batch * pages_per_seq;
  p.block_table_stride = pages_per_seq;
  std::vector<int32_t> table(static_cast<size_t>(num_pages));
  std::vector<int32_t> lens(static_cast<size_t>(p.batch), context);
  for (int i = 0; i < num_pages; ++i) table[size_t(i)] = i;
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  const size_t page_elems = size_t(p.kv_heads) * p.page_size * p.head_dim;
  const size_t q_elems = size_t(p.batch) * p.q_len * p.q_heads * p.head_dim;
  p.q = bshd(reinterpret_cast<void*>(16), p.q_len, p.q_heads, p.head_dim);
  p.o = p.q;
  p.k_pages = p.v_pages = reinterpret_cast<void*>(16);
  p.block_tables = table.data();
  p.kv_lens = lens.data();
  if (Status s = validate(p); !s.ok()) {
    std::fprintf(stderr, "flashscope-cli bench decode: %s\n", s.to_string().c_str());
    return 1;
  }
  size_t workspace_bytes = 16;
  for (int n : split_counts) {
    p.num_splits = n;
    auto plan = plan_paged_attention(p);
    if (!plan.ok()) {
      std::fprintf(stderr, "flashscope-cli bench decode: %s\n", plan.status().to_string().c_str());
      return 1;
    }
    workspace_bytes = std::max(workspace_bytes, plan->workspace_bytes);
  }
  // Random pools: the kernels must not see zeros (they would hide unwritten data and run unusually fast).
  DeviceBuffer dq, dout, dk, dv, dtable, dlens, dws;
  // Large pools repeat one random block (an odd length, so the repeats do not
  // line up with pages): drawing 8 GB of normals on the host took minutes.
  auto fill = [&](DeviceBuffer& b, size_t elems, uint64_t seed) -> Status {
    auto r = DeviceBuffer::allocate(elems * 2);
    if (!r.ok()) return r.status();
    b = std::move(r.value());
    const auto h = random_halves(std::min<size_t>(elems, (size_t(1) << 22) + 37), p.dtype, seed);
    for (size_t at = 0; at < elems; at += h.size())
      FLASHSCOPE_RETURN_IF_ERROR(b.upload(h.data(), std::min(h.size(), elems - at) * 2, at * 2));
    return Status{};
  };
  auto raw = [&](DeviceBuffer& b, const void* h, size_t bytes) -> Status {
    auto r = DeviceBuffer::allocate(bytes);
    if (!r.ok()) return r.status();
    b = std::move(r.value());
    return h ? b.upload(h, bytes) : Status{};
  };
  for (Status s : {fill(dq, q_elems, 1), fill(dout, q_elems, 2), fill(dk, page_elems * num_pages, 3),
                   fill(dv, page_elems * num_pages, 4), raw(dtable, table.data(), table.size() * 4),
                   raw(dlens, lens.data(), lens.size() * 4), raw(dws, nullptr, workspace_bytes)})
    if (!s.ok()) {
      std::fprintf(stderr, "flashscope-cli bench decode: %s\n", s.to_string().c_str());
      return 1;
    }
  p.q.data = dq.data();
  p.o.data = dout.data();
  p.k_pages = dk.data();
  p.v_pages = dv.data();
  p.block_tables = static_cast<const int32_t*>(dtable.data());
  p.kv_lens = static_cast<const int32_t*>(dlens.data());
  p.workspace = dws.data();
  p.workspace_bytes = dws.size();

  double copy_gbps = 0;
  if (args.has("copy-ceiling")) {
    auto c = measure_copy_gbps();
    if (!c.ok()) {
      std::fprintf(stderr, "flashscope-cli bench decode: %s\n", c.status().to_string().c_str());
      return 1;
    }
    copy_gbps = *c;
  }
  for (int n : split_counts) {
    p.num_splits = n;
    auto plan = plan_paged_attention(p);
    if (!plan.ok()) {
      std::fprintf(stderr, "flashscope-cli bench decode: %s\n", plan.status().to_string().c_str());
      return 1;
    }
    if (int rc = time_decode(p, *plan, *info, context, iters, warmup, dtype_s, copy_gbps, args.has("json")); rc != 0)
      return rc;
  }
  return 0;
}

// Times one plan of `bench decode` over the filled pools and prints its line.
int time_decode(const PagedAttentionParams& p, const PagedAttentionPlan& plan, const DeviceInfo& dev, int context,
                int iters, int warmup, const std::string& dtype_s, double copy_gbps, bool json) {
  std::vector<double> us;
  EventTimer timer;
  for (int i = 0; i < warmup + iters; ++i) {
    Status s = timer.start(p.stream);
    if (s.ok()) s = paged_attention(p);
    if (s.ok()) s = timer.stop(p.stream);
    auto t = s.ok() ? timer.elapsed_ms() : Result<float>(s);
    if (!t.ok()) {
      std::fprintf(stderr, "flashscope-cli bench decode: %s\n", t.status().to_string().c_str());
      return 1;
    }
    if (i >= warmup) us.push_back(t.value() * 1e3);
  }
  const double med = median(us);
  // Steps back to back, as an engine runs them: ten launches between two
  // events, so one launch's start overlaps the last one's tail.
  constexpr int kBackToBack = 10;
  std::vector<double> us_stream;
  for (int b = 0; b < std::max(3, iters / kBackToBack); ++b) {
    Status s = timer.start(p.stream);
    for (int i = 0; i < kBackToBack && s.ok(); ++i) s = paged_attention(p);
    if (s.ok()) s = timer.stop(p.stream);
    auto t = s.ok() ? timer.elapsed_ms() : Result<float>(s);
    if (!t.ok()) {
      std::fprintf(stderr, "flashscope-cli bench decode: %s\n", t.status().to_string().c_str());
      return 1;
    }
    us_stream.push_back(t.value() * 1e3 / kBackToBack);
  }
  const double med_stream = median(us_stream);
  // The keys some new token sees: the window's W before the first new token, and the new ones.
  const double keys_read = p.window_left >= 0 ? std::min(double(context), double(p.window_left) + p.q_len) : context;
  const double bytes = 2.0 * p.batch * keys_read * p.kv_heads * p.head_dim * 2;
  const double gbps = bytes / (med * 1e-6) / 1e9;
  const double gbps_stream = bytes / (med_stream * 1e-6) / 1e9;
  const double pct = 100.0 * gbps / dev.sol_dram_gbps;
  if (json) {
    print_json_line({{"kind", "decode"},
                     {"batch", p.batch},
                     {"q_heads", p.q_heads},
                     {"kv_heads", p.kv_heads},
                     {"context", context},
                     {"head_dim", p.head_dim},
                     {"page_size", p.page_size},
                     {"q_len", p.q_len},
                     {"window_left", p.window_left},
                     {"softcap", p.softcap},
                     {"splits", plan.num_splits},
                     {"dtype", dtype_s},
                     {"us", rounded(med, 3)},
                     {"us_min", rounded(*std::min_element(us.begin(), us.end()), 3)},
                     {"gbps", rounded(gbps, 1)},
                     {"us_stream", rounded(med_stream, 3)},
                     {"gbps_stream", rounded(gbps_stream, 1)},
                     {"sol_gbps", std::llround(dev.sol_dram_gbps)},
                     {"sol_pct", rounded(pct, 2)},
                     {"copy_gbps", rounded(copy_gbps, 1)},
                     {"iters", iters},
                     {"device", dev.name}});
  } else {
    std::printf("decode  B=%d Hq=%d Hkv=%d context=%d D=%d page=%d q_len=%d window=%d softcap=%g %s on %s\n", p.batch,
                p.q_heads, p.kv_heads, context, p.head_dim, p.page_size, p.q_len, p.window_left, double(p.softcap),
                dtype_s.c_str(), dev.name.c_str());
    std::printf("  splits %d; median of %d runs after %d warm-ups: %.2f us, K/V %.0f GB/s = %.1f%% of DRAM SOL (%.0f GB/s)\n",
                plan.num_splits, iters, warmup, med, gbps, pct, dev.sol_dram_gbps);
    std::printf("  back to back (%d launches between events): %.2f us a step, K/V %.0f GB/s\n", kBackToBack, med_stream,
                gbps_stream);
    if (copy_gbps > 0)
      std::printf("  copy ceiling %.0f GB/s (1 GiB device-to-device, read + written): K/V at %.2f of it alone, %.2f back to back\n",
                  copy_gbps, gbps / copy_gbps, gbps_stream / copy_gbps);
  }
  return 0;
}

// bench prefill's options, read and checked.
struct PrefillOptions {
  PrefillParams p;  // shape, dtype and device; its tensors are placed later
  int iters = 0, warmup = 0;
  std::string dtype_s;
  std::vector<PrefillKernel> kernels;
  bool json = false, workspace = true;
};

// Reads bench prefill's arguments into *o. Returns -1 to go on, else the
// exit code: 0 after --help, 2 for a bad option.
int parse_prefill_options(int argc, char** argv, PrefillOptions* o) {
  Args args(argc, argv,
            {"batch", "q-heads", "kv-heads", "q-len", "kv-len", "head-dim", "kernel", "dtype", "device", "iters",
             "warmup", "window", "window-right", "softcap"},
            {"causal", "json", "help", "no-workspace"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  PrefillParams& p = o->p;
  p.batch = int(args.get_int("batch", 1));
  p.q_heads = int(args.get_int("q-heads", 8));
  p.kv_heads = int(args.get_int("kv-heads", p.q_heads));
  p.q_len = int(args.get_int("q-len", 4096));
  p.kv_len = int(args.get_int("kv-len", 8192));
  p.head_dim = int(args.get_int("head-dim", 128));
  p.causal = args.has("causal");
  p.window_left = int(args.get_int_in("window", -1, -1, 0x7fffffff));
  p.window_right = int(args.get_int_in("window-right", -1, -1, 0x7fffffff));
  p.softcap = float(args.get_double("softcap", 0.0));
  o->iters = int(args.get_int("iters", 50));
  o->warmup = int(args.get_int("warmup", 5));
  o->dtype_s = args.get("dtype", "bf16");
  const std::string device_s = args.get("device", cuda_available() ? "cuda" : "cpu");
  const std::string kernel_s = args.get("kernel", "auto");
  if (!args.ok()) {
    std::fprintf(stderr, "flashscope-cli bench prefill: %s\n%s", args.error().c_str(), kUsage);
    return 2;
  }
  if (o->dtype_s != "bf16" && o->dtype_s != "fp16") {
    std::fprintf(stderr, "flashscope-cli bench prefill: --dtype must be bf16 or fp16\n");
    return 2;
  }
  if (device_s != "cuda" && device_s != "cpu") {
    std::fprintf(stderr, "flashscope-cli bench prefill: --device must be cuda or cpu\n");
    return 2;
  }
  if (o->iters < 1 || o->warmup < 0) {
    std::fprintf(stderr, "flashscope-cli bench prefill: --iters must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  p.dtype = o->dtype_s == "bf16" ? DType::kBF16 : DType::kFP16;
  p.device = device_s == "cuda" ? Device::kCuda : Device::kCpu;

  if (kernel_s == "all") {
    o->kernels = lab::ladder_kernels();
    if (prefill_kernel_runnable(PrefillKernel::kHopper)) o->kernels.push_back(PrefillKernel::kHopper);
    o->kernels.push_back(PrefillKernel::kAuto);
  } else {
    PrefillKernel k;
    if (!parse_prefill_kernel(kernel_s, &k)) {
      std::fprintf(stderr, "flashscope-cli bench prefill: --kernel must be v1..v6, hopper, auto or all\n");
      return 2;
    }
    o->kernels.push_back(k);
  }
  if (p.device == Device::kCpu) o->kernels = {PrefillKernel::kAuto};
  o->json = args.has("json");
  o->workspace = !args.has("no-workspace");
  return -1;
}

// The inputs the runs read: seeded random q, k and v on the host, and for a
// CUDA run their device copies and the device's name and SOL.
struct PrefillInputs {
  std::vector<uint16_t> hq, hk, hv, ho;
  DeviceBuffer dq, dk, dv, dout, dws;
  std::string device_name = "cpu";
  double sol_tflops = 0;
};

// Fills *in and points o->p's tensors at it; on CUDA also one zero-filled
// workspace, as large as any of the kernels asks (none with --no-workspace).
Status place_prefill_inputs(PrefillOptions* o, PrefillInputs* in) {
  PrefillParams& p = o->p;
  const size_t q_elems = size_t(p.batch) * p.q_len * p.q_heads * p.head_dim;
  const size_t kv_elems = size_t(p.batch) * p.kv_len * p.kv_heads * p.head_dim;
  in->hq = random_halves(q_elems, p.dtype, 1);
  in->hk = random_halves(kv_elems, p.dtype, 2);
  in->hv = random_halves(kv_elems, p.dtype, 3);
  in->ho.assign(q_elems, 0);
  if (p.device != Device::kCuda) {
    p.q.data = in->hq.data();
    p.k.data = in->hk.data();
    p.v.data = in->hv.data();
    p.o.data = in->ho.data();
    return Status::ok_status();
  }
  auto info = query_device(0);
  if (!info.ok()) return info.status();
  in->device_name = info->name;
  in->sol_tflops = info->sol_tflops;
  auto alloc = [&](DeviceBuffer& b, const std::vector<uint16_t>& h) {
    auto r = DeviceBuffer::allocate(h.size() * 2);
    if (!r.ok()) return r.status();
    b = std::move(r.value());
    return b.upload(h.data(), h.size() * 2);
  };
  for (auto [buf, host] : {std::pair{&in->dq, &in->hq}, {&in->dk, &in->hk}, {&in->dv, &in->hv}, {&in->dout, &in->ho}}) {
    FLASHSCOPE_RETURN_IF_ERROR(alloc(*buf, *host));
  }
  p.q.data = in->dq.data();
  p.k.data = in->dk.data();
  p.v.data = in->dv.data();
  p.o.data = in->dout.data();
  size_t ws_bytes = 0;
  for (PrefillKernel k : o->kernels) {
    p.kernel = k;
    ws_bytes = std::max(ws_bytes, prefill_workspace_bytes(p));
  }
  if (ws_bytes > 0 && o->workspace) {
    auto r = DeviceBuffer::allocate(ws_bytes);
    if (!r.ok()) return r.status();
    in->dws = std::move(r.value());
    FLASHSCOPE_RETURN_IF_ERROR(in->dws.fill_bytes(0));
    p.workspace = in->dws.data();
    p.workspace_bytes = in->dws.size();
  }
  return Status::ok_status();
}

void print_prefill_header(const PrefillOptions& o, const PrefillInputs& in, double flops) {
  const PrefillParams& p = o.p;
  const bool window = p.window_left >= 0 || p.window_right >= 0;
  std::printf("prefill  B=%d Hq=%d Hkv=%d Lq=%d Lk=%d D=%d %s window=(%d,%d) softcap=%g %s on %s\n", p.batch,
              p.q_heads, p.kv_heads, p.q_len, p.kv_len, p.head_dim, p.causal ? "causal" : "non-causal",
              p.window_left, p.window_right, double(p.softcap), o.dtype_s.c_str(), in.device_name.c_str());
  std::printf("  FLOPs counted: %s = %.3g; median of %d runs after %d warm-ups, each alone between\n"
              "  two events; 'stream': the median of 5 batches of 10 calls back to back, per call\n",
              window     ? "4*D*Hq*(query, key) pairs in the window"
              : p.causal ? "4*B*Hq*Lq*Lk*D / 2 (causal)"
                         : "4*B*Hq*Lq*Lk*D",
              flops, o.iters, o.warmup);
  std::printf("  %-8s %10s %10s %9s %8s %10s %9s\n", "kernel", "ms", "min ms", "TFLOPS", "% SOL", "stream ms",
              "TFLOPS");
}

// The FLOPs of the tiles the Hopper kernel computes, causal or windowed: each
// q-tile of block_q rows visits the keys from its first row's window start
// to its last row's end in whole tiles of block_kv, masked ones included
// (the dense view's range in attention_views.cuh, narrowed as
// hopper_schedule.cuh's `windowed` does: the two are device code, so this
// host count restates them; its window start is unaligned, unlike
// window_range.h's sm80 one). "TFLOPS counted on
// the computed tiles": what the tensor cores did, where the pairs kept are
// fewer (the diagonal's and the window edges' masked halves).
double hopper_tile_flops(const PrefillParams& p, int block_q, int block_kv) {
  const int64_t diag = int64_t(p.kv_len) - p.q_len;
  int64_t key_tiles = 0;
  for (int64_t q0 = 0; q0 < p.q_len; q0 += block_q) {
    int64_t begin = 0;
    int64_t end = p.causal ? std::min<int64_t>(p.kv_len, std::max<int64_t>(0, q0 + block_q + diag)) : p.kv_len;
    if (p.window_left >= 0) begin = std::max<int64_t>(begin, q0 + diag - p.window_left);
    if (!p.causal && p.window_right >= 0)
      end = std::min<int64_t>(end, std::min<int64_t>(q0 + block_q, p.q_len) + diag + p.window_right);
    if (end > begin) key_tiles += (end - begin + block_kv - 1) / block_kv;
  }
  return 4.0 * double(key_tiles) * block_q * block_kv * p.head_dim * p.q_heads * p.batch;
}

// Times kernel k and prints its line (JSON or the table's); false when it failed.
bool bench_prefill_kernel(PrefillOptions* o, const PrefillInputs& in, PrefillKernel k, double flops) {
  PrefillParams& p = o->p;
  p.kernel = k;
  auto t = time_runs(p, o->warmup, o->iters);
  const std::string resolved = prefill_kernel_name(resolve_prefill_kernel(p));
  const std::string name = p.device == Device::kCpu ? "cpu-tiled" : prefill_kernel_name(k);
  if (!t.ok()) {
    if (o->json)
      print_json_line({{"kind", "prefill"},
                       {"kernel", name},
                       {"status", status_code_name(t.status().code())},
                       {"error", t.status().message()}});
    else
      std::printf("  %-8s failed: %s\n", name.c_str(), t.status().to_string().c_str());
    return false;
  }
  const double tflops = flops / (t->median_ms * 1e-3) / 1e12;
  const double stream_tflops = flops / (t->stream_ms * 1e-3) / 1e12;
  const double pct = in.sol_tflops > 0 ? 100.0 * tflops / in.sol_tflops : 0.0;
  // Causal or windowed Hopper runs: TFLOPS on the computed tiles as well (0: not such a run).
  double tile_tflops = 0, tile_stream_tflops = 0;
  int block_q = 0, block_kv = 0;
  if (p.device == Device::kCuda && resolve_prefill_kernel(p) == PrefillKernel::kHopper && p.cu_seqlens_q == nullptr &&
      (p.causal || p.window_left >= 0 || p.window_right >= 0)) {
    if (auto plan = plan_prefill(p); plan.ok()) {
      block_q = plan->block_q;
      block_kv = plan->block_kv;
      const double tile_flops = hopper_tile_flops(p, block_q, block_kv);
      tile_tflops = tile_flops / (t->median_ms * 1e-3) / 1e12;
      tile_stream_tflops = tile_flops / (t->stream_ms * 1e-3) / 1e12;
    }
  }
  if (o->json) {
    print_json_line({{"kind", "prefill"},
                     {"kernel", name},
                     {"resolved", resolved},
                     {"batch", p.batch},
                     {"q_heads", p.q_heads},
                     {"kv_heads", p.kv_heads},
                     {"q_len", p.q_len},
                     {"kv_len", p.kv_len},
                     {"head_dim", p.head_dim},
                     {"causal", p.causal},
                     {"window_left", p.window_left},
                     {"window_right", p.window_right},
                     {"softcap", p.softcap},
                     {"dtype", o->dtype_s},
                     {"ms", rounded(t->median_ms, 5)},
                     {"ms_min", rounded(t->min_ms, 5)},
                     {"tflops", rounded(tflops, 2)},
                     {"sol_tflops", rounded(in.sol_tflops, 1)},
                     {"sol_pct", rounded(pct, 2)},
                     {"iters", o->iters},
                     {"device", in.device_name},
                     {"workspace_bytes", p.workspace != nullptr ? prefill_workspace_bytes(p) : size_t(0)},
                     {"ms_stream", rounded(t->stream_ms, 5)},
                     {"tflops_stream", rounded(stream_tflops, 2)},
                     {"tile_tflops", rounded(tile_tflops, 2)},
                     {"tile_tflops_stream", rounded(tile_stream_tflops, 2)},
                     {"block_q", block_q},
                     {"block_kv", block_kv}});
  } else {
    std::string label = name;
    if (k == PrefillKernel::kAuto && p.device == Device::kCuda) label += "=" + resolved;
    std::printf("  %-8s %10.4f %10.4f %9.1f %7.1f%% %10.4f %9.1f\n", label.c_str(), t->median_ms, t->min_ms, tflops,
                pct, t->stream_ms, stream_tflops);
    if (tile_tflops > 0)
      std::printf("  %-8s %21s %9.1f %8s %10s %9.1f   (on the computed %dx%d tiles)\n", "", "", tile_tflops, "", "",
                  tile_stream_tflops, block_q, block_kv);
  }
  std::fflush(stdout);
  return true;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "decode") return bench_decode(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "e2e") return cmd_bench_e2e(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "capture") return cmd_bench_capture(argc - 1, argv + 1);
  if (argc < 1 || std::string(argv[0]) != "prefill") {
    std::fprintf(stderr, "flashscope-cli bench: expected 'prefill', 'decode', 'e2e' or 'capture' (bench e2e --help)\n%s%s",
                 kUsage, kDecodeUsage);
    return 2;
  }
  PrefillOptions o;
  if (const int rc = parse_prefill_options(argc - 1, argv + 1, &o); rc >= 0) return rc;
  PrefillParams& p = o.p;

  // Shapes first: a bad one is reported before any allocation.
  p.q = bshd(reinterpret_cast<void*>(16), p.q_len, p.q_heads, p.head_dim);
  p.k = bshd(reinterpret_cast<void*>(16), p.kv_len, p.kv_heads, p.head_dim);
  p.v = p.k;
  p.o = p.q;
  if (Status s = validate(p); !s.ok()) {
    std::fprintf(stderr, "flashscope-cli bench prefill: %s\n", s.to_string().c_str());
    return 1;
  }
  PrefillInputs in;
  if (Status s = place_prefill_inputs(&o, &in); !s.ok()) {
    std::fprintf(stderr, "flashscope-cli bench prefill: %s\n", s.to_string().c_str());
    return 1;
  }

  const double flops = prefill_flops(p);
  if (!o.json) print_prefill_header(o, in, flops);
  int failures = 0;
  for (PrefillKernel k : o.kernels) failures += !bench_prefill_kernel(&o, in, k, flops);
  return failures ? 1 : 0;
}

}  // namespace flashscope::cli
