// Which instruction set each of the CPU engine's kernels runs on this machine.
// One binary carries several builds of each kernel and picks one when it first
// runs (AVX2, AVX-512 VNNI, NEON and its dot products, or the portable one),
// so this is what `flashscope-cli info` shows a user who asks why decoding is
// as fast as it is.
//
//   const flashscope::CpuKernels k = flashscope::cpu_kernels(64);
//   printf("matmuls %s, attention %s\n", k.matmul, k.decode_attention);
#pragma once

namespace flashscope {

struct CpuKernels {
  const char* matmul = "";               // the quantized weights' products: "avx512vnni", "avx2", "neon-dotprod", "portable"
  const char* decode_attention = "";     // decode over the bf16 cache at this head_dim
  const char* decode_attention_q8 = "";  // over a q8_0 or q4_0 cache (KvType::kQ8_0, kQ4_0); "none" where it cannot run
};

// For heads of head_dim (the attention kernels' vector widths must divide it).
CpuKernels cpu_kernels(int head_dim);

}  // namespace flashscope
