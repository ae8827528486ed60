// NumPy .npy files for the CLI: how `flashscope-cli attend` takes q, k, v from
// Python and hands o and the LSE back.
//
// Format (numpy.lib.format): the magic "\x93NUMPY", a major and a minor
// version byte, the header length (uint16 little-endian in 1.0, uint32 in 2.0
// and 3.0), then the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a final '\n', then the raw array bytes in C order.
//
// Supported: versions 1.0, 2.0 and 3.0 on read, 1.0 on write (byte for byte
// what numpy.save writes); dtypes '<f2', '<f4', '<f8', '<i4', '<i8', '|u1',
// '<u2' (little-endian, which is every host CUDA runs on); C order; any rank
// from 0 up to 64 (numpy's own limit). Fortran order, big-endian, complex,
// object and structured dtypes are well-formed but unsupported: they are
// reported as StatusCode::kUnsupported, naming what is supported instead.
//
// Errors: a file that cannot be opened or read is kIoError; a bad magic, an
// unparsable or inconsistent header, or data shorter or longer than the shape
// says is kCorruptData. Every check runs before the data is allocated, so a
// malformed file never crashes the reader nor makes it allocate what the file
// does not hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope::cli {

// An array read from a .npy file. `data` holds numel() * itemsize bytes in C
// (row-major) order, little-endian, exactly as stored in the file.
struct NpyArray {
  std::string dtype;           // canonical descr: "<f4", "<f2", "<f8", "<i4", "<i8", "|u1", "<u2"
  std::vector<int64_t> shape;  // empty for a 0-d (scalar) array
  std::vector<uint8_t> data;

  // Number of elements: the product of shape (1 for a 0-d array); -1 when it
  // overflows int64, which a shape parse_npy accepted never does.
  int64_t numel() const;
};

// Bytes per element of a supported descr, or 0 when the descr is not one of
// the supported ones.
size_t npy_dtype_itemsize(const std::string& dtype);

// Reads a .npy file. kIoError: the file cannot be opened or read;
// kCorruptData: it is not a valid .npy file; kUnsupported: valid, but its
// dtype or memory order is not supported (see the top of this file).
Result<NpyArray> read_npy(const std::string& path);

// Parses a .npy file already in memory; the same checks and codes as read_npy.
Result<NpyArray> parse_npy(const void* bytes, size_t size);

// Writes a version 1.0 .npy file in C order. `data` holds the product of
// `shape` elements of `dtype` (a supported descr); it may be null only when
// that product is 0. kInvalidArgument: unsupported dtype, negative dimension,
// rank over 64, null data; kIoError: the file cannot be written, in which case
// no partial file is left behind.
Status write_npy(const std::string& path, const std::string& dtype,
                 const std::vector<int64_t>& shape, const void* data);

// Same, for an array read earlier (checks data.size() against the shape too).
Status write_npy(const std::string& path, const NpyArray& array);

// The array's elements as float: '<f2' and '<f8' are converted ('<f8' values
// beyond float's range become +-inf), '<f4' is copied. Other dtypes are
// kInvalidArgument: attention inputs must be floating point.
Result<std::vector<float>> npy_as_float(const NpyArray& array);

}  // namespace flashscope::cli
