// Stop strings over streamed text: finds the first of a set of strings in
// text that arrives in pieces (one token's text at a time) and says which
// part of the text can be shown now.
//
//   StopStringMatcher m({"\nUser:", "###"});
//   out += m.push("Hello\nUs");   // "Hello": "\nUs" could start "\nUser:"
//   out += m.push("ual");         // "\nUsual": it could not
//   out += m.push(" ##");         // " ": "##" could start "###"
//   out += m.push("#x");          // "": "###" matched; matched() is true, "x" dropped
//
// Rule: text is held back exactly while it is a suffix of what has arrived
// and a proper prefix of some stop string, so the concatenation of what
// push() and flush() return is the input up to the first match (or all of
// it when nothing matched). The match is the one that completes first, as
// if the text came one byte at a time, so how the text is split into pieces
// never changes the result; of matches completing together, the longest
// (the one that starts first). Text from the match on is dropped.
//
// UTF-8: the input is expected to be whole characters (StreamDecoder's
// output). A stop string that is valid UTF-8 can only start on a character
// boundary, so what is shown never splits a character; the cut is moved back
// to a boundary anyway, should a caller feed something else.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope {

class StopStringMatcher {
 public:
  StopStringMatcher() = default;
  // Stops must be non-empty (check_stop_strings says so first; an empty one
  // is ignored here).
  explicit StopStringMatcher(std::vector<std::string> stops);

  bool empty() const { return stops_.empty(); }

  // Adds `text` and returns what can be shown: everything up to the first
  // match, or everything but a tail that could still become a match. After
  // a match, returns "" for ever (until reset()).
  std::string push(std::string_view text);
  // The held-back tail (the stream ended, so it can no longer match), or ""
  // after a match. The matcher is then empty and can take a new stream.
  std::string flush();
  // Forgets the held-back tail and any match.
  void reset();

  bool matched() const { return matched_ >= 0; }
  // Index into the stops of the string that matched, or -1.
  int matched_index() const { return matched_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;
  int matched_ = -1;
};

// kInvalidArgument naming the first stop string that is empty or not valid
// UTF-8 (neither could ever behave sensibly in a text stream).
Status check_stop_strings(const std::vector<std::string>& stops);

}  // namespace flashscope
