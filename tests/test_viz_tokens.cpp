// viz/token_label: the conversation's tokens as the views print them.
#include <doctest/doctest.h>

#include <string>

#include "viz/token_label.hpp"

namespace fs = flashscope;

TEST_CASE("viz tokens: whitespace is visible, broken UTF-8 and control bytes are escaped") {
  CHECK(fs::viz::token_label(" the") == "\xC2\xB7the");
  CHECK(fs::viz::token_label("a\nb\tc") == "a\xE2\x86\xB5" "b\xE2\x86\x92" "c");
  CHECK(fs::viz::token_label("") == "\xE2\x88\x85");
  CHECK(fs::viz::token_label("caf\xC3\xA9") == "caf\xC3\xA9");           // a whole character stays
  CHECK(fs::viz::token_label("\xE2\x82") == "\\xE2\\x82");               // half of '€'
  CHECK(fs::viz::token_label("\x01<|im_start|>") == "\\x01<|im_start|>");
  CHECK(fs::viz::token_label("\xC0\xAF") == "\\xC0\\xAF");               // an overlong '/'
  CHECK(fs::viz::token_label("\xED\xA0\x80") == "\\xED\\xA0\\x80");     // a surrogate
  CHECK(fs::viz::token_label("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");  // an emoji
}

TEST_CASE("viz tokens: rows name their key's token; a trace without tokens has no labels") {
  fs::Trace t;
  t.tokens.keys = {{1, "<|im_start|>"}, {7, "user"}, {9, " hi"}};
  t.tokens.row_keys = {1, 2};
  CHECK(fs::viz::key_token_label(t, 0) == "<|im_start|>");
  CHECK(fs::viz::row_token_label(t, 1) == "\xC2\xB7hi");
  CHECK(fs::viz::row_token_label(t, 2).empty());
  CHECK(fs::viz::key_token_label(t, -1).empty());
  CHECK(fs::viz::key_token_label(fs::Trace{}, 0).empty());
}
