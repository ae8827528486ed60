// StopStringMatcher: see stop_strings.hpp. Stops are short and few, so each
// push searches the held tail plus the new text directly; the held tail is
// shorter than the longest stop, so no match is ever found twice.
#include "engine/stop_strings.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "tokenizer/unicode.hpp"

namespace flashscope {
namespace {

bool is_continuation(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (s.empty()) continue;
    max_len_ = std::max(max_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

std::string StopStringMatcher::push(std::string_view text) {
  if (matched()) return {};
  if (stops_.empty()) return std::string(text);
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(text.data(), text.size());

  // The match that completes first, as if the text came byte by byte; of
  // those ending together the longest (it starts first), then the first
  // listed. The same stop's first occurrence is also its first to end.
  size_t best_end = std::string::npos, best_start = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = buf.find(stops_[i]);
    if (at == std::string::npos) continue;
    const size_t end = at + stops_[i].size();
    if (end < best_end || (end == best_end && at < best_start)) {
      best_end = end;
      best_start = at;
      matched_ = static_cast<int>(i);
    }
  }
  if (best_end != std::string::npos) {
    buf.resize(best_start);
    return buf;
  }

  // The longest tail of buf that a stop string starts with (shorter than
  // every stop it could continue into, or it would have matched above).
  size_t hold = 0;
  for (size_t k = std::min(buf.size(), max_len_ - 1); k > 0 && hold == 0; --k) {
    const std::string_view tail(buf.data() + buf.size() - k, k);
    for (const std::string& s : stops_) {
      if (s.size() > k && std::string_view(s).substr(0, k) == tail) {
        hold = k;
        break;
      }
    }
  }
  size_t cut = buf.size() - hold;
  while (cut > 0 && cut < buf.size() && is_continuation(buf[cut])) --cut;
  held_.assign(buf, cut, std::string::npos);
  buf.resize(cut);
  return buf;
}

std::string StopStringMatcher::flush() {
  std::string out;
  if (!matched()) out = std::move(held_);
  held_.clear();
  matched_ = -1;
  return out;
}

void StopStringMatcher::reset() {
  held_.clear();
  matched_ = -1;
}

Status check_stop_strings(const std::vector<std::string>& stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    if (s.empty()) return invalid_argument("generate: stop_strings[" + std::to_string(i) + "] is empty");
    for (size_t at = 0; at < s.size();) {
      uint32_t cp = 0;
      at += tokenizer::utf8_decode(s, at, &cp);
      if (cp == tokenizer::kInvalidCodePoint) {
        return invalid_argument("generate: stop_strings[" + std::to_string(i) + "] is not valid UTF-8");
      }
    }
  }
  return Status::ok_status();
}

}  // namespace flashscope
