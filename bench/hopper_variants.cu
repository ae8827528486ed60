// Development tool for the Hopper kernel: times its variants (HopperVariant)
// beside v6 on the anchor shapes and checks each output against v6's (same
// inputs). Not part of the build; on the GPU machine:
//   nvcc -std=c++17 -O3 -I. --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -Ilab/include bench/hopper_variants.cu lab/src/hopper_variants.cu kernels/hopper/hopper_prefill.cu \
//     kernels/hopper/hopper_prefill_extras.cu kernels/attention/prefill_launch.cu -o hopper_variants
//   ./hopper_variants [VARIANTS [SHAPES]]   comma lists of the names to run (default all; "groups"
//                                           adds the causal longest-first group sweep)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_check.cuh"
#include "kernels/common/math.h"
#include "kernels/attention/prefill_launch.h"
#include "flashscope_lab/hopper_variants.h"
#include "kernels/hopper/hopper_launch.h"

using namespace flashscope::kernels;
using flashscope::lab::HopperVariant;
using bf16 = __nv_bfloat16;

struct Shape {
  const char* name;
  int b, h, lq, lk, d;
  bool causal;
};

// The device's SM count and L2 size from the driver (the runtime's cached
// facts, runtime/src/cuda/device_facts.cpp, are not linked here); an H100's
// where the driver cannot say.
DeviceLaunchFacts device_launch_facts() {
  DeviceLaunchFacts f;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&f.l2_bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess)
    cudaGetLastError();
  if (f.sm_count <= 0) f.sm_count = 132;
  if (f.l2_bytes <= 0) f.l2_bytes = 50 << 20;
  return f;
}

template <typename F>
float median_ms(F&& launch, int iters) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < std::min(iters, 3); ++i) CHECK_CUDA(launch());
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    CHECK_CUDA(launch());
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

// True when `name` is one of the comma-separated `filter`'s items (or there is no filter).
bool selected(const char* filter, const char* name) {
  if (filter == nullptr || *filter == 0) return true;
  std::string items(filter);
  size_t at = 0;
  while (at <= items.size()) {
    const size_t comma = std::min(items.find(',', at), items.size());
    const std::string item = items.substr(at, comma - at);
    if (item == name) return true;
    at = comma + 1;
  }
  return false;
}

int main(int argc, char** argv) {
  const char* variant_filter = argc > 1 ? argv[1] : nullptr;
  const char* shape_filter = argc > 2 ? argv[2] : nullptr;
  // HV_ITERS: timed launches per median (1 under compute-sanitizer).
  const int iters = std::getenv("HV_ITERS") != nullptr ? std::max(1, std::atoi(std::getenv("HV_ITERS"))) : 20;
  if (!hopper_kernels_runnable()) {
    std::printf("hopper kernels not runnable on this device\n");
    return 1;
  }
  const Shape shapes[] = {
      {"seed", 1, 8, 4096, 8192, 128, false},       {"8k2 D128", 1, 16, 8192, 8192, 128, false},
      {"8k2 D128 causal", 1, 16, 8192, 8192, 128, true}, {"D64", 4, 16, 4096, 4096, 64, false},
      {"D64 causal", 4, 16, 4096, 4096, 64, true}, {"batch causal D128", 4, 16, 4096, 4096, 128, true},   {"tails 1000x777", 2, 4, 1000, 777, 128, true},
      // Short D64 sequences (SmolLM2's prompts): where 192-row q-tiles leave rows idle.
      {"D64 16x9x1024 c", 16, 9, 1024, 1024, 64, true}, {"D64 16x9x512 c", 16, 9, 512, 512, 64, true},
      {"D64 8x9x2048 c", 8, 9, 2048, 2048, 64, true},   {"D64 4x9x1024", 4, 9, 1024, 1024, 64, false},
      // More work tiles than SMs with tails, and causal q-tiles that see no key (q_len > kv_len):
      // persistent CTAs walk several of these.
      {"multi 777x555", 3, 12, 777, 555, 128, false},   {"multi 777x555 c", 3, 12, 777, 555, 128, true},
      {"multi D64 777x555 c", 3, 12, 777, 555, 64, true}, {"nokeys 777x300 c", 3, 12, 777, 300, 128, true},
      {"nokeys D64 777x300 c", 3, 12, 777, 300, 64, true},
  };
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const Shape& s : shapes) {
    if (!selected(shape_filter, s.name)) continue;
    const size_t nq = size_t(s.b) * s.lq * s.h * s.d, nk = size_t(s.b) * s.lk * s.h * s.d;
    std::vector<bf16> hq(nq), hk(nk), hv(nk);
    for (auto& x : hq) x = __float2bfloat16(nd(rng));
    for (auto& x : hk) x = __float2bfloat16(nd(rng));
    for (auto& x : hv) x = __float2bfloat16(nd(rng));
    bf16 *q, *k, *v, *o_ref, *o;
    float *lse_ref, *lse;
    CHECK_CUDA(cudaMalloc(&q, nq * 2));
    CHECK_CUDA(cudaMalloc(&k, nk * 2));
    CHECK_CUDA(cudaMalloc(&v, nk * 2));
    CHECK_CUDA(cudaMalloc(&o_ref, nq * 2));
    CHECK_CUDA(cudaMalloc(&o, nq * 2));
    CHECK_CUDA(cudaMalloc(&lse_ref, size_t(s.b) * s.h * s.lq * 4));
    CHECK_CUDA(cudaMalloc(&lse, size_t(s.b) * s.h * s.lq * 4));
    CHECK_CUDA(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));

    PrefillKernelParams p{};
    p.q = q, p.k = k, p.v = v, p.o = o_ref, p.lse = lse_ref;
    p.q_seq_stride = p.k_seq_stride = p.v_seq_stride = p.o_seq_stride = int64_t(s.h) * s.d;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = s.d;
    p.q_batch_stride = p.o_batch_stride = int64_t(s.lq) * s.h * s.d;
    p.k_batch_stride = p.v_batch_stride = int64_t(s.lk) * s.h * s.d;
    p.batch = s.b, p.q_heads = s.h, p.kv_heads = s.h, p.group = 1, p.q_len = s.lq, p.kv_len = s.lk;
    p.scale_log2 = kLog2e / std::sqrt(float(s.d));
    const double flops = 4.0 * s.b * s.h * double(s.lq) * s.lk * s.d * (s.causal ? 0.5 : 1.0);

    const DeviceLaunchFacts dev = device_launch_facts();
    const PrefillLaunchPlan v6 = plan_prefill_sm80(6, ElemType::kBF16, s.d, s.causal, p, dev);
    const float t_v6 = median_ms([&] { return launch_prefill(v6, p, nullptr, nullptr); }, iters);
    std::vector<bf16> ref(nq), got(nq);
    const size_t nl = size_t(s.b) * s.h * s.lq;
    std::vector<float> lse_want(nl), lse_got(nl);
    CHECK_CUDA(cudaMemcpy(ref.data(), o_ref, nq * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(lse_want.data(), lse_ref, nl * 4, cudaMemcpyDeviceToHost));
    std::printf("%-18s v6            %8.3f ms %7.1f TFLOPS\n", s.name, t_v6, flops / t_v6 * 1e-9);
    struct Variant {
      HopperVariant v;
      const char* name;
      int dim;  // 0: both head dims
    };
    const Variant variants[] = {
        {HopperVariant::kDefault, "hopper", 0},
        {HopperVariant::kBlockKV128, "hopper-n128", 128},
        {HopperVariant::kStages2, "hopper-n128-st2", 128},
        {HopperVariant::kPingPong, "hopper-n128-pp", 128},
        {HopperVariant::kBlockKV176PingPong, "hopper-n176-pp", 128},
        {HopperVariant::kBlockKV176, "hopper-n176-nopp", 128},
        {HopperVariant::kBlockKV192, "hopper-n192-pp", 128},
        {HopperVariant::kCpAsync, "hopper-cpasync", 0},
        {HopperVariant::kTwoConsumersPingPong, "hopper-2wg-pp", 64},
        {HopperVariant::kThreeConsumers, "hopper-3wg-nopp", 64},
        {HopperVariant::kOneCtaPerTile, "hopper-per-tile", 0},
    };
    // Causal shapes also sweep the default's longest-first group (PrefillKernelParams::longest_first_group:
    // 1 = each head longest-first on its own, the blockIdx order; 1 << 20 = all heads in one list).
    struct Run {
      Variant variant;
      int group;  // 0: the launcher's choice
      char name[32];
    };
    std::vector<Run> runs;
    for (const Variant& variant : variants) {
      if (variant.dim != 0 && variant.dim != s.d) continue;
      if (!selected(variant_filter, variant.name)) continue;
      runs.push_back({variant, 0, {}});
      std::snprintf(runs.back().name, sizeof(runs.back().name), "%s", variant.name);
    }
    // ("groups": of the default, persistent, and of one CTA per tile).
    if (s.causal && selected(variant_filter, "groups"))
      for (const Variant& variant : variants) {
        if (variant.v != HopperVariant::kDefault && variant.v != HopperVariant::kOneCtaPerTile) continue;
        if (variant_filter != nullptr && !selected(variant_filter, variant.name)) continue;
        for (int group : {1, 4, 8, 16, 1 << 20}) {
          runs.push_back({variant, group, {}});
          std::snprintf(runs.back().name, sizeof(runs.back().name), "%s-g%d", variant.name, group);
        }
      }
    for (const Run& run : runs) {
      const HopperVariant var = run.variant.v;
      PrefillKernelParams ph = p;
      ph.o = o, ph.lse = lse;
      ph.longest_first_group = run.group;
      CHECK_CUDA(cudaMemset(o, 0xff, nq * 2));  // NaN: unwritten outputs show
      CHECK_CUDA(cudaMemset(lse, 0xff, nl * 4));
      const PrefillLaunchPlan plan = flashscope::lab::plan_hopper_variant(ElemType::kBF16, s.d, s.causal, ph, dev, var);
      const float t = median_ms([&] { return flashscope::lab::launch_hopper_variant(plan, ph, nullptr); }, iters);
      CHECK_CUDA(cudaMemcpy(got.data(), o, nq * 2, cudaMemcpyDeviceToHost));
      double max_diff = 0;
      size_t nan = 0;
      for (size_t i = 0; i < nq; ++i) {
        const float a = __bfloat162float(got[i]), r = __bfloat162float(ref[i]);
        if (!std::isfinite(a)) ++nan;
        else max_diff = std::max(max_diff, double(std::fabs(a - r)));
      }
      CHECK_CUDA(cudaMemcpy(lse_got.data(), lse, nl * 4, cudaMemcpyDeviceToHost));
      double lse_diff = 0;
      for (size_t i = 0; i < nl; ++i) {
        const double d = std::fabs(double(lse_got[i]) - lse_want[i]);
        lse_diff = std::isfinite(d) ? std::max(lse_diff, d) : (lse_got[i] == lse_want[i] ? lse_diff : 1e30);
      }
      std::printf("%-18s %-14s %8.3f ms %7.1f TFLOPS  x%.2f vs v6  max|diff| %.4f  lse %.2g  nonfinite %zu\n",
                  s.name, run.name, t, flops / t * 1e-9, t_v6 / t, max_diff, lse_diff, nan);
    }
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o_ref), cudaFree(o), cudaFree(lse_ref), cudaFree(lse);
  }
  return 0;
}
