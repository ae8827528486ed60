// OpenMP queries that also build without OpenMP (one thread, thread 0).
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace flashscope::cpu {

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace flashscope::cpu
