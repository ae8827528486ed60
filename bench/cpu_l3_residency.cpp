// Does a decode step's weight stream leave its K/V in L3, and does
// prefetchnta on the stream change that? Per "token": read W MiB (the
// weights, 2 threads), then K MiB (the K/V). Median of runs; prints GB/s.
//   g++ -O2 -mavx512f -fopenmp -o /tmp/l3 bench/cpu_l3_residency.cpp
//   OMP_NUM_THREADS=2 /tmp/l3 90 26 MODE     # MODE 0 plain, 1 prefetchnta on the stream, 2 prefetcht0
//   OMP_NUM_THREADS=2 /tmp/l3 1 26 0         # the K/V with nothing between: L3's rate
// Figures: bench/TUNING.md, CPU, "Where a token's K/V bytes could hide".
#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
static double now() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
template <int MODE>  // 0 plain, 1 nta prefetch ahead, 2 t0 prefetch ahead
static __m512i sum_range(const char* p, size_t n) {
  __m512i acc = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 64) {
    if constexpr (MODE == 1) _mm_prefetch(p + i + 1024, _MM_HINT_NTA);
    if constexpr (MODE == 2) _mm_prefetch(p + i + 1024, _MM_HINT_T0);
    acc = _mm512_add_epi32(acc, _mm512_load_si512(p + i));
  }
  return acc;
}
int main(int argc, char** argv) {
  const size_t W = size_t(atoi(argv[1])) << 20, K = size_t(atoi(argv[2])) << 20;
  const int mode = atoi(argv[3]), runs = argc > 4 ? atoi(argv[4]) : 15;
  char* w = (char*)aligned_alloc(64, W); char* k = (char*)aligned_alloc(64, K);
  memset(w, 1, W); memset(k, 2, K);
  std::vector<double> tw, tk;
  volatile int sink = 0;
  for (int r = 0; r < runs; ++r) {
    double t0 = now();
#pragma omp parallel
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      size_t chunk = W / nt / 64 * 64;
      __m512i a = mode == 1 ? sum_range<1>(w + t * chunk, chunk) : mode == 2 ? sum_range<2>(w + t * chunk, chunk) : sum_range<0>(w + t * chunk, chunk);
      sink += _mm512_reduce_add_epi32(a);
    }
    double t1 = now();
#pragma omp parallel
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      size_t chunk = K / nt / 64 * 64;
      __m512i a = sum_range<0>(k + t * chunk, chunk);
      sink += _mm512_reduce_add_epi32(a);
    }
    double t2 = now();
    if (r >= 2) { tw.push_back(t1 - t0); tk.push_back(t2 - t1); }
  }
  std::sort(tw.begin(), tw.end()); std::sort(tk.begin(), tk.end());
  double mw = tw[tw.size() / 2], mk = tk[tk.size() / 2];
  printf("W=%zuMB K=%zuMB mode=%d: stream %.2f ms (%.1f GB/s)  kv %.2f ms (%.1f GB/s)\n", W >> 20, K >> 20, mode, mw,
         W / mw / 1e6, mk, K / mk / 1e6);
}
