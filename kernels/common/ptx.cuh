// Thin wrappers over the PTX the attention kernels are built from, so no
// kernel writes inline asm itself (sm80+):
//   cp.async        global -> shared, 16 bytes, bypassing registers and L1
//   ld.shared       32- and 16-bit loads by shared address (bytes cp.async put there)
//   ldmatrix        shared -> registers in the mma fragment layout (x2, x4, .trans)
//   mma.m16n8k16    D[16x8] += A[16x16] * B[16x8], f32 accumulate, bf16 or f16 inputs
//   griddepcontrol  programmatic dependent launch (sm_90+; nothing on older targets)
//   fence.acq_rel   device-scope ordering of global writes and reads around an atomic flag
//   bar.sync        named barriers among some of a CTA's warps (bar.arrive: without waiting)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace flashscope::kernels {

// Orders this thread's global memory operations before and after it at GPU
// scope: with an atomic counter, writes before it are visible to whoever
// sees the count, and reads after it see what the others wrote before theirs.
// Lighter than __threadfence() (fence.sc), whose total order nothing here needs.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

// bar.sync on named barrier `id` (1..15; 0 is __syncthreads') among
// `threads` threads of the CTA (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// bar.arrive: counts this warp toward the named barrier without waiting (the
// other side of a named_barrier_sync with the same thread count).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Shared-memory address as the 32-bit value PTX instructions take.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes; when `valid` is false writes 16 zero bytes instead (the
// src-size operand of 0 makes cp.async zero-fill without reading src).
// Tails of Q/K/V tiles are zero-filled this way so masked lanes hold no NaN.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// 32- and 16-bit loads from a shared-memory address (4- and 2-byte aligned).
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
// A 32-bit store to a shared-memory address (4-byte aligned).
__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}

// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// 2^x on the special-function unit (ex2.approx, ~2 ulp); exp2(-inf) = 0,
// which is what masked logits rely on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1/x and log2(x) on the special-function unit (rcp.approx / lg2.approx,
// about 1 ulp and 2^-22 absolute): one instruction each where 1.0f / x and
// log2f(x) compile to a refined division with a slow path and a ~25
// instruction polynomial. For a softmax's row sum, which is at least 1 (the
// row's largest term is exp2(0)), so it is never subnormal.
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch. A grid launched with the attribute
// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled once
// every CTA of the grid before it has run pdl_launch_dependents() (or
// exited); it must run pdl_wait() before it reads anything that grid writes:
// the wait returns when that grid has completed and its memory is visible.
// In a grid launched without the attribute the wait returns at once, and a
// trigger with no dependent does nothing. Code compiled for targets below
// sm_90 gets neither instruction, so the host must set the attribute only
// where the waiting kernel's code is sm_90's (paged_combine_waits_on_producer).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // "memory": no load of the producer's data moves above it
#endif
}

// The host side: launches kernel<<<grid, block, smem, stream>>>(args...),
// with programmatic stream serialization when `programmatic` (the kernel must
// then run pdl_wait() before it reads its producer's output).
template <typename... Params, typename... Args>
cudaError_t launch_maybe_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, bool programmatic, Args&&... args) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Element-type traits: the mma instruction and the float2 -> packed pair.
template <typename T>
struct MmaType;

template <>
struct MmaType<__nv_bfloat16> {
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  // c[4] += a[4] (16x16 row-major fragment) * b[2] (16x8 col-major fragment)
  __device__ __forceinline__ static void mma(const uint32_t (&a)[4], const uint32_t* b, float (&c)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct MmaType<__half> {
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ __forceinline__ static void mma(const uint32_t (&a)[4], const uint32_t* b, float (&c)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

}  // namespace flashscope::kernels
