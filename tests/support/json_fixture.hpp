// Reads a JSON test fixture (tests/data/*.json) with nlohmann-json. The case
// fails, saying which file, when the file is missing or is not valid JSON.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace flashscope::testing {

inline nlohmann::json read_json_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  nlohmann::json root = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE_MESSAGE(!root.is_discarded(), path << " is not valid JSON");
  return root;
}

}  // namespace flashscope::testing
