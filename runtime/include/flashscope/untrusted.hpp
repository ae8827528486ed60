// Input the library did not write: paths a person names and names read from
// files. Shared by every reader (GGUF, traces, and the CLI's and the app's
// own files) so each refuses the same things with the same words.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "flashscope/status.hpp"

namespace flashscope {

// kIoError when `path` (symlinks followed) exists and is not a regular file:
// a FIFO, a directory, a device or a socket, named as such. Checked without
// opening anything: opening a FIFO for reading blocks until a writer comes,
// and opening a device can have effects of its own. OK when the path does
// not exist or cannot be examined, so the open that follows reports that in
// its own words.
Status check_regular_file(const std::string& path);

// The whole of a small text file a person names (a chat template, a
// messages file): check_regular_file() first, then at most max_bytes, so a
// FIFO cannot hang the caller nor a huge file exhaust its memory. kIoError
// naming the path when it cannot be read or is larger.
Result<std::string> read_small_file(const std::string& path, size_t max_bytes = size_t{16} << 20);

// `s` for a message, between `quote`s: control bytes, DEL, the quote and
// backslashes escaped (\n, \x1b, ...), UTF-8 left as it is, and cut after
// max_bytes with the full length noted, so a name read from a file cannot
// rewrite the terminal that shows the error or flood it.
std::string printable(std::string_view s, size_t max_bytes = 120, char quote = '\'');

}  // namespace flashscope
