// The app's JSON files (saved conversations, the headless layout report)
// are nlohmann-json values: objects keep their keys sorted, files are
// pretty-printed with two-space indents and end with a newline. What the
// app's readers add on top: a parse that reports failure as a message
// rather than an exception, and member reads with a fallback when the
// member is absent or of another type, so an unknown or mistyped key never
// fails a load.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace flashscope::app {

using Json = nlohmann::json;

// Parses `text`, the whole of it (trailing text is an error). False with
// *error saying where and what was expected; *out is then unchanged.
inline bool json_parse(const std::string& text, Json* out, std::string* error) {
  try {
    *out = Json::parse(text);
    return true;
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number past double
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 9: ...": keep what follows the tag.
    const std::string what = e.what();
    const size_t tag_end = what.find("] ");
    if (error) *error = tag_end == std::string::npos ? what : what.substr(tag_end + 2);
    return false;
  }
}

// Pretty-printed, UTF-8 passed through; bytes that are not UTF-8 (a reply cut
// inside a character, say) become U+FFFD instead of making the file invalid.
inline std::string json_write(const Json& value) {
  return value.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

// The member `key` of an object, or null when absent or `object` is not one.
inline const Json* json_member(const Json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

inline double json_number(const Json& object, const std::string& key, double fallback) {
  const Json* v = json_member(object, key);
  return v && v->is_number() ? v->get<double>() : fallback;
}

inline std::string json_string(const Json& object, const std::string& key, const std::string& fallback = "") {
  const Json* v = json_member(object, key);
  return v && v->is_string() ? v->get<std::string>() : fallback;
}

inline bool json_bool(const Json& object, const std::string& key, bool fallback) {
  const Json* v = json_member(object, key);
  return v && v->is_boolean() ? v->get<bool>() : fallback;
}

}  // namespace flashscope::app
