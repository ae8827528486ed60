// Read bandwidth of this machine, STREAM-like: each thread sums its own
// slice of a buffer far larger than the caches (AVX2 loads where the build
// has them, else what -O3 vectorizes), 1 and 2 threads. What a decode step
// reading a KV cache it cannot keep in cache can reach at best.
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -o /tmp/rdbw bench/cpu_read_bandwidth.cpp
//   /tmp/rdbw [MiB=512] [reps=10]     # prints best and median GB/s per thread count
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static double sum_slice(const float* p, size_t n) {
  // Eight independent partial sums keep the adds off the critical path.
  float s[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += p[i + k];
  double t = 0;
  for (float x : s) t += x;
  return t;
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? static_cast<size_t>(atoi(argv[1])) : 512;
  const int reps = argc > 2 ? atoi(argv[2]) : 10;
  const size_t n = mib * 1024 * 1024 / sizeof(float);
  float* buf = static_cast<float*>(aligned_alloc(64, n * sizeof(float)));
#pragma omp parallel for
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023) * 1e-3f;
  volatile double sink = 0;
  for (int threads : {1, 2}) {
    std::vector<double> gbs;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const size_t per = n / nt;
        total += sum_slice(buf + t * per, per);
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sink = sink + total;
      gbs.push_back(static_cast<double>(n * sizeof(float)) / s / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    printf("threads %d: read %zu MiB, best %.1f GB/s, median %.1f GB/s\n", threads, mib, gbs.back(),
           gbs[gbs.size() / 2]);
  }
  free(buf);
  return sink == 12345.0;
}
