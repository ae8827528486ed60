// What every GPU test case needs: a clean skip where there is no device (CI
// has none; the GPU machine runs the same binary) and a one-line upload.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <utility>

#include "flashscope/device.hpp"
#include "flashscope/device_buffer.hpp"

namespace flashscope::testing {

// True (after saying so) when the case must skip: no CUDA device or build.
inline bool skip_without_gpu() {
  if (cuda_available()) return false;
  MESSAGE("no CUDA device: GPU case skipped");
  return true;
}

// A device copy of `bytes` host bytes (an empty buffer for 0).
inline DeviceBuffer upload(const void* host, size_t bytes) {
  auto b = DeviceBuffer::allocate(bytes);
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  if (bytes) REQUIRE(b->upload(host, bytes).ok());
  return std::move(b.value());
}

}  // namespace flashscope::testing
