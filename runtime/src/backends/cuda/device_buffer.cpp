// DeviceBuffer, device_synchronize and EventTimer over the CUDA runtime.
#include "flashscope/device_buffer.hpp"

#include <string>
#include <utility>

#if FLASHSCOPE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashscope {

#if FLASHSCOPE_WITH_CUDA

namespace {
Status from_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return {};
  if (err == cudaErrorMemoryAllocation) return {StatusCode::kOutOfMemory, std::string(what) + ": out of device memory"};
  return device_error(std::string(what) + ": " + cudaGetErrorString(err));
}
}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = cudaMalloc(&b.data_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    b.data_ = nullptr;
    return from_cuda(err, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  }
  b.bytes_ = bytes;
  return b;
}

Status DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_) return invalid_argument("upload past the end of the device buffer");
  return from_cuda(cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice), "upload");
}

Status DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_) return invalid_argument("download past the end of the device buffer");
  return from_cuda(cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost),
                   "download");
}

Status DeviceBuffer::fill_bytes(int value) {
  if (bytes_ == 0) return {};
  return from_cuda(cudaMemset(data_, value, bytes_), "memset");
}

Status device_synchronize() { return from_cuda(cudaDeviceSynchronize(), "device synchronize"); }

EventTimer::EventTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  init_ = from_cuda(cudaEventCreate(&a), "cudaEventCreate");
  if (init_.ok()) init_ = from_cuda(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  if (start_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

Status EventTimer::start(void* stream) {
  FLASHSCOPE_RETURN_IF_ERROR(init_);
  return from_cuda(cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream)), "event record");
}

Status EventTimer::stop(void* stream) {
  FLASHSCOPE_RETURN_IF_ERROR(init_);
  return from_cuda(cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(stream)), "event record");
}

Result<float> EventTimer::elapsed_ms() {
  FLASHSCOPE_RETURN_IF_ERROR(init_);
  FLASHSCOPE_RETURN_IF_ERROR(from_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "event synchronize"));
  float ms = 0;
  FLASHSCOPE_RETURN_IF_ERROR(from_cuda(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)), "event elapsed"));
  return ms;
}

#else  // built without CUDA

namespace {
Status no_cuda() { return unsupported("this build of flashscope has no CUDA backend"); }
}  // namespace

DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}
Result<DeviceBuffer> DeviceBuffer::allocate(size_t) { return no_cuda(); }
Status DeviceBuffer::upload(const void*, size_t, size_t) { return no_cuda(); }
Status DeviceBuffer::download(void*, size_t, size_t) const { return no_cuda(); }
Status DeviceBuffer::fill_bytes(int) { return no_cuda(); }
Status device_synchronize() { return no_cuda(); }
EventTimer::EventTimer() : init_(no_cuda()) {}
EventTimer::~EventTimer() = default;
Status EventTimer::start(void*) { return init_; }
Status EventTimer::stop(void*) { return init_; }
Result<float> EventTimer::elapsed_ms() { return init_; }

#endif

}  // namespace flashscope
