// check_regular_file(), read_small_file() and printable() (flashscope/untrusted.hpp).
#include "flashscope/untrusted.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <filesystem>
#include <system_error>

namespace flashscope {

Status check_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec) return Status::ok_status();
  const char* kind = nullptr;
  switch (st.type()) {
    case fs::file_type::directory: kind = "a directory"; break;
    case fs::file_type::fifo: kind = "a FIFO (named pipe)"; break;
    case fs::file_type::character: kind = "a character device"; break;
    case fs::file_type::block: kind = "a block device"; break;
    case fs::file_type::socket: kind = "a socket"; break;
    case fs::file_type::regular:
    case fs::file_type::not_found:
    case fs::file_type::none: return Status::ok_status();
    default: kind = "not a regular file"; break;
  }
  return {StatusCode::kIoError, path + " is " + kind + ", not a regular file"};
}

Result<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  FLASHSCOPE_RETURN_IF_ERROR(check_regular_file(path));
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status(StatusCode::kIoError, "cannot read " + path + ": " + ec.message());
  if (size > max_bytes)
    return Status(StatusCode::kIoError, path + " is " + std::to_string(size) + " bytes; at most " +
                                            std::to_string(max_bytes) + " are read");
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status(StatusCode::kIoError, "cannot open " + path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return Status(StatusCode::kIoError, "cannot read " + path);
  return text;
}

std::string printable(std::string_view s, size_t max_bytes, char quote) {
  std::string out(1, quote);
  const size_t shown = s.size() < max_bytes ? s.size() : max_bytes;
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += quote;
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through
        }
    }
  }
  out += quote;
  if (shown < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace flashscope
