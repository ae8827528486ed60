// Could the K/V of layer l be brought in while the matmuls before its
// attention stream their weights, so the attention reads it from cache?
// Emulated: per layer (30 a token, each its own buffers) stream Wl MiB of
// "weights" with WWORK multiply-adds per 64-byte line (the matmul's
// arithmetic), then read Kl MiB of "K/V" with WORK per line. MODE 0: as is;
// 1: the K/V prefetched (t0) spread over the weight stream; 2: t2; 3: nta.
//   g++ -O2 -mavx512f -mavx512dq -fopenmp -o /tmp/overlap bench/cpu_prefetch_overlap.cpp
//   OMP_NUM_THREADS=2 /tmp/overlap 2.9 0.86 MODE 4 WWORK     # SmolLM2's layer, q4_0 K/V at 4096 keys
// Figures: bench/TUNING.md, CPU, "Where a token's K/V bytes could hide".
#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
static double now() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  const size_t Wl = size_t(atof(argv[1]) * 1024) * 1024, Kl = size_t(atof(argv[2]) * 1024) * 1024;
  const int mode = atoi(argv[3]), layers = 30, runs = 12;
  const int kv_work = argc > 4 ? atoi(argv[4]) : 0;  // extra ALU work per KV line (emulates compute)
  const int w_work = argc > 5 ? atoi(argv[5]) : 0;
  std::vector<char*> w(layers), k(layers);
  for (int l = 0; l < layers; ++l) {
    w[l] = (char*)aligned_alloc(64, Wl); k[l] = (char*)aligned_alloc(64, Kl);
    memset(w[l], 1, Wl); memset(k[l], 2, Kl);
  }
  std::vector<double> tw, tk, tt;
  volatile int sink = 0;
  for (int r = 0; r < runs; ++r) {
    double sw = 0, sk = 0, t0 = now();
    for (int l = 0; l < layers; ++l) {
      double a = now();
#pragma omp parallel
      {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t cw = Wl / nt / 64 * 64, ck = Kl / nt / 64 * 64;
        const char* p = w[l] + t * cw; const char* q = k[l] + t * ck;
        size_t lines = cw / 64, klines = ck / 64, kp = 0;
        __m512i acc = _mm512_setzero_si512();
        for (size_t i = 0; i < lines; ++i) {
          __m512i v = _mm512_load_si512(p + i * 64), x = _mm512_set1_epi32(5);
          for (int j = 0; j < w_work; ++j) v = _mm512_add_epi32(_mm512_mullo_epi32(v, x), x);
          acc = _mm512_add_epi32(acc, v);
          if (mode && kp < klines && (i * klines) / lines >= kp) {
            if (mode == 1) _mm_prefetch(q + kp * 64, _MM_HINT_T0);
            if (mode == 2) _mm_prefetch(q + kp * 64, _MM_HINT_T2);
            if (mode == 3) _mm_prefetch(q + kp * 64, _MM_HINT_NTA);
            ++kp;
          }
        }
        sink += _mm512_reduce_add_epi32(acc);
      }
      double b = now();
#pragma omp parallel
      {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t ck = Kl / nt / 64 * 64;
        const char* q = k[l] + t * ck;
        __m512i acc = _mm512_setzero_si512(), x = _mm512_set1_epi32(3);
        for (size_t i = 0; i < ck / 64; ++i) {
          __m512i v = _mm512_load_si512(q + i * 64);
          for (int j = 0; j < kv_work; ++j) v = _mm512_add_epi32(_mm512_mullo_epi32(v, x), x);
          acc = _mm512_add_epi32(acc, v);
        }
        sink += _mm512_reduce_add_epi32(acc);
      }
      double c = now();
      sw += b - a; sk += c - b;
    }
    if (r >= 2) { tw.push_back(sw); tk.push_back(sk); tt.push_back(now() - t0); }
  }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  printf("mode %d wwork %d work %d: weights %.2f ms, kv %.2f ms, total %.2f ms\n", mode, w_work, kv_work, med(tw), med(tk), med(tt));
}
