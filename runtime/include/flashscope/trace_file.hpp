// The trace file: a Trace (trace_records.hpp) as bytes, so a trace captured
// on a GPU server can travel to a laptop.
//
// The file format (magic "FSTRACE\0", version, section table, little-endian
// records) is specified in docs/trace_format.md; readers skip sections they
// do not know and reject anything inconsistent with kCorruptData.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/status.hpp"
#include "flashscope/trace_records.hpp"

namespace flashscope {

// Version this build writes and the only one it reads.
constexpr uint32_t kTraceFormatVersion = 1;

// In-memory form of the file. serialize_trace validates first.
Result<std::vector<uint8_t>> serialize_trace(const Trace& t);
// Strict: kCorruptData naming what is wrong (truncated, bad magic, unknown
// version, sizes or offsets inconsistent, a known section with the wrong
// record size, records out of range). Sections of unknown type are skipped.
Result<Trace> parse_trace(const uint8_t* data, size_t size);

// Whole-file IO; kIoError when the file cannot be opened/written/read.
// write_trace writes `path`.partial and renames it over `path`: a reader never
// sees half a file, and a failed write leaves `path` as it was.
Status write_trace(const Trace& t, const std::string& path);
Result<Trace> read_trace(const std::string& path);

}  // namespace flashscope
