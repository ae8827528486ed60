// The synthetic llama models behind flashscope::build_synthetic_model
// (model.hpp) and the tests' SyntheticLlama (tests/support/synthetic_llama.hpp):
// the file built from a spec, plus the breakage the loader's error tests ask
// for (keys and tensors left out, shapes, types and strings overridden,
// anything added). One copy of the builder for the CLI tool and the tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"
#include "gguf/gguf_builder.hpp"

namespace flashscope::model {

struct SyntheticBreakage {
  std::set<std::string> skip_keys;
  std::set<std::string> skip_tensors;
  std::map<std::string, std::vector<uint64_t>> shape_override;  // ne, innermost first
  std::map<std::string, GgmlType> type_override;               // data sized for the new type and shape
  std::map<std::string, std::string> string_override;          // e.g. general.architecture
  std::function<void(GgufBuilder&)> extra;                     // more keys or tensors
};

// The type a matrix of `cols`-element rows gets in a *_K_M mix (`mix`):
// llama.cpp's fallback (llama-quant.cpp) for rows that are not whole
// super-blocks, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0 (Gemma-3's 640); else
// `type`.
GgmlType synthetic_mix_row_type(GgmlType type, int64_t cols, bool mix);

// Random blocks of `type` holding n elements (n a multiple of its block
// size), values roughly uniform in ±scale.
GgufBuilder::Bytes synthetic_random_blocks(GgmlType type, int64_t n, float scale, std::mt19937_64& rng);

// The vocabulary: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|> (control),
// then the byte tokens of printable ASCII, "Ġ" (space) and "Ċ" (newline)
// in GPT-2's bytes_to_unicode spelling, then fillers up to `vocab`.
std::vector<std::string> synthetic_vocabulary(int vocab);

// The file, with no check of the spec (the tests build broken ones on purpose).
GgufBuilder::Bytes build_synthetic_llama(const SyntheticModelSpec& spec, const SyntheticBreakage& breakage = {});

}  // namespace flashscope::model
