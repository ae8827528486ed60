// The smallest useful host program: causal GQA attention through the
// installed libflashscope, on the GPU when there is one and on the CPU
// otherwise, with the GPU result checked against the CPU backend.
#include <cmath>
#include <cstdio>
#include <vector>

#include <flashscope/attention.hpp>
#include <flashscope/device.hpp>
#include <flashscope/device_buffer.hpp>
#include <flashscope/half.hpp>

using namespace flashscope;

int main() {
  // SmolLM2-like: 9 query heads over 3 KV heads, head_dim 64, one 300-token prompt.
  const int q_heads = 9, kv_heads = 3, len = 300, dim = 64;
  std::vector<uint16_t> q(size_t(len) * q_heads * dim), k(size_t(len) * kv_heads * dim), v(k.size());
  uint32_t state = 12345;
  auto next = [&] {  // small LCG: deterministic inputs without <random>
    state = state * 1664525u + 1013904223u;
    return float(state >> 8) / float(1u << 24) * 2.0f - 1.0f;
  };
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = float_to_bf16(next());

  PrefillParams p;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.q_len = p.kv_len = len;
  p.head_dim = dim;
  p.causal = true;

  // CPU backend first: always available.
  std::vector<uint16_t> o_cpu(q.size());
  p.device = Device::kCpu;
  p.q = bshd(q.data(), len, q_heads, dim);
  p.k = bshd(k.data(), len, kv_heads, dim);
  p.v = bshd(v.data(), len, kv_heads, dim);
  p.o = bshd(o_cpu.data(), len, q_heads, dim);
  if (Status s = prefill(p); !s.ok()) {
    std::fprintf(stderr, "cpu prefill failed: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("cpu  : o[0][0][0..3] = %.4f %.4f %.4f %.4f\n", bf16_to_float(o_cpu[0]), bf16_to_float(o_cpu[1]),
              bf16_to_float(o_cpu[2]), bf16_to_float(o_cpu[3]));

  if (!cuda_available()) {
    std::printf("no CUDA device: the CPU backend served the call\n");
    return 0;
  }
  auto info = query_device(0);
  std::printf("gpu  : %s, SOL %.0f TFLOPS\n", info->name.c_str(), info->sol_tflops);
  auto dq = DeviceBuffer::allocate(q.size() * 2), dk = DeviceBuffer::allocate(k.size() * 2),
       dv = DeviceBuffer::allocate(v.size() * 2), dout = DeviceBuffer::allocate(q.size() * 2);
  if (!dq.ok() || !dk.ok() || !dv.ok() || !dout.ok()) {
    std::fprintf(stderr, "device allocation failed\n");
    return 1;
  }
  if (!dq->upload(q.data(), q.size() * 2).ok() || !dk->upload(k.data(), k.size() * 2).ok() ||
      !dv->upload(v.data(), v.size() * 2).ok()) {
    std::fprintf(stderr, "upload failed\n");
    return 1;
  }
  p.device = Device::kCuda;
  p.q.data = dq->data();
  p.k.data = dk->data();
  p.v.data = dv->data();
  p.o.data = dout->data();
  std::vector<uint16_t> o_gpu(q.size());
  Status s = prefill(p);
  if (s.ok()) s = device_synchronize();
  if (s.ok()) s = dout->download(o_gpu.data(), o_gpu.size() * 2);
  if (!s.ok()) {
    std::fprintf(stderr, "gpu prefill failed: %s\n", s.to_string().c_str());
    return 1;
  }
  double worst = 0;
  for (size_t i = 0; i < o_gpu.size(); ++i)
    worst = std::fmax(worst, std::fabs(bf16_to_float(o_gpu[i]) - bf16_to_float(o_cpu[i])));
  std::printf("gpu  : max |gpu - cpu| = %.5f (kernel %s)\n", worst, prefill_kernel_name(resolve_prefill_kernel(p)));
  return worst < 2e-2 ? 0 : 1;
}
