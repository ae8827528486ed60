// prefill(): validate, then hand the call to the backend its tensors live on.
#include "flashscope/attention.hpp"

#include <cmath>

#include "cpu/attention_cpu.hpp"
#include "cuda/prefill_cuda.hpp"

namespace flashscope {

const char* prefill_kernel_name(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kAuto: return "auto";
    case PrefillKernel::kV1: return "v1";
    case PrefillKernel::kV2: return "v2";
    case PrefillKernel::kV3: return "v3";
    case PrefillKernel::kV4: return "v4";
    case PrefillKernel::kV5: return "v5";
    case PrefillKernel::kV6: return "v6";
    case PrefillKernel::kHopper: return "hopper";
  }
  return "?";
}

bool parse_prefill_kernel(const std::string& name, PrefillKernel* out) {
  for (PrefillKernel k : {PrefillKernel::kAuto, PrefillKernel::kV1, PrefillKernel::kV2, PrefillKernel::kV3,
                          PrefillKernel::kV4, PrefillKernel::kV5, PrefillKernel::kV6, PrefillKernel::kHopper}) {
    if (name == prefill_kernel_name(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

std::vector<PrefillKernel> all_prefill_kernels() {
  return {PrefillKernel::kV1, PrefillKernel::kV2, PrefillKernel::kV3,
          PrefillKernel::kV4, PrefillKernel::kV5, PrefillKernel::kV6};
}

double prefill_flops(const PrefillParams& p) {
  double pairs = 0;
  if (p.cu_seqlens_q != nullptr && p.device == Device::kCpu) {
    for (int b = 0; b < p.batch; ++b)
      pairs += double(p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]) * double(p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]);
  } else {
    pairs = double(p.batch) * p.q_len * p.kv_len;
  }
  return 4.0 * pairs * p.q_heads * p.head_dim * (p.causal ? 0.5 : 1.0);
}

bool prefill_kernel_runnable(PrefillKernel k) { return cuda::prefill_kernel_runnable(k); }

PrefillKernel resolve_prefill_kernel(const PrefillParams& p) {
  if (p.device == Device::kCpu) return PrefillKernel::kAuto;
  return p.kernel == PrefillKernel::kAuto ? cuda::choose_prefill_kernel(p) : p.kernel;
}

size_t prefill_workspace_bytes(const PrefillParams& p) {
  if (p.device == Device::kCpu || !supported_head_dim(p.head_dim)) return 0;
  return cuda::prefill_workspace_bytes(p, resolve_prefill_kernel(p));
}

Status prefill(const PrefillParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (p.q_len == 0) return {};
  if (p.device == Device::kCpu) return cpu::attention_tiled(p);
  return cuda::prefill(p, resolve_prefill_kernel(p));
}

}  // namespace flashscope
