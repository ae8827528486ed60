// `flashscope-cli trace`: capture a trace of one attention run to a file
// (docs/trace_format.md), or summarise a trace file.
//   trace prefill <shape> --out FILE   random bf16/fp16 inputs (seeded): the
//                                      CPU path with its probes, or with
//                                      --device cuda a kernel (v1..v6, auto)
//                                      built with its probes, on the GPU
//   trace decode <shape> --out FILE    paged decode with probes (GPU): pages
//                                      handed out shuffled, as `bench decode`
//   trace chat -p PROMPT --out FILE    a model's own attention over a chat turn (cmd_trace_chat.cpp)
//   trace info FILE                    what the file holds, in a few lines
#include <algorithm>
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
#include "flashscope/trace.hpp"
#include "random_inputs.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli trace prefill [--batch B] [--q-heads H] [--kv-heads HK] [--q-len LQ] [--kv-len LK]\n"
    "                                    [--head-dim D] [--causal] [--window W] [--window-right R] [--softcap C]\n"
    "                                    [--dtype bf16|fp16] [--device cpu|cuda]\n"
    "                                    [--kernel v1..v6|hopper|auto] [--trace-batch B] [--trace-head H]\n"
    "                                    [--rows R,R,...] [--sample-tiles QT:KT,...] [--seed N] --out FILE\n"
    "       flashscope-cli trace decode [--batch B] [--q-heads H] [--kv-heads HK] [--context L] [--head-dim D]\n"
    "                                   [--page-size P] [--q-len 1..8] [--splits auto|N] [--dtype bf16|fp16]\n"
    "                                   [--trace-batch B] [--trace-head H] [--rows R,R,...]\n"
    "                                   [--sample-tiles QT:KT,...] [--seed N] --out FILE\n"
    "       flashscope-cli trace chat [-m MODEL] -p PROMPT [--layer L] [--head H] --out FILE  (trace chat --help)\n"
    "       flashscope-cli trace info FILE\n"
    "prefill defaults: 1 x 8 heads x 1024 x 1024 x 128, bf16, device cpu, head 0 of sequence 0,\n"
    "          rows first, middle and last of the sequence, sample tile 0:0, seed 1\n"
    "decode defaults: B1, 32/8 heads, context 4096 (new tokens included), D128, page 16, one new token,\n"
    "          auto splits, causal, head 0 of sequence 0, every new token's row, sample tile 0:0, seed 1\n"
    "--device cuda and decode run the kernels built with their probes on the GPU (per-CTA SM and\n"
    "%globaltimer times, per-warp phase spans, softmax states, tile masses); they need a CUDA device.\n"
    "--kernel auto traces prefill()'s choice, or v5/v6 where that is the hopper kernel (no probes yet)\n"
    "--window W: sliding window (window_left; the tiles outside it are recorded skipped), --window-right R\n"
    "(non-causal), --softcap C: logits capped at C*tanh(s/C)\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "flashscope-cli trace: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "flashscope-cli trace: %s\n", msg.c_str());
  return 1;
}

// "1,2,3" → {1, 2, 3}; false on anything but non-negative integers.
bool parse_list(const std::string& s, char sep, std::vector<int32_t>* out) {
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(sep, at), s.size());
    const std::string item = s.substr(at, end - at);
    char* stop = nullptr;
    const long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v < 0 || v > 1 << 30) return false;
    out->push_back(static_cast<int32_t>(v));
    at = end + 1;
  }
  return true;
}

// "0:0,3:5" → tiles; false on malformed input.
bool parse_tiles(const std::string& s, std::vector<TileCoord>* out) {
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    std::vector<int32_t> pair;
    if (!parse_list(s.substr(at, end - at), ':', &pair) || pair.size() != 2) return false;
    out->push_back({pair[0], pair[1]});
    at = end + 1;
  }
  return true;
}

void print_summary(const Trace& t) {
  const TraceMeta& m = t.meta;
  // In 64 bits: q_len + block_q - 1 overflows an int for the longest valid q_len.
  const long long q_tiles = (static_cast<long long>(m.q_len) + m.block_q - 1) / m.block_q;
  const long long kv_tiles = (static_cast<long long>(m.kv_len) + m.block_kv - 1) / m.block_kv;
  std::printf("  %s by %s on %s (%s), kernel %s\n", m.kind == TraceKind::kDecode ? "decode" : "prefill",
              m.producer.c_str(), m.device_name.c_str(), m.backend.c_str(), m.kernel.c_str());
  std::printf("  B=%d Hq=%d Hkv=%d Lq=%d Lk=%d D=%d %s%s %s, scale %.6g\n", m.batch, m.q_heads, m.kv_heads, m.q_len,
              m.kv_len, m.head_dim, m.causal ? "causal" : "non-causal", m.varlen ? " varlen" : "",
              dtype_name(m.dtype), m.softmax_scale);
  std::printf("  tiles %d x %d: %lld q-tiles x %lld kv-tiles, %d warp%s per CTA", m.block_q, m.block_kv, q_tiles,
              kv_tiles, m.warps, m.warps == 1 ? "" : "s");
  if (m.page_size > 0) std::printf(", page %d", m.page_size);
  if (m.num_splits > 0) std::printf(", %d splits", m.num_splits);
  std::printf("\n  timer %s (%.6g ticks/us)\n", m.timer_unit == TimerUnit::kNanoseconds ? "ns" : "cycles",
              m.timer_ticks_per_us);
  if (m.elapsed_ms > 0) {
    const double tflops = m.flops / (m.elapsed_ms * 1e-3) / 1e12;
    std::printf("  run %.3f ms (probes included), %.4g FLOPs = %.3g TFLOPS", m.elapsed_ms, m.flops, tflops);
    if (m.sol_tflops > 0) std::printf(" = %.1f%% of SOL %.0f TFLOPS (%d SMs)", 100 * tflops / m.sol_tflops,
                                      m.sol_tflops, m.sm_count);
    std::printf("\n");
  }

  if (!t.ctas.empty()) {
    uint64_t first = t.ctas[0].start, last = t.ctas[0].end;
    double busy = 0;
    std::vector<uint32_t> sms;
    for (const CtaRecord& c : t.ctas) {
      first = std::min(first, c.start);
      last = std::max(last, c.end);
      busy += double(c.end - c.start);
      sms.push_back(c.sm);
    }
    std::sort(sms.begin(), sms.end());
    const size_t distinct = size_t(std::unique(sms.begin(), sms.end()) - sms.begin());
    const double us = double(last - first) / m.timer_ticks_per_us;
    std::printf("  %zu CTAs on %zu %s over %.1f us; mean CTA %.1f us\n", t.ctas.size(), distinct,
                m.backend == "cpu" ? "threads" : "SMs", us, busy / double(t.ctas.size()) / m.timer_ticks_per_us);
  }
  if (!t.spans.empty()) {
    double per_kind[kSpanKindCount] = {};
    double total = 0;
    for (const WarpSpanRecord& s : t.spans) {
      per_kind[static_cast<uint32_t>(s.kind)] += double(s.end - s.start);
      total += double(s.end - s.start);
    }
    std::printf("  %zu warp spans:", t.spans.size());
    for (uint32_t k = 0; k < kSpanKindCount; ++k) {
      if (per_kind[k] > 0)
        std::printf(" %s %.1f%%", span_kind_name(static_cast<SpanKind>(k)), total > 0 ? 100 * per_kind[k] / total : 0);
    }
    std::printf("\n");
  }
  if (m.dropped_spans > 0)
    std::printf("  %llu spans dropped: a warp's span storage was full\n", static_cast<unsigned long long>(m.dropped_spans));
  if (m.traced_head >= 0) std::printf("  traced: sequence %d, head %d\n", m.traced_batch, m.traced_head);
  if (!t.softmax.empty()) {
    std::vector<uint32_t> rows;
    for (const SoftmaxStateRecord& r : t.softmax) rows.push_back(r.row);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::printf("  %zu softmax states of %zu rows:", t.softmax.size(), rows.size());
    for (size_t i = 0; i < std::min<size_t>(rows.size(), 8); ++i) std::printf(" %u", rows[i]);
    std::printf("%s\n", rows.size() > 8 ? " ..." : "");
  }
  if (!t.tile_mass.empty()) {
    size_t skipped = 0;
    const TileMassRecord* top = &t.tile_mass[0];
    for (const TileMassRecord& r : t.tile_mass) {
      skipped += (r.flags & TileMassRecord::kSkipped) != 0;
      if (r.mass > top->mass) top = &r;
    }
    std::printf("  %zu tile masses, %zu skipped (causal or window); heaviest block (%u, %u) holds %.1f%% of its q-tile\n",
                t.tile_mass.size(), skipped, top->q_tile, top->kv_tile, 100.0 * top->mass);
  }
  if (!t.prob_samples.empty()) std::printf("  %zu probability samples\n", t.prob_samples.size());
  if (!t.tokens.empty()) {
    std::printf("  tokens of layer %d's attention: %zu keys, %zu rows; first keys:", t.tokens.layer,
                t.tokens.keys.size(), t.tokens.row_keys.size());
    for (size_t j = 0; j < t.tokens.keys.size() && j < 8; ++j) {
      std::string text;
      for (unsigned char ch : t.tokens.keys[j].text) text += ch < 0x20 ? '.' : static_cast<char>(ch);
      std::printf(" [%s]", text.c_str());
    }
    std::printf("\n");
  }
}

int trace_info(int argc, char** argv) {
  Args args(argc, argv, {}, {"help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!args.ok() || args.positional().size() != 1)
    return usage_error(args.ok() ? "trace info takes one FILE" : args.error());
  const std::string& path = args.positional()[0];
  auto t = read_trace(path);
  if (!t.ok()) return fail(t.status().to_string());
  std::printf("%s: FlashScope trace, format version %u\n", path.c_str(), kTraceFormatVersion);
  print_summary(t.value());
  return 0;
}

int trace_prefill(int argc, char** argv) {
  Args args(argc, argv,
            {"batch", "q-heads", "kv-heads", "q-len", "kv-len", "head-dim", "dtype", "device", "kernel",
             "trace-batch", "trace-head", "rows", "sample-tiles", "seed", "out", "window", "window-right", "softcap"},
            {"causal", "help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  PrefillParams p;
  p.batch = int(args.get_int("batch", 1));
  p.q_heads = int(args.get_int("q-heads", 8));
  p.kv_heads = int(args.get_int("kv-heads", p.q_heads));
  p.q_len = int(args.get_int("q-len", 1024));
  p.kv_len = int(args.get_int("kv-len", p.q_len));
  p.head_dim = int(args.get_int("head-dim", 128));
  p.causal = args.has("causal");
  p.window_left = int(args.get_int_in("window", -1, -1, 0x7fffffff));
  p.window_right = int(args.get_int_in("window-right", -1, -1, 0x7fffffff));
  p.softcap = float(args.get_double("softcap", 0.0));
  TraceOptions opt;
  opt.batch = int(args.get_int("trace-batch", 0));
  opt.head = int(args.get_int("trace-head", 0));
  const uint64_t seed = uint64_t(args.get_int("seed", 1));
  const std::string dtype_s = args.get("dtype", "bf16");
  const std::string device_s = args.get("device", "cpu");
  const std::string kernel_s = args.get("kernel", "auto");
  const std::string out = args.get("out");
  if (!args.ok()) return usage_error(args.error());
  if (!args.positional().empty()) return usage_error("unexpected argument '" + args.positional()[0] + "'");
  if (out.empty()) return usage_error("--out FILE is required");
  if (dtype_s != "bf16" && dtype_s != "fp16") return usage_error("--dtype must be bf16 or fp16");
  if (device_s != "cpu" && device_s != "cuda") return usage_error("--device must be cpu or cuda");
  PrefillKernel kernel;
  if (!parse_prefill_kernel(kernel_s, &kernel)) return usage_error("--kernel must be v1..v6, hopper or auto");
  if (args.has("rows") && !parse_list(args.get("rows"), ',', &opt.rows))
    return usage_error("--rows expects non-negative integers separated by commas");
  if (args.has("sample-tiles") && !parse_tiles(args.get("sample-tiles"), &opt.sample_tiles))
    return usage_error("--sample-tiles expects QT:KT pairs separated by commas");
  p.dtype = dtype_s == "bf16" ? DType::kBF16 : DType::kFP16;
  p.device = device_s == "cuda" ? Device::kCuda : Device::kCpu;
  p.kernel = kernel;

  // Shapes first: a bad one is reported before any allocation.
  p.q = bshd(reinterpret_cast<void*>(16), p.q_len, p.q_heads, p.head_dim);
  p.k = bshd(reinterpret_cast<void*>(16), p.kv_len, p.kv_heads, p.head_dim);
  p.v = p.k;
  p.o = p.q;
  if (Status s = validate(p); !s.ok()) return fail(s.to_string());
  if (p.device == Device::kCuda && !cuda_available())
    return fail("--device cuda: no CUDA device is present (or this build has no CUDA backend); "
                "use --device cpu for the CPU path");
  if (p.device == Device::kCpu && kernel != PrefillKernel::kAuto)
    return usage_error("--kernel selects a GPU kernel (with --device cuda); the CPU path is cpu-tiled");

  if (!args.has("rows") && p.q_len > 0) opt.rows = {0, p.q_len / 2, p.q_len - 1};
  if (!args.has("sample-tiles") && p.q_len > 0 && p.kv_len > 0) opt.sample_tiles = {{0, 0}};

  const size_t q_elems = size_t(p.batch) * p.q_len * p.q_heads * p.head_dim;
  const size_t kv_elems = size_t(p.batch) * p.kv_len * p.kv_heads * p.head_dim;
  const auto hq = random_halves(q_elems, p.dtype, seed), hk = random_halves(kv_elems, p.dtype, seed + 1),
             hv = random_halves(kv_elems, p.dtype, seed + 2);
  std::vector<uint16_t> ho(q_elems);
  Trace t;
  if (p.device == Device::kCuda) {
    DeviceBuffer dq, dk, dv, dout;
    for (auto [buf, host] : {std::pair{&dq, &hq}, {&dk, &hk}, {&dv, &hv}, {&dout, &ho}}) {
      auto r = DeviceBuffer::allocate(host->size() * 2);
      if (!r.ok()) return fail(r.status().to_string());
      *buf = std::move(r.value());
      if (Status s = buf->upload(host->data(), host->size() * 2); !s.ok()) return fail(s.to_string());
    }
    p.q.data = dq.data();
    p.k.data = dk.data();
    p.v.data = dv.data();
    p.o.data = dout.data();
    if (Status s = capture_cuda_prefill_trace(p, opt, &t); !s.ok()) return fail(s.to_string());
  } else {
    p.q.data = const_cast<uint16_t*>(hq.data());
    p.k.data = const_cast<uint16_t*>(hk.data());
    p.v.data = const_cast<uint16_t*>(hv.data());
    p.o.data = ho.data();
    if (Status s = capture_cpu_prefill_trace(p, opt, &t); !s.ok()) return fail(s.to_string());
  }
  t.meta.producer = "flashscope-cli";
  if (Status s = write_trace(t, out); !s.ok()) return fail(s.to_string());
  std::printf("%s: wrote a trace (format version %u)\n", out.c_str(), kTraceFormatVersion);
  print_summary(t);
  return 0;
}

// `trace decode`: paged attention of q_len new tokens per sequence against
// `context` cached ones (new tokens included), with the kernels' probes.
int trace_decode(int argc, char** argv) {
  Args args(argc, argv,
            {"batch", "q-heads", "kv-heads", "context", "head-dim", "page-size", "q-len", "splits", "dtype",
             "trace-batch", "trace-head", "rows", "sample-tiles", "seed", "out"},
            {"help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
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
  p.causal = true;
  TraceOptions opt;
  opt.batch = int(args.get_int("trace-batch", 0));
  opt.head = int(args.get_int("trace-head", 0));
  const uint64_t seed = uint64_t(args.get_int("seed", 1));
  const std::string splits_s = args.get("splits", "auto");
  const std::string dtype_s = args.get("dtype", "bf16");
  const std::string out = args.get("out");
  if (!args.ok()) return usage_error(args.error());
  if (!args.positional().empty()) return usage_error("unexpected argument '" + args.positional()[0] + "'");
  if (out.empty()) return usage_error("--out FILE is required");
  if (dtype_s != "bf16" && dtype_s != "fp16") return usage_error("--dtype must be bf16 or fp16");
  if (p.q_len < 1 || p.q_len > 8) return usage_error("--q-len must be 1..8 (new tokens per sequence)");
  if (context < p.q_len) return usage_error("--context counts the new tokens: it must be >= --q-len");
  if (p.batch < 1 || p.page_size < 1) return usage_error("--batch and --page-size must be >= 1");
  if (splits_s == "auto") {
    p.num_splits = 0;
  } else {
    std::vector<int32_t> n;
    if (!parse_list(splits_s, ',', &n) || n.size() != 1 || n[0] < 1) return usage_error("--splits must be auto or N >= 1");
    p.num_splits = n[0];
  }
  if (args.has("rows") && !parse_list(args.get("rows"), ',', &opt.rows))
    return usage_error("--rows expects non-negative integers separated by commas");
  if (args.has("sample-tiles") && !parse_tiles(args.get("sample-tiles"), &opt.sample_tiles))
    return usage_error("--sample-tiles expects QT:KT pairs separated by commas");
  p.dtype = dtype_s == "bf16" ? DType::kBF16 : DType::kFP16;
  p.device = Device::kCuda;
  p.max_kv_len = context;

  // Pages handed out in a shuffled order, as a long-running server's cache.
  const int pages_per_seq = (context + p.page_size - 1) / p.page_size;
  const int num_pages = p.batch * pages_per_seq;
  p.block_table_stride = pages_per_seq;
  p.num_pages = num_pages;
  std::vector<int32_t> table(static_cast<size_t>(num_pages));
  std::vector<int32_t> lens(static_cast<size_t>(p.batch), context);
  for (int i = 0; i < num_pages; ++i) table[size_t(i)] = i;
  std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(seed) + 7));
  // Shapes first: a bad one is reported before any allocation.
  p.q = bshd(reinterpret_cast<void*>(16), p.q_len, p.q_heads, p.head_dim);
  p.o = p.q;
  p.k_pages = p.v_pages = reinterpret_cast<void*>(16);
  p.block_tables = table.data();
  p.kv_lens = lens.data();
  p.device = Device::kCpu;  // lets validate() check the host block table
  if (Status s = validate(p); !s.ok()) return fail(s.to_string());
  p.device = Device::kCuda;
  if (!cuda_available())
    return fail("trace decode runs the paged kernels on the GPU: no CUDA device is present "
                "(or this build has no CUDA backend)");

  if (!args.has("rows"))
    for (int t = 0; t < p.q_len; ++t) opt.rows.push_back(t);
  if (!args.has("sample-tiles")) opt.sample_tiles = {{0, 0}};

  const size_t page_elems = size_t(p.kv_heads) * p.page_size * p.head_dim;
  const size_t q_elems = size_t(p.batch) * p.q_len * p.q_heads * p.head_dim;
  DeviceBuffer dq, dout, dk, dv, dtable, dlens;
  auto put = [&](DeviceBuffer& b, const void* host, size_t bytes) -> Status {
    auto r = DeviceBuffer::allocate(bytes);
    if (!r.ok()) return r.status();
    b = std::move(r.value());
    return b.upload(host, bytes);
  };
  const auto hq = random_halves(q_elems, p.dtype, seed), ho = std::vector<uint16_t>(q_elems),
             hk = random_halves(page_elems * num_pages, p.dtype, seed + 1),
             hv = random_halves(page_elems * num_pages, p.dtype, seed + 2);
  for (Status s : {put(dq, hq.data(), q_elems * 2), put(dout, ho.data(), q_elems * 2),
                   put(dk, hk.data(), hk.size() * 2), put(dv, hv.data(), hv.size() * 2),
                   put(dtable, table.data(), table.size() * 4), put(dlens, lens.data(), lens.size() * 4)})
    if (!s.ok()) return fail(s.to_string());
  p.q.data = dq.data();
  p.o.data = dout.data();
  p.k_pages = dk.data();
  p.v_pages = dv.data();
  p.block_tables = static_cast<const int32_t*>(dtable.data());
  p.kv_lens = static_cast<const int32_t*>(dlens.data());

  Trace t;
  if (Status s = capture_cuda_paged_trace(p, opt, &t); !s.ok()) return fail(s.to_string());
  t.meta.producer = "flashscope-cli";
  if (Status s = write_trace(t, out); !s.ok()) return fail(s.to_string());
  std::printf("%s: wrote a trace (format version %u)\n", out.c_str(), kTraceFormatVersion);
  print_summary(t);
  return 0;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  const std::string sub = argc >= 1 ? argv[0] : "";
  if (sub == "prefill") return trace_prefill(argc - 1, argv + 1);
  if (sub == "info") return trace_info(argc - 1, argv + 1);
  if (sub == "decode") return trace_decode(argc - 1, argv + 1);
  if (sub == "chat") return cmd_trace_chat(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  return usage_error("expected 'prefill', 'decode', 'chat' or 'info'");
}

}  // namespace flashscope::cli
