// The ggml type table (name, elements per block, bytes per block) and the
// GGUF value-type names. Sizes follow ggml's type_traits / gguf-py's
// GGML_QUANT_SIZES; the reader uses them to check every tensor's byte size,
// so a type with a known layout can be opened (and listed) even where this
// build cannot dequantize it.
#include <cstddef>
#include <cstdint>

#include "flashscope/gguf.hpp"

namespace flashscope {
namespace {

constexpr int64_t kQK = 256;  // QK_K: elements per K-quant super-block

struct TypeTraits {
  const char* name;    // nullptr: id never assigned
  int64_t block_size;  // 0: layout unknown (removed ids)
  int64_t type_size;
  bool can_dequantize;
};

// Indexed by type id.
constexpr TypeTraits kTypes[] = {
    /*  0 */ {"F32", 1, 4, true},
    /*  1 */ {"F16", 1, 2, true},
    /*  2 */ {"Q4_0", 32, 2 + 16, true},
    /*  3 */ {"Q4_1", 32, 2 + 2 + 16, true},
    /*  4 */ {"Q4_2 (removed)", 0, 0, false},
    /*  5 */ {"Q4_3 (removed)", 0, 0, false},
    /*  6 */ {"Q5_0", 32, 2 + 4 + 16, true},
    /*  7 */ {"Q5_1", 32, 2 + 2 + 4 + 16, true},
    /*  8 */ {"Q8_0", 32, 2 + 32, true},
    /*  9 */ {"Q8_1", 32, 2 + 2 + 32, false},
    /* 10 */ {"Q2_K", kQK, 2 + 2 + kQK / 16 + kQK / 4, false},
    /* 11 */ {"Q3_K", kQK, 2 + kQK / 4 + kQK / 8 + 12, false},
    /* 12 */ {"Q4_K", kQK, 2 + 2 + kQK / 2 + 12, true},
    /* 13 */ {"Q5_K", kQK, 2 + 2 + kQK / 2 + kQK / 8 + 12, true},
    /* 14 */ {"Q6_K", kQK, 2 + kQK / 2 + kQK / 4 + kQK / 16, true},
    /* 15 */ {"Q8_K", kQK, 4 + kQK + kQK / 8, false},
    /* 16 */ {"IQ2_XXS", kQK, 2 + kQK / 4, false},
    /* 17 */ {"IQ2_XS", kQK, 2 + kQK / 4 + kQK / 32, false},
    /* 18 */ {"IQ3_XXS", kQK, 2 + kQK / 4 + kQK / 8, false},
    /* 19 */ {"IQ1_S", kQK, 2 + kQK / 8 + kQK / 16, false},
    /* 20 */ {"IQ4_NL", 32, 2 + 16, false},
    /* 21 */ {"IQ3_S", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4, false},
    /* 22 */ {"IQ2_S", kQK, 2 + kQK / 4 + kQK / 16, false},
    /* 23 */ {"IQ4_XS", kQK, 2 + 2 + kQK / 2 + kQK / 64, false},
    /* 24 */ {"I8", 1, 1, false},
    /* 25 */ {"I16", 1, 2, false},
    /* 26 */ {"I32", 1, 4, false},
    /* 27 */ {"I64", 1, 8, false},
    /* 28 */ {"F64", 1, 8, false},
    /* 29 */ {"IQ1_M", kQK, kQK / 8 + kQK / 16 + kQK / 32, false},
    /* 30 */ {"BF16", 1, 2, true},
    /* 31 */ {"Q4_0_4_4 (removed)", 0, 0, false},
    /* 32 */ {"Q4_0_4_8 (removed)", 0, 0, false},
    /* 33 */ {"Q4_0_8_8 (removed)", 0, 0, false},
    /* 34 */ {"TQ1_0", kQK, 2 + 4 * 13, false},
    /* 35 */ {"TQ2_0", kQK, 2 + 64, false},
    /* 36 */ {"IQ4_NL_4_4 (removed)", 0, 0, false},
    /* 37 */ {"IQ4_NL_4_8 (removed)", 0, 0, false},
    /* 38 */ {"IQ4_NL_8_8 (removed)", 0, 0, false},
    /* 39 */ {"MXFP4", 32, 1 + 16, false},
    /* 40 */ {"NVFP4", 64, 4 + 32, false},
    /* 41 */ {"Q1_0", 128, 2 + 16, false},
};
constexpr size_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

const TypeTraits* traits(GgmlType type) {
  const auto id = static_cast<uint32_t>(type);
  return id < kTypeCount ? &kTypes[id] : nullptr;
}

constexpr const char* kValueTypeNames[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};

}  // namespace

const char* ggml_type_name(GgmlType type) {
  const TypeTraits* t = traits(type);
  return t ? t->name : nullptr;
}

int64_t ggml_block_size(GgmlType type) {
  const TypeTraits* t = traits(type);
  return t ? t->block_size : 0;
}

int64_t ggml_type_size(GgmlType type) {
  const TypeTraits* t = traits(type);
  return t ? t->type_size : 0;
}

bool ggml_type_can_dequantize(GgmlType type) {
  const TypeTraits* t = traits(type);
  return t && t->can_dequantize;
}

const char* gguf_value_type_name(GgufValueType type) {
  const auto id = static_cast<uint32_t>(type);
  return id < sizeof(kValueTypeNames) / sizeof(kValueTypeNames[0]) ? kValueTypeNames[id] : nullptr;
}

}  // namespace flashscope
