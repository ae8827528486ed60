// Which kernel a test's few-row steps over quantized weights take, for the
// scope of one object: the int8 GEMV (kernels/model/quant_gemv_q8.cuh) on
// steps of up to `rows` rows, the tensor-core tiles on the rest (0: the
// tiles everywhere). The previous choice comes back after.
#pragma once

#include "backends/cuda/model_ops_cuda.hpp"

namespace flashscope::testing {

class ScopedQ8Rows {
 public:
  explicit ScopedQ8Rows(int rows) : saved_(cuda::quant_gemv_q8_max_rows()) { cuda::set_quant_gemv_q8_max_rows(rows); }
  ~ScopedQ8Rows() { cuda::set_quant_gemv_q8_max_rows(saved_); }
  ScopedQ8Rows(const ScopedQ8Rows&) = delete;
  ScopedQ8Rows& operator=(const ScopedQ8Rows&) = delete;

 private:
  int saved_;
};

}  // namespace flashscope::testing
