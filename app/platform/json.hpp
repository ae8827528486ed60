// A small JSON value, reader and writer for the app's files (saved
// conversations, the headless layout dump). Objects keep their keys sorted
// (std::map), strings are UTF-8 with \uXXXX escapes (surrogate pairs
// included) decoded on read; numbers are doubles. No exceptions: parse()
// returns false with a message naming the byte offset.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace flashscope::app {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  static JsonValue of(bool b);
  static JsonValue of(double d);
  static JsonValue of(int i) { return of(static_cast<double>(i)); }
  static JsonValue of(std::string s);
  static JsonValue of(const char* s) { return of(std::string(s)); }
  static JsonValue make_array();
  static JsonValue make_object();

  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kNumber; }

  // The member `key`, or nullptr when absent or this is not an object.
  const JsonValue* find(const std::string& key) const;
  // Typed reads of a member with a fallback when absent or of another kind.
  std::string get_string(const std::string& key, const std::string& fallback = "") const;
  double get_number(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
};

// Parses `text` (the whole of it: trailing garbage is an error). Nesting
// deeper than 64 levels is refused so a hostile file cannot blow the stack.
bool json_parse(const std::string& text, JsonValue* out, std::string* error);

// Pretty-printed with two-space indents and a final newline.
std::string json_write(const JsonValue& value);

// `s` as a JSON string literal, quotes included.
std::string json_quote(const std::string& s);

}  // namespace flashscope::app
