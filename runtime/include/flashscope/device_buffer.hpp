// Small CUDA conveniences for host programs that embed the runtime (and for
// its own CLI and tests): an owning device allocation, copies, a stream-ordered
// timer. They exist so a caller can use the attention kernels without
// including CUDA headers; every call reports failure as a Status, and in a
// build without CUDA every call returns kUnsupported.
#pragma once

#include <cstddef>
#include <memory>

#include "flashscope/status.hpp"

namespace flashscope {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // cudaMalloc on the current device; kOutOfMemory names the size asked for.
  static Result<DeviceBuffer> allocate(size_t bytes);

  void* data() const { return data_; }
  size_t size() const { return bytes_; }

  Status upload(const void* host, size_t bytes, size_t offset = 0);
  Status download(void* host, size_t bytes, size_t offset = 0) const;
  Status fill_bytes(int value);  // memset, e.g. to poison an output before a test

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for all work on the current device; reports any asynchronous error
// (such as a kernel fault) that happened since the last check.
Status device_synchronize();

// Times work on a stream with CUDA events: start(), enqueue work, stop(),
// then elapsed_ms() waits for the stop event.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  Status start(void* stream = nullptr);
  Status stop(void* stream = nullptr);
  Result<float> elapsed_ms();

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
  Status init_;
};

}  // namespace flashscope
