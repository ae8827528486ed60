// Development tool for the decode step's fused few-token GEMM
// (kernels/model/skinny_gemm.cu): per-launch time inside a CUDA graph — how
// the engine runs it — for SmolLM2-135M's five products at 1, 2, 4 and 8
// rows, with and without programmatic dependent launch, beside cuBLAS's
// GEMM alone (no fused norm / RoPE / SwiGLU) and an empty kernel (the
// graph's own cost per node). Not part of the build; on the GPU machine:
//   nvcc -std=c++17 -O3 -I. -gencode=arch=compute_90a,code=sm_90a \
//     bench/skinny_gemm_sweep.cu kernels/model/skinny_gemm.cu -lcublas -o skinny_gemm_sweep
//   ./skinny_gemm_sweep
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdio>
#include <random>
#include <vector>

#include "bench/cuda_check.cuh"
#include "kernels/model/model_ops.h"

using namespace flashscope::kernels;

namespace {

constexpr int kNodes = 60;  // launches per graph
constexpr int kReplays = 30;

__global__ void empty_kernel() {}

// Median-free but steady: kReplays replays of a graph of kNodes launches, µs per launch.
template <typename F>
float per_launch_us(cudaStream_t s, F enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kNodes; ++i) enqueue();
  CHECK_CUDA(cudaStreamEndCapture(s, &g));
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, s));  // warm-up
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  CHECK_CUDA(cudaEventRecord(a, s));
  for (int r = 0; r < kReplays; ++r) CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaEventRecord(b, s));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(g));
  return ms * 1e3f / (kNodes * kReplays);
}

struct Product {
  const char* name;
  int n_out, k;
  SkinnyInput input;
  SkinnyOutput output;
};

}  // namespace

int main() {
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(blas, s);
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, 32 << 20));
  cublasSetWorkspace(blas, ws, 32 << 20);

  const Product products[] = {
      {"QKV  960x576 norm->store", 960, 576, SkinnyInput::kRmsNorm, SkinnyOutput::kStore},
      {"O    576x576 bf16->acc", 576, 576, SkinnyInput::kBf16, SkinnyOutput::kAccumulate},
      {"GU  2x1536x576 norm->swiglu", 1536, 576, SkinnyInput::kRmsNorm, SkinnyOutput::kSwiglu},
      {"down 576x1536 bf16->acc", 576, 1536, SkinnyInput::kBf16, SkinnyOutput::kAccumulate},
      {"head 49152x576 norm->store", 49152, 576, SkinnyInput::kRmsNorm, SkinnyOutput::kStore},
  };
  const size_t max_w = size_t(49152) * 576;
  std::vector<__nv_bfloat16> hw(max_w);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (auto& v : hw) v = __float2bfloat16(nd(rng));
  uint16_t *w, *x, *act;
  float *xf, *y, *norm;
  CHECK_CUDA(cudaMalloc(&w, max_w * 2));
  CHECK_CUDA(cudaMemcpy(w, hw.data(), max_w * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&x, 8 * 4096 * 2));
  CHECK_CUDA(cudaMemset(x, 0, 8 * 4096 * 2));
  CHECK_CUDA(cudaMalloc(&act, 8 * 4096 * 2));
  CHECK_CUDA(cudaMalloc(&xf, 8 * 4096 * 4));
  CHECK_CUDA(cudaMemset(xf, 0, 8 * 4096 * 4));
  CHECK_CUDA(cudaMalloc(&norm, 4096 * 4));
  CHECK_CUDA(cudaMemset(norm, 0, 4096 * 4));
  CHECK_CUDA(cudaMalloc(&y, size_t(8) * 49152 * 4 * 2));

  int sm_count = 0;  // what the runtime takes from its device facts (model_ops.h says who reads it)
  CHECK_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  bool waits = false;
  CHECK_CUDA(skinny_gemm_waits_on_producer(&waits));
  std::printf("empty kernel in a graph: %.2f us per node\n",
              per_launch_us(s, [&] { empty_kernel<<<1, 32, 0, s>>>(); }));
  std::printf("skinny kernel waits on its producer (PDL usable): %s\n", waits ? "yes" : "no");
  std::printf("%-30s %5s %12s %12s %12s %10s\n", "product", "rows", "fused us", "fused+PDL us", "cuBLAS us", "GB/s(PDL)");
  for (const Product& pr : products) {
    for (int rows : {1, 2, 4, 8}) {
      SkinnyGemmKernelParams p{};
      p.input = pr.input;
      p.output = pr.output;
      p.rows = rows;
      p.n_out = pr.n_out;
      p.k = pr.k;
      p.w = w;
      p.x = x;
      p.ldx = pr.k;
      p.xf = xf;
      p.ldxf = pr.k;
      p.norm_weight = norm;
      p.eps = 1e-5f;
      p.y = y;
      p.ldy = pr.n_out;
      p.act = act;
      p.ld_act = pr.n_out;
      p.sm_count = sm_count;
      const float plain = per_launch_us(s, [&] { CHECK_CUDA(launch_skinny_gemm(p, s, false)); });
      const float pdl = per_launch_us(s, [&] { CHECK_CUDA(launch_skinny_gemm(p, s, waits)); });
      const int n_w = pr.output == SkinnyOutput::kSwiglu ? 2 * pr.n_out : pr.n_out;
      const float alpha = 1.0f, beta = 0.0f;
      const float blas_us = per_launch_us(s, [&] {
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n_w, rows, pr.k, &alpha, w, CUDA_R_16BF, pr.k, x, CUDA_R_16BF,
                     pr.k, &beta, y, CUDA_R_32F, n_w, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      const double bytes = double(n_w) * pr.k * 2;
      std::printf("%-30s %5d %12.2f %12.2f %12.2f %10.0f\n", pr.name, rows, plain, pdl, blas_us, bytes / (pdl * 1e3));
    }
  }
  return 0;
}
