// Names for status codes and dtypes, for messages and logs.
#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"

namespace flashscope {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kDeviceError: return "device error";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kCorruptData: return "corrupt data";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
  }
  return "?";
}

}  // namespace flashscope
