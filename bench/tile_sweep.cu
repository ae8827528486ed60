// Tile-shape sweep for the production prefill configuration: times candidate
// PrefillConfigs on the anchor shapes and checks each against the current v5
// output. A development tool for choosing v5's tiles per head_dim, not part
// of the build:
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. --expt-relaxed-constexpr bench/tile_sweep.cu -o tile_sweep && ./tile_sweep
// (./tile_sweep --wide: only the head_dim 256 and 96 shapes)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_check.cuh"
#include "kernels/common/math.h"
#include "kernels/attention/prefill_versions.cuh"

using namespace flashscope::kernels;
using bf16 = __nv_bfloat16;

// name, config (head_dim filled in per shape)
template <int D> using CandA = PrefillV5<D>;
template <int D> using CandB = PrefillConfig<D, 128, 64, 4, true, Pipeline::kK2V1, true, true, 1>;
template <int D> using CandC = PrefillConfig<D, 128, 32, 4, true, Pipeline::kK2V1, true, true, 1>;
template <int D> using CandD = PrefillConfig<D, 64, 64, 4, true, Pipeline::kK2V1, true, false, 2>;
template <int D> using CandE = PrefillConfig<D, 128, 64, 4, true, Pipeline::kK2V1, true, true, 2>;
template <int D> using CandF = PrefillConfig<D, 128, 32, 4, true, Pipeline::kKV2, true, true, 1>;
template <int D> using CandG = PrefillConfig<D, 192, 64, 12, true, Pipeline::kK2V1, true, false, 1>;
// Second round: 4 warps of 32 rows (2 CTAs/SM) with fewer registers, to avoid B's spills at D=128.
template <int D> using CandH = PrefillConfig<D, 128, 48, 4, true, Pipeline::kK2V1, true, true, 1>;
template <int D> using CandI = PrefillConfig<D, 128, 64, 4, true, Pipeline::kK2V1, false, true, 1>;
template <int D> using CandJ = PrefillConfig<D, 128, 48, 4, true, Pipeline::kK2V1, false, true, 1>;
template <int D> using CandK = PrefillConfig<D, 128, 32, 4, true, Pipeline::kK2V1, false, true, 1>;
// Third round: the v6 look-ahead pipeline (L = v6 as built) and its variants.
template <int D> using CandL = PrefillV6<D>;
template <int D> using CandM = PrefillConfig<D, 128, 64, 8, true, Pipeline::kLookahead, true, false, 1>;
template <int D> using CandN = PrefillConfig<D, 128, 32, 4, true, Pipeline::kLookahead, true, true, 1>;

// head_dim 256 (a 16-row warp's accumulator alone is 128 registers, so Q
// stays in shared memory) and 96: candidates against v5 as built (A; at 96
// v6, auto's choice, is L). Shared memory: Q tile + K/V stages.
template <int D> using CandW1 = PrefillConfig<D, 128, 32, 8, true, Pipeline::kK2V1, true, true, 1>;       // 112 KiB
template <int D> using CandW2 = PrefillConfig<D, 64, 64, 4, true, Pipeline::kK2V1, true, true, 1>;        // FA2's 64x64: 128 KiB
template <int D> using CandW3 = PrefillConfig<D, 64, 32, 4, true, Pipeline::kK2V1, true, true, 2>;        // 80 KiB, 2 CTAs/SM
template <int D> using CandW4 = PrefillConfig<D, 128, 32, 8, true, Pipeline::kLookahead, true, true, 1>;  // 128 KiB
template <int D> using CandW5 = PrefillConfig<D, 128, 64, 4, true, Pipeline::kK2V1, true, true, 2>;       // D96: 4 warps of 32 rows

struct Shape { int b, h, lq, lk, d; bool causal; };

template <template <int> class Cand, int D>
float run(const PrefillKernelParams& p, bool causal, int iters) {
  auto launch = [&] {
    using Cfg = Cand<D>;
    const cudaError_t err = causal ? launch_prefill<Cfg, bf16, true>(p, 0) : launch_prefill<Cfg, bf16, false>(p, 0);
    CHECK_CUDA(err);
  };
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <int D>
void sweep(const Shape& s) {
  const size_t nq = size_t(s.b) * s.lq * s.h * D, nk = size_t(s.b) * s.lk * s.h * D;
  std::vector<bf16> hq(nq), hk(nk), hv(nk);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (auto& x : hq) x = __float2bfloat16(dist(rng));
  for (auto& x : hk) x = __float2bfloat16(dist(rng));
  for (auto& x : hv) x = __float2bfloat16(dist(rng));
  bf16 *q, *k, *v, *o, *o_ref;
  CHECK_CUDA(cudaMalloc(&q, nq * 2));
  CHECK_CUDA(cudaMalloc(&k, nk * 2));
  CHECK_CUDA(cudaMalloc(&v, nk * 2));
  CHECK_CUDA(cudaMalloc(&o, nq * 2));
  CHECK_CUDA(cudaMalloc(&o_ref, nq * 2));
  cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice);
  PrefillKernelParams p{};
  p.q = q; p.k = k; p.v = v; p.o = o_ref;
  const int64_t qs = int64_t(s.h) * D, ks = int64_t(s.h) * D;
  p.q_batch_stride = qs * s.lq; p.q_seq_stride = qs; p.q_head_stride = D;
  p.k_batch_stride = ks * s.lk; p.k_seq_stride = ks; p.k_head_stride = D;
  p.v_batch_stride = ks * s.lk; p.v_seq_stride = ks; p.v_head_stride = D;
  p.o_batch_stride = qs * s.lq; p.o_seq_stride = qs; p.o_head_stride = D;
  p.batch = s.b; p.q_heads = s.h; p.kv_heads = s.h; p.group = 1; p.q_len = s.lq; p.kv_len = s.lk;
  p.scale_log2 = kLog2e / std::sqrt(float(D));
  const double flops = 4.0 * s.b * s.h * double(s.lq) * s.lk * D * (s.causal ? 0.5 : 1.0);
  std::printf("B=%d H=%d Lq=%d Lk=%d D=%d %s\n", s.b, s.h, s.lq, s.lk, D, s.causal ? "causal" : "full");
  float t_ref = run<CandA, D>(p, s.causal, 20);
  std::vector<bf16> ref(nq), got(nq);
  cudaMemcpy(ref.data(), o_ref, nq * 2, cudaMemcpyDeviceToHost);
  p.o = o;
  auto report = [&](const char* name, float ms) {
    cudaMemcpy(got.data(), o, nq * 2, cudaMemcpyDeviceToHost);
    float worst = 0;
    for (size_t i = 0; i < nq; ++i)
      worst = std::max(worst, std::fabs(__bfloat162float(got[i]) - __bfloat162float(ref[i])));
    std::printf("  %-4s %8.4f ms %7.1f TFLOPS  max|diff vs A| %.4f\n", name, ms, flops / ms / 1e9, worst);
  };
  std::printf("  %-4s %8.4f ms %7.1f TFLOPS\n", "A", t_ref, flops / t_ref / 1e9);
  if constexpr (D == 256) {
    report("W1", run<CandW1, D>(p, s.causal, 20));
    report("W2", run<CandW2, D>(p, s.causal, 20));
    report("W3", run<CandW3, D>(p, s.causal, 20));
    report("W4", run<CandW4, D>(p, s.causal, 20));
  } else if constexpr (D == 96) {
    report("L", run<CandL, D>(p, s.causal, 20));
    report("W5", run<CandW5, D>(p, s.causal, 20));
    report("W1", run<CandW1, D>(p, s.causal, 20));
  } else {
    report("B", run<CandB, D>(p, s.causal, 20));
    report("E", run<CandE, D>(p, s.causal, 20));
    report("H", run<CandH, D>(p, s.causal, 20));
    report("K", run<CandK, D>(p, s.causal, 20));
    report("L", run<CandL, D>(p, s.causal, 20));
    report("M", run<CandM, D>(p, s.causal, 20));
    report("N", run<CandN, D>(p, s.causal, 20));
  }
  cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(o_ref);
}

int main(int argc, char** argv) {
  const bool wide_only = argc > 1 && std::string(argv[1]) == "--wide";
  const Shape shapes[] = {{1, 8, 4096, 8192, 128, false}, {1, 16, 8192, 8192, 128, true}, {4, 16, 4096, 4096, 128, true},
                          {4, 16, 4096, 4096, 64, false}, {4, 16, 4096, 4096, 64, true},   {16, 9, 1024, 1024, 64, true}};
  const Shape wide[] = {{4, 8, 4096, 4096, 256, false}, {4, 8, 4096, 4096, 256, true}, {1, 4, 8192, 8192, 256, true},
                        {4, 32, 2048, 2048, 96, false}, {1, 32, 4096, 4096, 96, true}};
  for (const Shape& s : shapes) {
    if (wide_only) break;
    if (s.d == 64) sweep<64>(s);
    else sweep<128>(s);
  }
  for (const Shape& s : wide) {
    if (s.d == 256) sweep<256>(s);
    else sweep<96>(s);
  }
  return 0;
}
