// A problem's buffers on the device, for the GPU tests: an AttentionProblem's
// (prefill) or a PagedProblem's (paged attention). Inputs are uploaded once,
// outputs as poisoned, and read back into the problem's storage, where its
// checks run as on the host.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>

#include "flashscope/attention.hpp"
#include "flashscope/device_buffer.hpp"
#include "flashscope/paged_attention.hpp"
#include "support/attention_problem.hpp"
#include "support/paged_problem.hpp"
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

struct DevicePagedAttention {
  DeviceBuffer q, o, lse, k, v, tables, lens;

  explicit DevicePagedAttention(PagedProblem& prob)
      : q(upload(prob.q_storage().data(), prob.q_storage().size() * 2)),
        o(upload(prob.o_storage().data(), prob.o_storage().size() * 2)),
        lse(upload(prob.lse_storage().data(), prob.lse_storage().size() * 4)),
        k(upload(prob.k_pool().data(), prob.k_pool().size() * 2)),
        v(upload(prob.v_pool().data(), prob.v_pool().size() * 2)),
        tables(upload(prob.block_tables().data(), prob.block_tables().size() * 4)),
        lens(upload(prob.kv_lens().data(), prob.kv_lens().size() * 4)) {}

  // The problem's params over these buffers (the plan's choices left at auto).
  PagedAttentionParams params(const PagedProblem& prob) const {
    PagedBuffers b;
    b.q = q.data();
    b.o = o.data();
    b.lse = static_cast<float*>(lse.data());
    b.k_pages = k.data();
    b.v_pages = v.data();
    b.block_tables = static_cast<const int32_t*>(tables.data());
    b.kv_lens = static_cast<const int32_t*>(lens.data());
    return prob.params_for(b, Device::kCuda);
  }
  // The outputs poisoned again (host and device), before another run.
  void poison(PagedProblem& prob) {
    prob.reset_outputs();
    REQUIRE(o.upload(prob.o_storage().data(), prob.o_storage().size() * 2).ok());
    REQUIRE(lse.upload(prob.lse_storage().data(), prob.lse_storage().size() * 4).ok());
  }
  // O and the LSE back into the problem's storage (after a synchronize).
  void read(PagedProblem& prob) {
    REQUIRE(o.download(prob.o_storage().data(), prob.o_storage().size() * 2).ok());
    REQUIRE(lse.download(prob.lse_storage().data(), prob.lse_storage().size() * 4).ok());
  }
};

}  // namespace flashscope::testing
