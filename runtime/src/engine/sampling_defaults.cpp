// Recommended sampling from GGUF metadata or a model card (see
// sampling_defaults.hpp).
#include "flashscope/sampling_defaults.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

namespace flashscope {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool names_smollm2(const GgufFile& file) {
  for (const char* key : {"general.basename", "general.name"}) {
    if (!file.has_key(key)) continue;
    auto v = file.get_string(key);
    if (v.ok() && lower(v.value()).find("smollm2") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

SamplingDefaults sampling_defaults(const GgufFile& file) {
  SamplingDefaults d;
  SamplingParams& p = d.params;
  // One float key: set when present, a number and within [lo, hi] (lo
  // excluded when lo_open).
  auto read_float = [&](const char* key, const char* field, double lo, bool lo_open, double hi, float* out) {
    const std::string k = std::string("general.sampling.") + key;
    if (!file.has_key(k)) return;
    auto v = file.get_float(k);
    if (!v.ok() || !std::isfinite(v.value()) || v.value() < lo || (lo_open && v.value() == lo) || v.value() > hi) {
      d.ignored.push_back(k);
      return;
    }
    *out = static_cast<float>(v.value());
    d.fields.emplace_back(field);
  };
  auto read_int = [&](const char* key, const char* field, int64_t lo, int64_t hi, int* out) {
    const std::string k = std::string("general.sampling.") + key;
    if (!file.has_key(k)) return;
    auto v = file.get_int(k);
    if (!v.ok() || v.value() < lo || v.value() > hi) {
      d.ignored.push_back(k);
      return;
    }
    *out = static_cast<int>(v.value());
    d.fields.emplace_back(field);
  };
  constexpr double kHuge = 1e6;
  read_float("temp", "temperature", 0.0, false, kHuge, &p.temperature);
  read_int("top_k", "top_k", -(int64_t{1} << 30), 1 << 30, &p.top_k);
  if (p.top_k < 0) p.top_k = 0;  // llama.cpp's <= 0: every token
  read_float("top_p", "top_p", 0.0, true, 1.0, &p.top_p);
  read_float("min_p", "min_p", 0.0, false, 1.0, &p.min_p);
  read_float("penalty_repeat", "repetition_penalty", 0.0, true, kHuge, &p.repetition_penalty);
  read_int("penalty_last_n", "repeat_last_n", -1, 1 << 30, &p.repeat_last_n);
  if (!d.fields.empty()) {
    d.source = "gguf metadata";
    return d;
  }
  if (names_smollm2(file)) {
    // The SmolLM2 Instruct cards' example: temperature=0.2, top_p=0.9.
    p.temperature = 0.2f;
    p.top_p = 0.9f;
    d.fields = {"temperature", "top_p"};
    d.source = "SmolLM2 model card";
  }
  return d;
}

SamplingParams engine_sampling_defaults() {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  // DRY on: the loops small models fall into at low temperature end here
  // (bench/answers/); llama.cpp's own default leaves it off.
  p.dry_multiplier = 0.8f;
  return p;
}

SamplingParams default_sampling(const SamplingDefaults& model) {
  SamplingParams p = engine_sampling_defaults();
  const SamplingParams& m = model.params;
  for (const std::string& f : model.fields) {
    if (f == "temperature") p.temperature = m.temperature;
    if (f == "top_k") p.top_k = m.top_k;
    if (f == "top_p") p.top_p = m.top_p;
    if (f == "min_p") p.min_p = m.min_p;
    if (f == "repetition_penalty") p.repetition_penalty = m.repetition_penalty;
    if (f == "repeat_last_n") p.repeat_last_n = m.repeat_last_n;
  }
  return p;
}

}  // namespace flashscope
