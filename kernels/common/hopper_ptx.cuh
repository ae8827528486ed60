// Hopper (sm_90a) PTX wrappers the warp-specialized kernels are built from,
// so no kernel writes this inline asm itself:
//   mbarrier   init / arrive / expect-tx / try_wait.parity: the producer and
//              consumer warps hand shared-memory stages to each other
//   wgmma      fence / commit_group / wait_group around the async MMAs of
//              wgmma_ops.cuh, and the shared-memory matrix descriptor
//   proxies    fence.proxy.async: ordinary (generic-proxy) writes to shared
//              memory, cp.async included, must be fenced before the tensor
//              cores (async proxy) read them
//   TMA        cp.async.bulk.tensor 4-D loads completing on an mbarrier, and
//              4-D stores from shared memory in bulk async-groups
#pragma once

#include <cstdint>

#include "kernels/common/ptx.cuh"

namespace flashscope::kernels::sm90 {

// --- mbarrier ---------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}

// Makes the initialised barriers visible to the other threads and to the
// async proxy (TMA completes on them) before anyone uses them.
__device__ __forceinline__ void mbarrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}

// One arrival that also tells the barrier to expect `bytes` from async copies
// (TMA) before the phase can complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

// `count` arrivals at once: one thread arriving for its warpgroup's warps.
__device__ __forceinline__ void mbarrier_arrive_count(uint32_t bar, uint32_t count) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar), "r"(count)
               : "memory");
}

// Blocks until the phase with this parity has completed. A fresh barrier is
// in phase 0, so waiting on parity 1 returns at once: that is how a producer
// finds every stage free on its first round.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// --- proxies and named barriers ------------------------------------------------------

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barriers (ptx.cuh): a warpgroup, or the consumers, sync without stopping the producer.
using kernels::named_barrier_arrive;
using kernels::named_barrier_sync;

// bar.red.and on a named barrier among `threads` threads (a multiple of 32):
// waits for all of them like bar.sync and returns whether `pred` held in every
// one (a warpgroup-wide vote, where __all_sync is one warp's).
__device__ __forceinline__ bool named_barrier_all(uint32_t id, uint32_t threads, bool pred) {
  uint32_t all;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "barrier.cta.red.and.pred q, %2, %3, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(all)
      : "r"(uint32_t(pred)), "r"(id), "r"(threads)
      : "memory");
  return all != 0;
}

// --- register reallocation ----------------------------------------------------------

// Moves registers between warpgroups (executed by all 128 threads of one):
// the producer gives most of its share back, the consumers take it. Works
// only under a launch-bounds register cap, with each role one branch.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// --- wgmma ----------------------------------------------------------------------------

// Orders this warpgroup's earlier register writes (accumulators, A fragments)
// before the wgmma that reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins an accumulator register at this point of the instruction stream: the
// compiler sees the async wgmma's operands as written when the asm issuing it
// returns, so without this it could read them before wgmma_wait.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Matrix descriptor of a shared-memory operand in the 128-byte swizzle
// layout (the layout TMA's SWIZZLE_128B writes, and our cp.async loader
// copies): rows of 128 bytes, the 16-byte chunk index XOR-ed with row % 8,
// atoms of 8 rows x 128 bytes that start 1024-byte aligned.
//   K-major (A, or B of Q·Kᵀ): sbo = 1024 (next 8 rows); lbo unused.
//   N-major (B of P·V, transposed): lbo = bytes to the next 64-column block,
//   sbo = 1024 (next 8 keys).
// Fields: start address >> 4 [0,14), lbo >> 4 [16,30), sbo >> 4 [32,46),
// base offset 0 (atoms are aligned), layout type 1 = 128B swizzle [62,64).
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = (addr & 0x3FFFFu) >> 4;
  d |= uint64_t((lbo >> 4) & 0x3FFFu) << 16;
  d |= uint64_t((sbo >> 4) & 0x3FFFu) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

// The descriptor of the operand `bytes` (a multiple of 16) further on: one
// 32-bit add to the start address field. Shared addresses stay below 256 KiB,
// so the add never carries out of its 14 bits; worked out from a tile's
// descriptor this way, a wgmma's descriptor costs one add instead of
// re-encoding the address (mask, shift, merge) for every k16 step.
__device__ __forceinline__ uint64_t smem_desc_add(uint64_t desc, uint32_t bytes) {
  uint32_t lo, hi;
  asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(desc));
  lo += bytes >> 4;
  uint64_t out;
  asm("mov.b64 %0, {%1, %2};" : "=l"(out) : "r"(lo), "r"(hi));
  return out;
}

// --- TMA ----------------------------------------------------------------------------

// Starts fetching a tensor map (a __grid_constant__ kernel parameter) into
// the TMA unit's descriptor cache, so the first copy through it does not
// wait for that fetch.
__device__ __forceinline__ void tma_prefetch_map(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tensor_map) : "memory");
}

// Loads the box at coordinates (c0 innermost .. c3) of a 4-D tensor map into
// shared memory; the bytes count against `bar`'s expected transactions.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tensor_map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Stores a box of shared memory (the map's layout and swizzle) at
// coordinates (c0 innermost .. c3) of a 4-D tensor map; rows outside the
// tensor are not written. Joins this thread's open bulk async-group.
__device__ __forceinline__ void tma_store_4d(const void* tensor_map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   tensor_map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk async-groups still read their
// shared memory (which may then be written again).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

}  // namespace flashscope::kernels::sm90
