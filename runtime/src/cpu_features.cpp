// CPU feature detection (see cpu_features.hpp).
#include "cpu_features.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLASHSCOPE_X86_CPUID 1
#include <cpuid.h>
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)  // the kernel's bit for the dot-product instructions
#endif
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace flashscope::cpu {

#ifdef FLASHSCOPE_X86_CPUID
namespace {

bool detect_avx2() {
  __builtin_cpu_init();
  // F16C from CPUID (leaf 1, ECX): clang before 15 does not know "f16c" here.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

// __builtin_cpu_supports checks the OS's XCR0 (zmm state saved) as well.
bool detect_avx512() {
  __builtin_cpu_init();
  return detect_avx2() && __builtin_cpu_supports("avx512f");
}

// The 256-bit VNNI form (vpdpbusd on ymm) needs AVX-512 VL beside VNNI; the
// kernels that use it also take byte masks (BW), which every VNNI CPU has.
bool detect_avx512_vnni() {
  return detect_avx512() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}

bool detect_avx512_bf16() { return detect_avx512() && __builtin_cpu_supports("avx512bf16"); }

}  // namespace

bool cpu_has_avx2() {
  static const bool has = detect_avx2();
  return has;
}

bool cpu_has_avx512() {
  static const bool has = detect_avx512();
  return has;
}

bool cpu_has_avx512_vnni() {
  static const bool has = detect_avx512_vnni();
  return has;
}

bool cpu_has_avx512_bf16() {
  static const bool has = detect_avx512_bf16();
  return has;
}
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
bool cpu_has_avx512_vnni() { return false; }
bool cpu_has_avx512_bf16() { return false; }
#endif

namespace {
bool detect_neon_dotprod() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__aarch64__) && defined(__APPLE__)
  int has = 0;
  size_t size = sizeof has;
  return sysctlbyname("hw.optional.arm.FEAT_DotProd", &has, &size, nullptr, 0) == 0 && has != 0;
#else
  return false;  // other arm64 systems: the NEON kernels without it
#endif
}
}  // namespace

bool cpu_has_neon_dotprod() {
  static const bool has = detect_neon_dotprod();
  return has;
}

}  // namespace flashscope::cpu
