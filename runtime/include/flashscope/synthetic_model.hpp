// Synthetic models (llama, qwen2, qwen3, gemma3, phi3): GGUF files built from a spec, with random weights
// of the chosen types (Model::load reads them like any other file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/status.hpp"

namespace flashscope {

// A small llama model with random weights, for tests and GPU runs of any
// shape (`flashscope-cli make-model` writes one). The weights are random
// blocks of the chosen types (every bit pattern of Q4_1, Q8_0, ... is a
// valid block) scaled so a matrix maps unit-RMS inputs to unit-RMS outputs;
// norms are near 1. The vocabulary can spell ASCII: <|endoftext|> (0),
// <|im_start|> (1, bos), <|im_end|> (2, eos), the byte tokens of printable
// ASCII, space and newline, then fillers; byte-level BPE with no merges and
// a ChatML template. The same spec always gives the same bytes.
struct SyntheticModelSpec {
  // general.architecture: "llama", "qwen2" (adds Q/K/V biases), "qwen3"
  // (adds attn_q_norm / attn_k_norm), "gemma3" (QK-norms, post-norms and
  // attention.sliding_window = sliding_window), "phi3" (fused attn_qkv and
  // ffn_up [2·ffn]).
  std::string architecture = "llama";
  int sliding_window = 0;  // gemma3 only; 0 writes no window
  int n_layers = 2;
  int hidden = 64;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 64;  // one of supported_head_dim's (attention.hpp); written as attention.key_length
  int ffn = 96;
  int vocab = 100;    // >= 99 keeps every ASCII byte token
  int context = 512;
  int rope_dim = 0;   // rotated dims per head; 0: head_dim
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = true;   // no output.weight: the LM head is token_embd
  GgmlType matrix_type = GgmlType::kQ4_1;  // attention and FFN matrices
  GgmlType embd_type = GgmlType::kQ8_0;
  GgmlType output_type = GgmlType::kQ8_0;  // when not tied
  // llama.cpp's *_K_M mix (llama-quant.cpp): attn_v and ffn_down of the
  // layers its use_more_bits picks (the first and last eighth, every third
  // between) take this type instead of matrix_type; kF32 (the default):
  // no mix. make-model's --type q4_k_m is Q4_K matrices with Q6_K here and
  // Q6_K embeddings (the tied LM head) and output. In a mix, a matrix whose
  // rows are not whole 256-element super-blocks takes llama.cpp's fallback
  // (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0), as Gemma-3's dim 640 does.
  GgmlType more_bits_type = GgmlType::kF32;
  uint64_t seed = 1;
};

// Whether llama.cpp's *_K_M rule gives layer i of n more bits.
bool synthetic_use_more_bits(int i, int n);

// The GGUF file of `spec`. kInvalidArgument naming the field when the spec
// cannot make a model Model::load accepts (counts < 1, a head_dim no attention path runs,
// n_heads not a multiple of n_kv_heads, a row length that is not a whole
// number of its type's blocks, a type the engine cannot multiply, ...).
Result<std::vector<uint8_t>> build_synthetic_model(const SyntheticModelSpec& spec);
// The same written to `path` (kIoError when it cannot be written).
Status write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path);

}  // namespace flashscope
