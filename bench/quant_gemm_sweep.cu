// Development tool for the decode step's few-row GEMM over weights kept in
// their GGUF blocks (kernels/model/skinny_gemm.cu, skinny_gemm_quant_kernel)
// against the same GEMM over bf16 weights (skinny_gemm_kernel) and cuBLAS's
// bf16 GEMM, per format (every block type the GPU reads in place), at 1, 2, 4 and
// 8 rows, over the matrix products of SmolLM2-135M, Qwen3-0.6B,
// Llama-3.2-1B, Qwen3-1.7B and Gemma-3's LM head. Each cell: µs per launch (the median
// of kSamples replays of a CUDA graph of launches, as the engine runs them)
// and the weight bytes read per second. The launches cycle through copies of
// the weights that together pass kRotateBytes, so the weights come from HBM
// as in a decode step, not from L2. "n/a": the shape is not whole blocks of
// the format (K-quants take rows of 256) or the row count's input rows do
// not fit the kernel's shared memory (the engine then takes cuBLAS). A
// quantized cell has up to three timings: the tensor-core tiles
// (skinny_gemm_quant_kernel), at 1 and 2 rows "gemv" (kernels/model/quant_gemv.cuh,
// FLASHSCOPE_QUANT_GEMV=1|2), and "q8", the int8 GEMV
// (kernels/model/quant_gemv_q8.cuh, FLASHSCOPE_QUANT_GEMV=q8; "n/a" where its
// shared memory does not fit). Not part
// of the build; on the GPU machine: bash bench/quant_gemm_sweep.sh
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/cuda_check.cuh"
#include "kernels/model/model_ops.h"
#include "kernels/quant/quant_blocks.h"

using namespace flashscope::kernels;
namespace q = flashscope::kernels::quant;

namespace {

constexpr int kSamples = 31;                        // graph replays timed; the median is reported
constexpr size_t kRotateBytes = size_t(256) << 20;  // weights cycled through per graph: 5x an H100/H200 L2
constexpr int kMinLaunches = 20;                    // launches per graph at least
constexpr int kMaxCopies = 64;
constexpr int kGemvRows = 2;  // rows the GEMV takes (quant_gemv.cuh): timed beside the tiles

struct Shape {
  const char* model;
  const char* product;
  int n_out, k;
  bool gated;  // gate and up matrices of n_out rows each, SwiGLU behind
};

const Shape kShapes[] = {
    {"SmolLM2-135M", "qkv", 960, 576, false},
    {"SmolLM2-135M", "o", 576, 576, false},
    {"SmolLM2-135M", "gate|up", 1536, 576, true},
    {"SmolLM2-135M", "down", 576, 1536, false},
    {"SmolLM2-135M", "lm_head", 49152, 576, false},
    {"Qwen3-0.6B", "qkv", 4096, 1024, false},
    {"Qwen3-0.6B", "o", 1024, 2048, false},
    {"Qwen3-0.6B", "gate|up", 3072, 1024, true},
    {"Qwen3-0.6B", "down", 1024, 3072, false},
    {"Qwen3-0.6B", "lm_head", 151936, 1024, false},
    {"Llama-3.2-1B", "qkv", 3072, 2048, false},
    {"Llama-3.2-1B", "o", 2048, 2048, false},
    {"Llama-3.2-1B", "gate|up", 8192, 2048, true},
    {"Llama-3.2-1B", "down", 2048, 8192, false},
    {"Llama-3.2-1B", "lm_head", 128256, 2048, false},
    {"Qwen3-1.7B", "qkv", 4096, 2048, false},
    {"Qwen3-1.7B", "o", 2048, 2048, false},
    {"Qwen3-1.7B", "gate|up", 6144, 2048, true},
    {"Qwen3-1.7B", "down", 2048, 6144, false},
    {"Qwen3-1.7B", "lm_head", 151936, 2048, false},
    {"Gemma-3-270M", "lm_head", 262144, 640, false},
};

struct Format {
  const char* name;
  int type;  // 0: bf16
};
const Format kFormats[] = {{"Q4_0", q::kQ4_0}, {"Q4_1", q::kQ4_1}, {"Q5_0", q::kQ5_0}, {"Q5_1", q::kQ5_1},
                           {"Q4_K", q::kQ4_K}, {"Q5_K", q::kQ5_K}, {"Q6_K", q::kQ6_K}, {"Q8_0", q::kQ8_0}};

// Random bytes (a hash of the index): every bit pattern of a block is a valid block.
__global__ void fill_random(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t v = uint32_t(i) * 2654435761u ^ seed;
    v ^= v >> 16;
    v *= 0x7feb352du;
    v ^= v >> 15;
    v *= 0x846ca68bu;
    v ^= v >> 16;
    p[i] = v;
  }
}

// Every block's fp16 fields (d, m, dmin) set to small finite values, so the
// products stay finite as a model's do.
__global__ void fix_scales(uint8_t* p, size_t blocks, int block_bytes, int off0, int off1) {
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < blocks; b += size_t(gridDim.x) * blockDim.x) {
    uint8_t* blk = p + b * block_bytes;
    const uint16_t h = 0x1C00u | uint16_t(b & 0xFFu);  // ~0.004
    blk[off0] = uint8_t(h & 0xFF);
    blk[off0 + 1] = uint8_t(h >> 8);
    if (off1 >= 0) {
      blk[off1] = uint8_t(h & 0xFF);
      blk[off1 + 1] = uint8_t(h >> 8);
    }
  }
}

// bf16 values in [-1/64, 1/64).
__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t v = uint32_t(i) * 2654435761u ^ seed;
    v ^= v >> 13;
    v *= 0x5bd1e995u;
    v ^= v >> 15;
    const float f = (float(v & 0xFFFFu) / 65536.0f - 0.5f) / 32.0f;
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
}

// µs per launch: kSamples replays of a graph of `launches` calls of enqueue(i), the median.
template <typename F>
float graph_us(cudaStream_t s, int launches, F enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) enqueue(i);
  CHECK_CUDA(cudaStreamEndCapture(s, &g));
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, s));  // warm-up
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> us;
  for (int r = 0; r < kSamples; ++r) {
    CHECK_CUDA(cudaEventRecord(a, s));
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1e3f / launches);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(g));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

std::vector<int> half_fields(int type) {
  switch (type) {
    case q::kQ4_1:
    case q::kQ5_1:
    case q::kQ4_K:
    case q::kQ5_K: return {0, 2};
    case q::kQ6_K: return {208};
    default: return {0};
  }
}

// `copies` copies of a weight set (one matrix, or gate and up) of `bytes`
// each, laid out one after another, each row start as the engine's (256-byte
// aligned allocations).
struct Weights {
  uint8_t* data = nullptr;
  size_t set_bytes = 0;  // one copy, padded to 256
  int copies = 0;
};

Weights make_weights(size_t bytes, int type) {
  Weights w;
  w.set_bytes = (bytes + q::kQuantTailPad + 255) / 256 * 256;
  w.copies = int(std::min<size_t>(kMaxCopies, std::max<size_t>(1, (kRotateBytes + bytes - 1) / bytes)));
  const size_t total = w.set_bytes * w.copies;
  CHECK_CUDA(cudaMalloc(&w.data, total));
  if (type == 0) {
    fill_bf16<<<1024, 256>>>(reinterpret_cast<uint16_t*>(w.data), total / 2, 7);
  } else {
    fill_random<<<1024, 256>>>(reinterpret_cast<uint32_t*>(w.data), total / 4, 0x9e3779b9u ^ uint32_t(type));
    const std::vector<int> f = half_fields(type);
    const size_t blocks = total / q::block_bytes(type);
    fix_scales<<<1024, 256>>>(w.data, blocks, q::block_bytes(type), f[0], f.size() > 1 ? f[1] : -1);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  return w;
}

// Whether the int8 GEMV's shared memory (quant_gemv_q8.cuh: bf16 rows, then int8 over them, then
// 8 bytes a block of 32) fits at `rows`, as launch_skinny_gemm decides.
bool q8_fits(int rows, int k) {
  const size_t tok = size_t(skinny_gemm_tokens(rows));
  return tok * k * 2 + tok * (k / 32) * 8 <= skinny_gemm_quant_smem_limit();
}

std::string cell(float us, double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f µs %.0f GB/s", us, bytes / (us * 1e3));
  return buf;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  std::printf("# quant_gemm_sweep: %s, %d SMs, L2 %d MB, DRAM peak ~%.0f GB/s (clock x bus)\n\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8) / 1e9);
  std::printf("Each cell: µs per launch inside a CUDA graph (median of %d replays) and weight bytes / time.\n"
              "Weights cycled through copies of >= %zu MB, so they stream from HBM. Input: bf16 rows (kBf16);\n"
              "output: kStore, or kSwiglu for gate|up (two matrices). Quantized cells: the tensor-core\n"
              "tiles, at 1-2 rows \"gemv\" (quant_gemv.cuh), then \"q8\" (quant_gemv_q8.cuh, int8 inputs, dp4a).\n\n",
              kSamples, kRotateBytes >> 20);

  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(blas, s);
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, 32 << 20));
  cublasSetWorkspace(blas, ws, 32 << 20);

  const int max_k = 8192, max_n = 262144 * 2;
  uint16_t *x, *act;
  float* y;
  CHECK_CUDA(cudaMalloc(&x, size_t(8) * max_k * 2));
  fill_bf16<<<64, 256>>>(x, size_t(8) * max_k, 3);
  CHECK_CUDA(cudaMalloc(&act, size_t(8) * max_n * 2));
  CHECK_CUDA(cudaMalloc(&y, size_t(8) * max_n * 4));

  const char* model = "";
  for (const Shape& sh : kShapes) {
    if (std::string(model) != sh.model) {
      model = sh.model;
      std::printf("\n## %s\n\n| product | n x k | rows | bf16 skinny | cuBLAS bf16 |", model);
      for (const Format& f : kFormats) std::printf(" %s |", f.name);
      std::printf("\n|---|---|---|---|---|");
      for (size_t i = 0; i < sizeof kFormats / sizeof kFormats[0]; ++i) std::printf("---|");
      std::printf("\n");
    }
    const int n_w = sh.gated ? 2 * sh.n_out : sh.n_out;
    // Every format's weights made once per shape (the rows loop reuses them).
    const Weights bf = make_weights(size_t(n_w) * sh.k * 2, 0);
    std::vector<Weights> qw;
    for (const Format& f : kFormats) {
      const bool fits = sh.k % q::block_elems(f.type) == 0;
      qw.push_back(fits ? make_weights(size_t(n_w) * (sh.k / q::block_elems(f.type)) * q::block_bytes(f.type), f.type)
                        : Weights{});
    }
    for (int rows : {1, 2, 4, 8}) {
      std::string line = std::string("| ") + sh.product + " | " + std::to_string(n_w) + " x " + std::to_string(sh.k) +
                         " | " + std::to_string(rows) + " | ";
      SkinnyGemmKernelParams base{};
      base.input = SkinnyInput::kBf16;
      base.output = sh.gated ? SkinnyOutput::kSwiglu : SkinnyOutput::kStore;
      base.rows = rows;
      base.n_out = sh.n_out;
      base.k = sh.k;
      base.x = x;
      base.ldx = sh.k;
      base.y = y;
      base.ldy = sh.n_out;
      base.act = act;
      base.ld_act = sh.n_out;
      base.sm_count = prop.multiProcessorCount;  // device 0 is the current one: no cudaSetDevice here
      const double bf_bytes = double(n_w) * sh.k * 2;
      const int bf_launches = std::max(kMinLaunches, bf.copies);
      if (skinny_gemm_smem_bytes(rows, sh.k) <= 48 * 1024) {
        const float us = graph_us(s, bf_launches, [&](int i) {
          SkinnyGemmKernelParams p = base;
          p.w = reinterpret_cast<const uint16_t*>(bf.data + (i % bf.copies) * bf.set_bytes);
          CHECK_CUDA(launch_skinny_gemm(p, s, false));
        });
        line += cell(us, bf_bytes) + " | ";
      } else {
        line += "n/a | ";
      }
      {
        const float alpha = 1.0f, beta = 0.0f;
        const float us = graph_us(s, bf_launches, [&](int i) {
          const void* w = bf.data + (i % bf.copies) * bf.set_bytes;
          cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n_w, rows, sh.k, &alpha, w, CUDA_R_16BF, sh.k, x, CUDA_R_16BF,
                       sh.k, &beta, y, CUDA_R_32F, n_w, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        });
        line += cell(us, bf_bytes) + " | ";
      }
      for (size_t fi = 0; fi < qw.size(); ++fi) {
        const Weights& w = qw[fi];
        const int type = kFormats[fi].type;
        if (w.data == nullptr || skinny_gemm_smem_bytes(rows, sh.k) > skinny_gemm_quant_smem_limit()) {
          line += "n/a | ";
          continue;
        }
        const int64_t row_bytes = int64_t(sh.k / q::block_elems(type)) * q::block_bytes(type);
        const double bytes = double(n_w) * row_bytes;
        auto time_quant = [&] {
          return graph_us(s, std::max(kMinLaunches, w.copies), [&](int i) {
            SkinnyGemmKernelParams p = base;
            const uint8_t* set = w.data + (i % w.copies) * w.set_bytes;
            p.wq.type = type;
            p.wq.data = set;
            p.wq.up_data = sh.gated ? set + int64_t(sh.n_out) * row_bytes : nullptr;
            p.wq.row_bytes = row_bytes;
            p.wq.row_begin = 0;
            p.wq.row_end = sh.n_out;
            CHECK_CUDA(launch_skinny_gemm(p, s, false));
          });
        };
        set_quant_gemv_q8_max_rows(0);
        set_quant_gemv_max_rows(0);  // the tensor-core tiles
        line += cell(time_quant(), bytes);
        if (rows <= kGemvRows) {
          set_quant_gemv_max_rows(kGemvRows);
          line += " · gemv " + cell(time_quant(), bytes);
          set_quant_gemv_max_rows(0);
        }
        set_quant_gemv_q8_max_rows(kSkinnyMaxRows);
        if (quant_gemv_q8_max_rows() >= rows && q8_fits(rows, sh.k)) {
          line += " · q8 " + cell(time_quant(), bytes);
        } else {
          line += " · q8 n/a";
        }
        set_quant_gemv_q8_max_rows(0);
        line += " | ";
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    CHECK_CUDA(cudaFree(bf.data));
    for (Weights& w : qw)
      if (w.data) CHECK_CUDA(cudaFree(w.data));
  }
  return 0;
}
