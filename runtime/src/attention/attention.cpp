// prefill(): validate, then hand the call to the backend its tensors live on.
#include "flashscope/attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "attention/cpu/attention_cpu.hpp"
#include "attention/cuda/prefill_cuda.hpp"

namespace flashscope {

const char* prefill_kernel_name(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kAuto: return "auto";
    case PrefillKernel::kV5: return "v5";
    case PrefillKernel::kV6: return "v6";
    case PrefillKernel::kHopper: return "hopper";
  }
  // The lab's ladder steps (attention.hpp): named here too, so traces and
  // tools print them wherever they run.
  static const char* const kLadder[] = {"v1", "v2", "v3", "v4"};
  const int version = static_cast<int>(k);
  return version >= 1 && version <= 4 ? kLadder[version - 1] : "?";
}

bool parse_prefill_kernel(const std::string& name, PrefillKernel* out) {
  for (int value = 0; value <= static_cast<int>(PrefillKernel::kHopper); ++value) {
    const auto k = static_cast<PrefillKernel>(value);
    if (name == prefill_kernel_name(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

namespace {

// (query, key) pairs the causal mask and the window let in, for one
// sequence of lq queries over lk keys (bottom-right aligned).
double windowed_pairs(const PrefillParams& p, int64_t lq, int64_t lk) {
  double pairs = 0;
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t pos = i + lk - lq;
    int64_t lo = 0, hi = lk - 1;
    if (p.causal) hi = std::min(hi, pos);
    if (p.window_right >= 0) hi = std::min(hi, pos + p.window_right);
    if (p.window_left >= 0) lo = std::max(lo, pos - p.window_left);
    if (hi >= lo) pairs += double(hi - lo + 1);
  }
  return pairs;
}

}  // namespace

double prefill_flops(const PrefillParams& p) {
  if (p.window_left >= 0 || p.window_right >= 0) {
    double pairs = 0;
    if (p.cu_seqlens_q != nullptr && p.device == Device::kCpu) {
      for (int b = 0; b < p.batch; ++b)
        pairs += windowed_pairs(p, p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b], p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]);
    } else {
      pairs = double(p.batch) * windowed_pairs(p, p.q_len, p.kv_len);
    }
    return 4.0 * pairs * p.q_heads * p.head_dim;
  }
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

namespace {

// Ascending; the CUDA list is what the kernels (sm80 family, Hopper, paged)
// are instantiated for.
constexpr int kCpuHeadDims[] = {32, 64, 80, 96, 128, 256};
constexpr int kCudaHeadDims[] = {32, 64, 80, 96, 128, 256};

template <size_t N>
bool contains(const int (&dims)[N], int d) {
  for (int x : dims)
    if (x == d) return true;
  return false;
}

template <size_t N>
std::string join(const int (&dims)[N]) {
  std::string s;
  for (int x : dims) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

bool head_dim_supported(Device device, int head_dim) {
  return device == Device::kCuda ? contains(kCudaHeadDims, head_dim) : contains(kCpuHeadDims, head_dim);
}

std::string supported_head_dims_text(Device device) {
  return device == Device::kCuda ? join(kCudaHeadDims) : join(kCpuHeadDims);
}

PrefillKernel resolve_prefill_kernel(const PrefillParams& p) {
  if (p.device == Device::kCpu) return PrefillKernel::kAuto;
  return p.kernel == PrefillKernel::kAuto ? cuda::choose_prefill_kernel(p) : p.kernel;
}

namespace {

PrefillPlan::Shape shape_of(const PrefillParams& p) {
  PrefillPlan::Shape s;
  s.device = p.device;
  s.dtype = p.dtype;
  s.requested = p.kernel;
  s.batch = p.batch;
  s.q_heads = p.q_heads;
  s.kv_heads = p.kv_heads;
  s.q_len = p.q_len;
  s.kv_len = p.kv_len;
  s.head_dim = p.head_dim;
  s.causal = p.causal;
  s.varlen = p.cu_seqlens_q != nullptr;
  s.window_left = p.window_left;
  s.window_right = p.window_right;
  s.softcap = p.softcap;
  return s;
}

bool same_shape(const PrefillPlan::Shape& a, const PrefillPlan::Shape& b) {
  return a.device == b.device && a.dtype == b.dtype && a.requested == b.requested && a.batch == b.batch &&
         a.q_heads == b.q_heads && a.kv_heads == b.kv_heads && a.q_len == b.q_len && a.kv_len == b.kv_len &&
         a.head_dim == b.head_dim && a.causal == b.causal && a.varlen == b.varlen &&
         a.window_left == b.window_left && a.window_right == b.window_right && a.softcap == b.softcap;
}

std::string describe(const PrefillPlan::Shape& s) {
  return std::string(s.device == Device::kCuda ? "cuda " : "cpu ") + (s.dtype == DType::kFP16 ? "fp16" : "bf16") +
         " kernel " + prefill_kernel_name(s.requested) + ", batch " + std::to_string(s.batch) + ", heads " +
         std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) + ", " + std::to_string(s.q_len) + " x " +
         std::to_string(s.kv_len) + ", head_dim " + std::to_string(s.head_dim) + (s.causal ? ", causal" : "") +
         (s.varlen ? ", varlen" : "") +
         (s.window_left >= 0 || s.window_right >= 0
              ? ", window (" + std::to_string(s.window_left) + ", " + std::to_string(s.window_right) + ")"
              : "") +
         (s.softcap > 0.0f ? ", softcap " + std::to_string(s.softcap) : "");
}

// p has passed validate().
Result<PrefillPlan> plan_validated(const PrefillParams& p) {
  if (p.device == Device::kCpu) {
    PrefillPlan plan;
    plan.shape = shape_of(p);
    return plan;
  }
  auto plan = cuda::plan_prefill(p);
  if (plan.ok()) {
    const int ordinal = plan->shape.device_ordinal;  // the CUDA side's
    plan->shape = shape_of(p);
    plan->shape.device_ordinal = ordinal;
  }
  return plan;
}

}  // namespace

Result<PrefillPlan> plan_prefill(const PrefillParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  return plan_validated(p);
}

size_t prefill_workspace_bytes(const PrefillParams& p) {
  // Shapes only: p's pointers need not be set yet (callers size the
  // workspace before they allocate it).
  if (p.device == Device::kCpu || !head_dim_supported(Device::kCuda, p.head_dim) || p.q_heads <= 0 || p.kv_heads <= 0) return 0;
  auto plan = cuda::plan_prefill(p);
  return plan.ok() ? plan->workspace_bytes : 0;
}

Status prefill(const PrefillParams& p, const PrefillPlan& plan) {
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (!same_shape(plan.shape, shape_of(p)))
    return invalid_argument("prefill: the plan was made for " + describe(plan.shape) + ", not for " +
                            describe(shape_of(p)) + " (plan_prefill(p) makes one for this shape)");
  if (p.q_len == 0) return {};
  if (p.device == Device::kCpu) return cpu::attention_tiled(p);
  return cuda::prefill(p, plan, /*check_device=*/true);
}

Status prefill(const PrefillParams& p) {
  FLASHSCOPE_RETURN_IF_ERROR(validate(p));
  if (p.q_len == 0) return {};
  if (p.device == Device::kCpu) return cpu::attention_tiled(p);
  auto plan = cuda::plan_prefill(p);
  if (!plan.ok()) return plan.status();
  return cuda::prefill(p, plan.value(), /*check_device=*/false);
}

}  // namespace flashscope
