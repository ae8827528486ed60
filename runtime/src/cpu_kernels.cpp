// flashscope/cpu_kernels.hpp: the choices the kernels' own dispatch makes.
#include "flashscope/cpu_kernels.hpp"

#include "attention/cpu/decode_attention.hpp"
#include "backends/cpu/quant_matmul.hpp"

namespace flashscope {

CpuKernels cpu_kernels(int head_dim) {
  CpuKernels k;
  k.matmul = cpu::cpu_isa_name(cpu::active_cpu_isa());
  k.decode_attention = cpu::decode_isa_name(cpu::decode_isa_for(head_dim, false));
  const cpu::DecodeIsa q8 = cpu::decode_isa_for(head_dim, true);
  k.decode_attention_q8 = cpu::decode_isa_runnable(q8, head_dim, true) ? cpu::decode_isa_name(q8) : "none";
  return k;
}

}  // namespace flashscope
