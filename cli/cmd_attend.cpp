// `flashscope-cli attend`: attention on .npy files, so anyone can check the
// kernels against numpy or PyTorch without linking anything.
//   q.npy [B, Lq, Hq, D], k.npy / v.npy [B, Lk, Hkv, D]   (--layout bshd)
//   or    [B, Hq, Lq, D] / [B, Hkv, Lk, D]                (--layout bhsd)
// Inputs may be float16/32/64; they are rounded to --dtype (bf16 or fp16),
// which is what the kernels compute in. o.npy is float32 in q's layout;
// lse.npy is float32 [B, Hq, Lq] (natural log, scale applied).
// --window W is PrefillParams::window_left (query at position i sees keys
// >= i - W; with --causal, a sliding window), --window-right R its right
// side (non-causal), --softcap C caps the scaled logits at C·tanh(s / C).
// head_dim is q's last axis.
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/half.hpp"
#include "npy.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli attend --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy]\n"
    "                             [--causal] [--window W] [--window-right R] [--softcap C] [--scale S]\n"
    "                             [--layout bshd|bhsd] [--dtype bf16|fp16] [--device cuda|cpu] [--kernel v1..v6|auto]\n";

struct Loaded {
  std::vector<uint16_t> halves;
  std::vector<int64_t> shape;
};

Result<Loaded> load(const std::string& path, DType dtype) {
  auto arr = read_npy(path);
  if (!arr.ok()) return arr.status();
  if (arr->shape.size() != 4)
    return invalid_argument(path + ": expected a 4-d array, got " + std::to_string(arr->shape.size()) + "-d");
  auto f = npy_as_float(arr.value());
  if (!f.ok()) return Status(f.status().code(), path + ": " + f.status().message());
  Loaded out;
  out.shape = arr->shape;
  out.halves.resize(f->size());
  for (size_t i = 0; i < f->size(); ++i)
    out.halves[i] = dtype == DType::kBF16 ? float_to_bf16((*f)[i]) : float_to_fp16((*f)[i]);
  return out;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "flashscope-cli attend: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int cmd_attend(int argc, char** argv) {
  Args args(argc, argv,
            {"q", "k", "v", "out", "lse", "scale", "layout", "dtype", "device", "kernel", "window", "window-right",
             "softcap"},
            {"causal", "help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  const double scale = args.get_double("scale", 0.0);
  const int window_left = int(args.get_int_in("window", -1, -1, 0x7fffffff));
  const int window_right = int(args.get_int_in("window-right", -1, -1, 0x7fffffff));
  const double softcap = args.get_double("softcap", 0.0);
  if (!args.ok() || !args.has("q") || !args.has("k") || !args.has("v") || !args.has("out")) {
    std::fprintf(stderr, "flashscope-cli attend: %s\n%s",
                 args.ok() ? "--q, --k, --v and --out are required" : args.error().c_str(), kUsage);
    return 2;
  }
  const std::string layout = args.get("layout", "bshd");
  const std::string dtype_s = args.get("dtype", "bf16");
  const std::string device_s = args.get("device", cuda_available() ? "cuda" : "cpu");
  PrefillKernel kernel;
  if ((layout != "bshd" && layout != "bhsd") || (dtype_s != "bf16" && dtype_s != "fp16") ||
      (device_s != "cuda" && device_s != "cpu") || !parse_prefill_kernel(args.get("kernel", "auto"), &kernel)) {
    std::fprintf(stderr, "flashscope-cli attend: bad --layout, --dtype, --device or --kernel\n%s", kUsage);
    return 2;
  }
  const DType dtype = dtype_s == "bf16" ? DType::kBF16 : DType::kFP16;
  auto q = load(args.get("q"), dtype);
  if (!q.ok()) return fail(q.status().to_string());
  auto k = load(args.get("k"), dtype);
  if (!k.ok()) return fail(k.status().to_string());
  auto v = load(args.get("v"), dtype);
  if (!v.ok()) return fail(v.status().to_string());
  if (k->shape != v->shape) return fail("k and v must have the same shape");

  const bool bhsd_layout = layout == "bhsd";
  const int seq_axis = bhsd_layout ? 2 : 1, head_axis = bhsd_layout ? 1 : 2;
  PrefillParams p;
  p.batch = int(q->shape[0]);
  p.q_len = int(q->shape[seq_axis]);
  p.q_heads = int(q->shape[head_axis]);
  p.head_dim = int(q->shape[3]);
  p.kv_len = int(k->shape[seq_axis]);
  p.kv_heads = int(k->shape[head_axis]);
  if (k->shape[0] != p.batch || k->shape[3] != p.head_dim)
    return fail("q and k disagree on batch or head_dim");
  p.causal = args.has("causal");
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = float(softcap);
  p.softmax_scale = float(scale);
  p.dtype = dtype;
  p.kernel = kernel;
  p.device = device_s == "cuda" ? Device::kCuda : Device::kCpu;
  auto view = [&](void* data, int seq, int heads) {
    return bhsd_layout ? bhsd(data, seq, heads, p.head_dim) : bshd(data, seq, heads, p.head_dim);
  };

  std::vector<uint16_t> o(q->halves.size());
  std::vector<float> lse(size_t(p.batch) * p.q_heads * p.q_len);
  const bool want_lse = args.has("lse");
  DeviceBuffer dq, dk, dv, dout, dlse;
  if (p.device == Device::kCuda) {
    auto up = [](DeviceBuffer& b, const void* h, size_t bytes) -> Status {
      auto r = DeviceBuffer::allocate(bytes);
      if (!r.ok()) return r.status();
      b = std::move(r.value());
      return h ? b.upload(h, bytes) : Status{};
    };
    for (Status s : {up(dq, q->halves.data(), q->halves.size() * 2), up(dk, k->halves.data(), k->halves.size() * 2),
                     up(dv, v->halves.data(), v->halves.size() * 2), up(dout, nullptr, o.size() * 2),
                     up(dlse, nullptr, lse.size() * 4)})
      if (!s.ok()) return fail(s.to_string());
    p.q = view(dq.data(), p.q_len, p.q_heads);
    p.k = view(dk.data(), p.kv_len, p.kv_heads);
    p.v = view(dv.data(), p.kv_len, p.kv_heads);
    p.o = view(dout.data(), p.q_len, p.q_heads);
    p.lse = want_lse ? static_cast<float*>(dlse.data()) : nullptr;
  } else {
    p.q = view(q->halves.data(), p.q_len, p.q_heads);
    p.k = view(k->halves.data(), p.kv_len, p.kv_heads);
    p.v = view(v->halves.data(), p.kv_len, p.kv_heads);
    p.o = view(o.data(), p.q_len, p.q_heads);
    p.lse = want_lse ? lse.data() : nullptr;
  }
  if (Status s = prefill(p); !s.ok()) return fail(s.to_string());
  if (p.device == Device::kCuda) {
    if (Status s = device_synchronize(); !s.ok()) return fail(s.to_string());
    if (Status s = dout.download(o.data(), o.size() * 2); !s.ok()) return fail(s.to_string());
    if (want_lse)
      if (Status s = dlse.download(lse.data(), lse.size() * 4); !s.ok()) return fail(s.to_string());
  }
  std::vector<float> o_f32(o.size());
  for (size_t i = 0; i < o.size(); ++i) o_f32[i] = dtype == DType::kBF16 ? bf16_to_float(o[i]) : fp16_to_float(o[i]);
  if (Status s = write_npy(args.get("out"), "<f4", q->shape, o_f32.data()); !s.ok()) return fail(s.to_string());
  if (want_lse) {
    const std::vector<int64_t> lse_shape{p.batch, p.q_heads, p.q_len};
    if (Status s = write_npy(args.get("lse"), "<f4", lse_shape, lse.data()); !s.ok()) return fail(s.to_string());
  }
  std::string extras;
  if (p.window_left >= 0 || p.window_right >= 0)
    extras += " window (" + std::to_string(p.window_left) + ", " + std::to_string(p.window_right) + ")";
  if (p.softcap > 0.0f) extras += " softcap " + std::to_string(p.softcap);
  std::fprintf(stderr, "attend: B=%d Hq=%d Hkv=%d Lq=%d Lk=%d D=%d %s%s %s on %s (kernel %s)\n", p.batch, p.q_heads,
               p.kv_heads, p.q_len, p.kv_len, p.head_dim, p.causal ? "causal" : "non-causal", extras.c_str(),
               dtype_s.c_str(), device_s.c_str(), prefill_kernel_name(resolve_prefill_kernel(p)));
  return 0;
}

}  // namespace flashscope::cli
