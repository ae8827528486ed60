// What every GPU test case needs: a clean skip where there is no device (CI
// has none; the GPU machine runs the same binary) and a one-line upload.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"
#include "support/skip.hpp"

namespace flashscope::testing {

// True (after saying so) when the case must skip: no CUDA device or build.
inline bool skip_without_gpu() {
  if (cuda_available()) return false;
  MESSAGE("no CUDA device: GPU case skipped");
  mark_skipped();
  return true;
}

// A device copy of `bytes` host bytes (an empty buffer for 0).
inline DeviceBuffer upload(const void* host, size_t bytes) {
  auto b = DeviceBuffer::allocate(bytes);
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  if (bytes) REQUIRE(b->upload(host, bytes).ok());
  return std::move(b.value());
}

// A device copy of a host vector (at least 16 bytes, so an empty one still
// gets an aligned, non-null pointer).
template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  auto b = DeviceBuffer::allocate(std::max<size_t>(host.size() * sizeof(T), 16));
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  if (!host.empty()) REQUIRE(b->upload(host.data(), host.size() * sizeof(T)).ok());
  return std::move(b.value());
}

// `bytes` of device memory filled with 0xFF: NaN as fp32 and as bf16, so an
// output a kernel should not have written still reads NaN.
inline DeviceBuffer poisoned(size_t bytes) {
  auto b = DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  REQUIRE(b->fill_bytes(0xFF).ok());
  return std::move(b.value());
}

// The first `count` elements of b, after the device has finished its work.
template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t count) {
  const Status sync = device_synchronize();
  REQUIRE_MESSAGE(sync.ok(), sync.to_string());
  std::vector<T> host(count);
  REQUIRE(b.download(host.data(), count * sizeof(T)).ok());
  return host;
}

}  // namespace flashscope::testing
