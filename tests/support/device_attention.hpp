// An AttentionProblem's buffers on the device, for the GPU prefill tests:
// inputs uploaded once, outputs as poisoned, read back into the problem.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>

#include "flashscope/attention.hpp"
#include "flashscope/device_buffer.hpp"
#include "support/attention_problem.hpp"
#include "support/gpu.hpp"

namespace flashscope::testing {

struct DeviceAttention {
  DeviceBuffer q, k, v, o, lse, cu_q, cu_k;

  explicit DeviceAttention(AttentionProblem& prob)
      : q(upload(prob.q_storage().data(), prob.q_storage().size() * 2)),
        k(upload(prob.k_storage().data(), prob.k_storage().size() * 2)),
        v(upload(prob.v_storage().data(), prob.v_storage().size() * 2)),
        o(upload(prob.o_storage().data(), prob.o_storage().size() * 2)),
        lse(upload(prob.lse_storage().data(), prob.lse_storage().size() * 4)),
        cu_q(upload(prob.cu_seqlens_q().data(), prob.cu_seqlens_q().size() * 4)),
        cu_k(upload(prob.cu_seqlens_k().data(), prob.cu_seqlens_k().size() * 4)) {}

  // The problem's params over these buffers, run by `kernel`.
  PrefillParams params(const AttentionProblem& prob, PrefillKernel kernel) const {
    const AttentionBuffers b{q.data(), k.data(), v.data(), o.data(), static_cast<float*>(lse.data()),
                             static_cast<const int32_t*>(cu_q.data()), static_cast<const int32_t*>(cu_k.data())};
    PrefillParams p = prob.params_for(b, Device::kCuda);
    p.kernel = kernel;
    return p;
  }
  // The outputs poisoned again (host and device), before another run.
  void poison(AttentionProblem& prob) {
    prob.reset_outputs();
    REQUIRE(o.upload(prob.o_storage().data(), prob.o_storage().size() * 2).ok());
    REQUIRE(lse.upload(prob.lse_storage().data(), prob.lse_storage().size() * 4).ok());
  }
  // O and the LSE back into the problem's storage (after a synchronize).
  void read(AttentionProblem& prob) {
    REQUIRE(o.download(prob.o_storage().data(), prob.o_storage().size() * 2).ok());
    REQUIRE(lse.download(prob.lse_storage().data(), prob.lse_storage().size() * 4).ok());
  }
};

}  // namespace flashscope::testing
