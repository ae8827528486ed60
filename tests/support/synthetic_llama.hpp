// Small synthetic llama GGUF models, built in memory for the engine tests:
// random weights in the block type asked for, a byte-level vocabulary that
// can spell ASCII text, and knobs to break any key or tensor on purpose.
//
// Weights are random *blocks* (random quants under a chosen scale), not
// quantized floats: every bit pattern of Q4_1, Q8_0, ... is a valid block,
// and the tests dequantize the same bytes for their float reference, so no
// quantizer is needed and the reference sees exactly what the engine sees.
// Scales are set so a matrix [rows, cols] maps unit-RMS inputs to unit-RMS
// outputs (uniform values in ±sqrt(3 / cols)), which keeps activations in a
// realistic range over a few layers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/half.hpp"
#include "support/gguf_builder.hpp"

namespace flashscope::testing {

struct SyntheticLlama {
  int n_layers = 2;
  int hidden = 64;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 64;  // written as llama.attention.key_length (hidden / heads would be 16)
  int ffn = 96;
  int vocab = 100;
  int context = 512;
  int rope_dim = 64;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = true;

  GgmlType matrix_type = GgmlType::kQ4_1;  // attention and FFN matrices
  GgmlType embd_type = GgmlType::kQ8_0;
  GgmlType output_type = GgmlType::kQ8_0;  // when not tied
  uint64_t seed = 1;

  // Breakage for the error tests.
  std::set<std::string> skip_keys;
  std::set<std::string> skip_tensors;
  std::map<std::string, std::vector<uint64_t>> shape_override;  // ne, innermost first
  std::map<std::string, GgmlType> type_override;               // data sized for the new type and shape
  std::map<std::string, std::string> string_override;          // e.g. general.architecture
  std::function<void(GgufBuilder&)> extra;                     // more keys or tensors

  // Random blocks of `type` holding n elements (n a multiple of its block
  // size), values roughly uniform in ±scale.
  static GgufBuilder::Bytes random_blocks(GgmlType type, int64_t n, float scale, std::mt19937_64& rng) {
    GgufBuilder::Bytes out;
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::uniform_int_distribution<int> byte(0, 255);
    auto put_u16 = [&](uint16_t v) { GgufBuilder::append(out, v); };
    auto put_fp16 = [&](float f) { put_u16(float_to_fp16(f)); };
    auto put_bytes = [&](int count) {
      for (int i = 0; i < count; ++i) out.push_back(static_cast<uint8_t>(byte(rng)));
    };
    const int64_t bs = ggml_block_size(type);
    const int64_t blocks = n / bs;
    for (int64_t b = 0; b < (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ? n : blocks);
         ++b) {
      switch (type) {
        case GgmlType::kF32: GgufBuilder::append(out, uni(rng) * scale); break;
        case GgmlType::kF16: put_fp16(uni(rng) * scale); break;
        case GgmlType::kBF16: put_u16(float_to_bf16(uni(rng) * scale)); break;
        case GgmlType::kQ8_0: {
          put_fp16(scale / 127.0f);
          std::uniform_int_distribution<int> q(-127, 127);
          for (int j = 0; j < 32; ++j) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(q(rng))));
          break;
        }
        case GgmlType::kQ4_0: put_fp16(scale / 8.0f); put_bytes(16); break;
        case GgmlType::kQ4_1: put_fp16(2.0f * scale / 15.0f); put_fp16(-scale); put_bytes(16); break;
        case GgmlType::kQ5_0: put_fp16(scale / 16.0f); put_bytes(4 + 16); break;
        case GgmlType::kQ5_1: put_fp16(2.0f * scale / 31.0f); put_fp16(-scale); put_bytes(4 + 16); break;
        case GgmlType::kQ4_K:
          put_fp16(2.0f * scale / (15.0f * 63.0f));
          put_fp16(scale / 63.0f);
          put_bytes(12 + 128);
          break;
        case GgmlType::kQ6_K: {
          put_bytes(128 + 64);
          std::uniform_int_distribution<int> sc(-63, 63);
          for (int j = 0; j < 16; ++j) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(sc(rng))));
          put_fp16(scale / (32.0f * 63.0f));
          break;
        }
        default:  // raw bytes of the right size for anything else
          put_bytes(static_cast<int>(ggml_type_size(type)));
          break;
      }
    }
    return out;
  }

  // The vocabulary: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|> (control),
  // then the byte tokens of printable ASCII, "Ġ" (space) and "Ċ" (newline)
  // in GPT-2's bytes_to_unicode spelling, then fillers up to `vocab`.
  std::vector<std::string> tokens() const {
    std::vector<std::string> t = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int c = 33; c <= 126; ++c) t.push_back(std::string(1, static_cast<char>(c)));
    t.push_back("\xC4\xA0");  // U+0120 Ġ = byte 0x20
    t.push_back("\xC4\x8A");  // U+010A Ċ = byte 0x0A
    for (int i = 0; static_cast<int>(t.size()) < vocab; ++i) t.push_back("<filler" + std::to_string(i) + ">");
    t.resize(static_cast<size_t>(vocab));
    return t;
  }

  GgufBuilder::Bytes build() const {
    GgufBuilder b;
    auto key_ok = [&](const std::string& k) { return skip_keys.count(k) == 0; };
    auto str = [&](const std::string& k, const std::string& v) {
      if (!key_ok(k)) return;
      auto it = string_override.find(k);
      b.add_string(k, it == string_override.end() ? v : it->second);
    };
    auto u32 = [&](const std::string& k, uint32_t v) {
      if (key_ok(k)) b.add_u32(k, v);
    };
    auto f32 = [&](const std::string& k, float v) {
      if (key_ok(k)) b.add_f32(k, v);
    };
    str("general.architecture", "llama");
    str("general.name", "synthetic");
    u32("llama.block_count", static_cast<uint32_t>(n_layers));
    u32("llama.context_length", static_cast<uint32_t>(context));
    u32("llama.embedding_length", static_cast<uint32_t>(hidden));
    u32("llama.feed_forward_length", static_cast<uint32_t>(ffn));
    u32("llama.attention.head_count", static_cast<uint32_t>(n_heads));
    u32("llama.attention.head_count_kv", static_cast<uint32_t>(n_kv_heads));
    u32("llama.attention.key_length", static_cast<uint32_t>(head_dim));
    u32("llama.attention.value_length", static_cast<uint32_t>(head_dim));
    f32("llama.rope.freq_base", rope_base);
    u32("llama.rope.dimension_count", static_cast<uint32_t>(rope_dim));
    f32("llama.attention.layer_norm_rms_epsilon", rms_eps);
    u32("llama.vocab_size", static_cast<uint32_t>(vocab));

    const std::vector<std::string> toks = tokens();
    std::vector<int64_t> types(toks.size(), 1);
    types[0] = types[1] = types[2] = 3;
    str("tokenizer.ggml.model", "gpt2");
    str("tokenizer.ggml.pre", "smollm");
    if (key_ok("tokenizer.ggml.tokens")) b.add_string_array("tokenizer.ggml.tokens", toks);
    if (key_ok("tokenizer.ggml.token_type")) b.add_int_array("tokenizer.ggml.token_type", GgufValueType::kI32, types);
    if (key_ok("tokenizer.ggml.merges")) b.add_string_array("tokenizer.ggml.merges", {});
    u32("tokenizer.ggml.bos_token_id", 1);
    u32("tokenizer.ggml.eos_token_id", 2);
    str("tokenizer.chat_template",
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
        "'<|im_start|>system\nYou are a synthetic test model<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
        "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}");
    if (extra) extra(b);

    std::mt19937_64 rng(seed);
    auto tensor = [&](const std::string& name, GgmlType type, std::vector<uint64_t> ne, float scale) {
      if (skip_tensors.count(name)) return;
      if (auto it = shape_override.find(name); it != shape_override.end()) ne = it->second;
      if (auto it = type_override.find(name); it != type_override.end()) type = it->second;
      int64_t n = 1;
      for (uint64_t d : ne) n *= static_cast<int64_t>(d);
      b.add_tensor(name, type, ne, random_blocks(type, n, scale, rng));
    };
    auto norm = [&](const std::string& name) {
      if (skip_tensors.count(name)) return;
      std::vector<uint64_t> ne = {static_cast<uint64_t>(hidden)};
      if (auto it = shape_override.find(name); it != shape_override.end()) ne = it->second;
      GgufBuilder::Bytes data;
      std::uniform_real_distribution<float> uni(0.8f, 1.2f);
      for (uint64_t i = 0; i < ne[0]; ++i) GgufBuilder::append(data, uni(rng));
      b.add_tensor(name, GgmlType::kF32, ne, data);
    };
    const auto h = static_cast<uint64_t>(hidden);
    const auto qd = static_cast<uint64_t>(n_heads * head_dim);
    const auto kvd = static_cast<uint64_t>(n_kv_heads * head_dim);
    const auto f = static_cast<uint64_t>(ffn);
    auto unit = [](uint64_t cols) { return std::sqrt(3.0f / static_cast<float>(cols)); };
    tensor("token_embd.weight", embd_type, {h, static_cast<uint64_t>(vocab)}, 1.0f);
    for (int l = 0; l < n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      norm(p + "attn_norm.weight");
      tensor(p + "attn_q.weight", matrix_type, {h, qd}, unit(h));
      tensor(p + "attn_k.weight", matrix_type, {h, kvd}, unit(h));
      tensor(p + "attn_v.weight", matrix_type, {h, kvd}, unit(h));
      tensor(p + "attn_output.weight", matrix_type, {qd, h}, unit(qd));
      norm(p + "ffn_norm.weight");
      tensor(p + "ffn_gate.weight", matrix_type, {h, f}, unit(h));
      tensor(p + "ffn_up.weight", matrix_type, {h, f}, unit(h));
      tensor(p + "ffn_down.weight", matrix_type, {f, h}, unit(f));
    }
    norm("output_norm.weight");
    if (!tied) tensor("output.weight", output_type, {h, static_cast<uint64_t>(vocab)}, unit(h));
    return b.build();
  }
};

}  // namespace flashscope::testing
