// The CPU decode attention alone, SmolLM2-135M's shape (9 q-heads, 3 kv-heads,
// D64, bf16, the engine's contiguous [capacity, kv_heads, D] cache), one new
// token over context L in each of LAYERS (default 30) layers with their own
// K/V, so a "token" reads what a decode step's attention reads (94 MB at
// 4096). Prints the best and mean wall time per token, the process CPU time
// per token (steadier than wall time on a shared machine) and K/V GB/s.
// ISA: -1 the dispatched one, else a DecodeIsa value (1 portable, 2 avx2,
// 3 avx512, 4 neon, 5 avx512-bf16, 6 avx512-vnni, 7 neon-dotprod). KV=q8 runs the q8_0 cache (kv_q8.hpp) in the
// engine's 256-token pages instead: 1.06 bytes an element against 2; KV=q4
// the q4_0 cache (kv_q4.hpp): 0.56 bytes an element.
//
//   W=$PWD; g++ -std=c++20 -O3 -fopenmp -I$W/runtime/src -I$W/runtime/include -I$W \
//     -o /tmp/dabench bench/cpu_decode_attention.cpp runtime/src/attention/cpu/decode_attention*.cpp \
//     runtime/src/cpu_features.cpp runtime/src/attention/cpu/kv_q8.cpp runtime/src/attention/cpu/kv_q4.cpp
//   OMP_NUM_THREADS=1 /tmp/dabench 4096 10 [ISA]     # LAYERS=1 keeps it in L3: the arithmetic alone
// PAGED=1: the engine's bf16 cache layout instead (256-token pages, each
// [kv_heads, 256, D], head-major). QLEN=N: N new tokens a call (causal), as
// a short turn or a prompt chunk runs. CHECKSUM=1: run each layer once and
// print Σ|O| and a few outputs instead of timing (two builds give the same
// line when their kernels give the same bits). HUGE=1: the q8 pools on 2 MB
// pages (madvise), to see what TLB misses cost (nothing measurable here).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <time.h>
#include <sys/mman.h>
#include "attention/cpu/decode_attention.hpp"
#include "attention/cpu/kv_q4.hpp"
#include "attention/cpu/kv_q8.hpp"
#include "flashscope/half.hpp"
#include "util/math.hpp"
using namespace flashscope;
int main(int argc, char** argv) {
  int L = argc > 1 ? atoi(argv[1]) : 4096;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  int isa_i = argc > 3 ? atoi(argv[3]) : -1;
  const int layers = getenv("LAYERS") ? atoi(getenv("LAYERS")) : 30;
  const int qh = 9, kvh = 3, D = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const bool paged = getenv("PAGED") != nullptr;
  const int QL = getenv("QLEN") ? atoi(getenv("QLEN")) : 1;
  size_t per = (size_t)(paged ? ceil_div(L, 256) * 256 : L) * kvh * D;
  std::vector<uint16_t> K(per * layers), V(per * layers), Q((size_t)qh * D * layers * QL), O((size_t)qh * D * QL);
  for (auto& x : K) x = float_to_bf16(nd(rng));
  for (auto& x : V) x = float_to_bf16(nd(rng));
  for (auto& x : Q) x = float_to_bf16(nd(rng));
  const bool q4 = getenv("KV") && std::string(getenv("KV")) == "q4";
  const bool q8 = q4 || (getenv("KV") && std::string(getenv("KV")) == "q8");  // a quantized cache
  const int P = 256, pages = ceil_div(L, P);
  const int64_t hb = q4 ? cpu::kv_q4_head_bytes(P, D) : cpu::kv_q8_head_bytes(P, D), page_bytes = hb * kvh,
                pool = page_bytes * pages;
  struct Pool {  // 2 MB aligned, so HUGE=1 can ask for huge pages
    uint8_t* p = nullptr;
    explicit Pool(size_t n) {
      const size_t sz = (n + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
      if (sz == 0) return;
      p = static_cast<uint8_t*>(aligned_alloc(size_t{2} << 20, sz));
      if (getenv("HUGE")) madvise(p, sz, MADV_HUGEPAGE);
    }
    ~Pool() { free(p); }
    uint8_t* data() { return p; }
  };
  Pool K8(q8 ? pool * layers : 0), V8(q8 ? pool * layers : 0);
  std::vector<int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = i;
  if (q8) {
    std::vector<float> kr(kvh * D), vr(kvh * D);
    for (int l = 0; l < layers; ++l)
      for (int t = 0; t < L; ++t) {
        for (int i = 0; i < kvh * D; ++i) {
          kr[i] = bf16_to_float(K[l * per + (size_t)t * kvh * D + i]);
          vr[i] = bf16_to_float(V[l * per + (size_t)t * kvh * D + i]);
        }
        (q4 ? cpu::kv_q4_store : cpu::kv_q8_store)(kr.data(), vr.data(), kvh, D, P,
                                                   K8.data() + l * pool + (t / P) * page_bytes,
                                                   V8.data() + l * pool + (t / P) * page_bytes, t % P);
      }
  }
  auto run = [&](int l) {
    cpu::DecodeParams p;
    p.dtype = DType::kBF16; p.q_heads = qh; p.kv_heads = kvh; p.q_len = QL; p.head_dim = D; p.causal = true;
    p.q.data = Q.data() + (size_t)l * qh * D * QL; p.q.batch_stride = qh * D * QL; p.q.seq_stride = qh * D; p.q.head_stride = D;
    p.o.data = O.data(); p.o.batch_stride = qh * D * QL; p.o.seq_stride = qh * D; p.o.head_stride = D;
    p.kv.k = K.data() + l * per; p.kv.v = V.data() + l * per; p.kv.page_size = 0; p.kv.head_stride = D;
    p.kv.row_stride = kvh * D; p.kv.page_stride = per;
    if (paged) {
      p.kv.page_size = 256; p.kv.head_stride = 256 * D; p.kv.row_stride = D; p.kv.page_stride = (int64_t)kvh * 256 * D;
      p.kv.block_tables = table.data(); p.kv.block_table_stride = pages;
    }
    p.kv_lens = &L;
    if (q8) {
      p.kv_q8 = !q4; p.kv_q4 = q4; p.kv.k = K8.data() + l * pool; p.kv.v = V8.data() + l * pool; p.kv.page_size = P;
      p.kv.page_stride = page_bytes; p.kv.head_stride = hb; p.kv.block_tables = table.data(); p.kv.block_table_stride = pages;
    }
    Status s = isa_i < 0 ? cpu::decode_attention(p) : cpu::decode_attention(p, (cpu::DecodeIsa)isa_i);
    if (!s.ok()) { printf("err %s\n", s.message().c_str()); exit(1); }
  };
  for (int l = 0; l < layers; ++l) run(l);
  if (getenv("CHECKSUM")) {
    double sum = 0;
    for (auto o : O) sum += std::abs(bf16_to_float(o));
    printf("L=%d q_len=%d checksum %.9g O[1] %g O[100] %g\n", L, QL, sum, bf16_to_float(O[1]), bf16_to_float(O[100]));
    return 0;
  }
  // STREAM=MB: before each layer both threads read MB of other memory, as
  // the engine's matmuls stream a layer's weights between its attentions;
  // then the attention calls alone are timed too.
  const size_t stream_bytes = getenv("STREAM") ? size_t(atof(getenv("STREAM")) * 1e6) : 0;
  std::vector<uint8_t> other(stream_bytes * layers, 1);
  double attn_ms = 0;
  double best = 1e9, sum = 0; timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  for (int it = 0; it < iters; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < layers; ++l) {
      if (stream_bytes > 0) {
        const uint8_t* src = other.data() + size_t(l) * stream_bytes;
        long acc = 0;
#pragma omp parallel for reduction(+ : acc)
        for (size_t i = 0; i < stream_bytes; i += 64) acc += src[i];
        if (acc == 42) printf(" ");
      }
      auto a0 = std::chrono::steady_clock::now();
      run(l);
      attn_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a0).count();
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ms); sum += ms;
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu_ms = ((c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) * 1e-6) / iters;
  double bytes = q8 ? 2.0 * pool * layers * L / (pages * P) : 2.0 * per * 2 * layers;
  printf("L=%d isa=%s: best %.3f ms mean %.3f ms cpu %.3f ms/token  %.1f GB/s at best  (O[0]=%g)\n", L,
         cpu::decode_isa_name(isa_i < 0 ? cpu::decode_isa_for(D, q8) : (cpu::DecodeIsa)isa_i), best, sum / iters, cpu_ms,
         bytes / best / 1e6, bf16_to_float(O[0]));
  if (stream_bytes > 0) printf("  attention alone: mean %.3f ms/token\n", attn_ms / iters);
}
