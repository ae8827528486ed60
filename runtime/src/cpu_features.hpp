// What the CPU we run on can execute, asked once (cpuid) and cached. The
// kernels that use wider instructions than the build's baseline are compiled
// with target attributes and picked at run time from these answers, so one
// binary runs on any CPU of its architecture.
#pragma once

namespace flashscope::cpu {

// x86-64: AVX2, FMA and F16C together (every x86 server and desktop since
// 2013-2015). False elsewhere.
bool cpu_has_avx2();

// x86-64: AVX-512 F, with the OS saving the zmm state. False elsewhere.
bool cpu_has_avx512();

// x86-64: AVX-512 F, VL, BW and VNNI (the 256-bit vpdpbusd, byte masks). False elsewhere.
bool cpu_has_avx512_vnni();

// x86-64: AVX-512 F and BF16 (vdpbf16ps: pairs of bf16 products summed into
// float32). False elsewhere.
bool cpu_has_avx512_bf16();

// arm64: the dot-product instructions (SDOT/UDOT, Armv8.2's FEAT_DotProd: Apple
// M1 on, Graviton 2 on, Neoverse N1, Cortex-A55/A76 on; not the Cortex-A72 of a
// Raspberry Pi 4), asked of the OS (Linux's HWCAP, macOS's sysctl). False elsewhere.
bool cpu_has_neon_dotprod();

// The attribute of a function that uses them (SDOT/UDOT intrinsics): its
// callers check cpu_has_neon_dotprod first. Clang and GCC spell it apart.
#if defined(__aarch64__) && defined(__clang__)
#define FLASHSCOPE_TARGET_DOTPROD __attribute__((target("dotprod")))
#elif defined(__aarch64__) && defined(__GNUC__)
#define FLASHSCOPE_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

}  // namespace flashscope::cpu
