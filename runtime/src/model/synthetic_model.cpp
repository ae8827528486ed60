// Synthetic llama models (model/synthetic_model.hpp, flashscope::build_synthetic_model).
//
// Weights are random *blocks* (random quants under a chosen scale), not
// quantized floats: every bit pattern of Q4_1, Q8_0, ... is a valid block,
// and the tests dequantize the same bytes for their float reference, so no
// quantizer is needed and the reference sees exactly what the engine sees.
// Scales are set so a matrix [rows, cols] maps unit-RMS inputs to unit-RMS
// outputs (uniform values in ±sqrt(3 / cols)), which keeps activations in a
// realistic range over a few layers. The draw order is fixed: tests pick
// seeds for the properties of the model they give.
#include "model/synthetic_model.hpp"

#include <cmath>
#include <cstring>
#include <fstream>

#include "backends/cpu/quant_matmul.hpp"
#include "flashscope/attention.hpp"
#include "flashscope/half.hpp"

namespace flashscope::model {

GgmlType synthetic_mix_row_type(GgmlType type, int64_t cols, bool mix) {
  if (!mix || cols % 256 == 0) return type;
  switch (type) {
    case GgmlType::kQ4_K: return GgmlType::kQ5_0;
    case GgmlType::kQ5_K: return GgmlType::kQ5_1;
    case GgmlType::kQ6_K: return GgmlType::kQ8_0;
    default: return type;
  }
}

// llama.cpp's general.file_type (llama_ftype) for the spec's matrix type
// and mix, as its quantizer writes it: what llama-bench names the file by
// (without it llama.cpp guesses from the tensors, and a mix with fallback
// types reads as another). 0 (all F32) for a type llama_ftype has no name for.
uint32_t synthetic_file_type(GgmlType matrix_type, bool mix) {
  switch (matrix_type) {
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ2_K: return 10;
    case GgmlType::kQ3_K: return mix ? 12 : 11;
    case GgmlType::kQ4_K: return mix ? 15 : 14;
    case GgmlType::kQ5_K: return mix ? 17 : 16;
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kBF16: return 32;
    default: return 0;
  }
}

GgufBuilder::Bytes synthetic_random_blocks(GgmlType type, int64_t n, float scale, std::mt19937_64& rng) {
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
      case GgmlType::kQ5_K:
        put_fp16(2.0f * scale / (31.0f * 63.0f));
        put_fp16(scale / 63.0f);
        put_bytes(12 + 32 + 128);
        break;
      case GgmlType::kQ2_K:
        put_bytes(16 + 64);
        put_fp16(2.0f * scale / (3.0f * 15.0f));
        put_fp16(scale / 15.0f);
        break;
      case GgmlType::kQ3_K:
        put_bytes(32 + 64 + 12);
        put_fp16(scale / (4.0f * 32.0f));
        break;
      default:  // raw bytes of the right size for anything else
        put_bytes(static_cast<int>(ggml_type_size(type)));
        break;
    }
  }
  return out;
}

std::vector<std::string> synthetic_vocabulary(int vocab) {
  std::vector<std::string> t = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int c = 33; c <= 126; ++c) t.push_back(std::string(1, static_cast<char>(c)));
  t.push_back("\xC4\xA0");  // U+0120 Ġ = byte 0x20
  t.push_back("\xC4\x8A");  // U+010A Ċ = byte 0x0A
  for (int i = 0; static_cast<int>(t.size()) < vocab; ++i) t.push_back("<filler" + std::to_string(i) + ">");
  t.resize(static_cast<size_t>(vocab));
  return t;
}

GgufBuilder::Bytes build_synthetic_llama(const SyntheticModelSpec& spec, const SyntheticBreakage& breakage) {
  // The spec's and the breakage's fields under the names the body uses.
  const int n_layers = spec.n_layers, hidden = spec.hidden, n_heads = spec.n_heads, n_kv_heads = spec.n_kv_heads;
  const int head_dim = spec.head_dim, ffn = spec.ffn, vocab = spec.vocab, context = spec.context;
  const int rope_dim = spec.rope_dim > 0 ? spec.rope_dim : spec.head_dim;
  const float rope_base = spec.rope_base, rms_eps = spec.rms_eps;
  const bool tied = spec.tied;
  const GgmlType matrix_type = spec.matrix_type, embd_type = spec.embd_type, output_type = spec.output_type;
  const uint64_t seed = spec.seed;
  const auto& skip_keys = breakage.skip_keys;
  const auto& skip_tensors = breakage.skip_tensors;
  const auto& shape_override = breakage.shape_override;
  const auto& type_override = breakage.type_override;
  const auto& string_override = breakage.string_override;
  const auto& extra = breakage.extra;

  const std::string arch = spec.architecture;
  const std::string a = arch + ".";
  const bool qwen2 = arch == "qwen2", gemma3 = arch == "gemma3", qk_norm = arch == "qwen3" || gemma3;
  const bool phi3 = arch == "phi3";  // fused attn_qkv and ffn_up

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
  str("general.architecture", arch);
  str("general.name", "synthetic");
  u32("general.file_type", synthetic_file_type(matrix_type, spec.more_bits_type != GgmlType::kF32));
  u32(a + "block_count", static_cast<uint32_t>(n_layers));
  u32(a + "context_length", static_cast<uint32_t>(context));
  u32(a + "embedding_length", static_cast<uint32_t>(hidden));
  u32(a + "feed_forward_length", static_cast<uint32_t>(ffn));
  u32(a + "attention.head_count", static_cast<uint32_t>(n_heads));
  u32(a + "attention.head_count_kv", static_cast<uint32_t>(n_kv_heads));
  u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
  u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
  f32(a + "rope.freq_base", rope_base);
  u32(a + "rope.dimension_count", static_cast<uint32_t>(rope_dim));
  f32(a + "attention.layer_norm_rms_epsilon", rms_eps);
  u32(a + "vocab_size", static_cast<uint32_t>(vocab));
  if (gemma3 && spec.sliding_window > 0) u32(a + "attention.sliding_window", static_cast<uint32_t>(spec.sliding_window));

  const std::vector<std::string> toks = synthetic_vocabulary(vocab);
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
      "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
  if (extra) extra(b);

  std::mt19937_64 rng(seed);
  auto tensor = [&](const std::string& name, GgmlType type, std::vector<uint64_t> ne, float scale) {
    if (skip_tensors.count(name)) return;
    if (auto it = shape_override.find(name); it != shape_override.end()) ne = it->second;
    type = synthetic_mix_row_type(type, static_cast<int64_t>(ne[0]), spec.more_bits_type != GgmlType::kF32);
    if (auto it = type_override.find(name); it != type_override.end()) type = it->second;
    int64_t n = 1;
    for (uint64_t d : ne) n *= static_cast<int64_t>(d);
    b.add_tensor(name, type, ne, synthetic_random_blocks(type, n, scale, rng));
  };
  auto norm = [&](const std::string& name, int dim = 0) {
    if (skip_tensors.count(name)) return;
    std::vector<uint64_t> ne = {static_cast<uint64_t>(dim > 0 ? dim : hidden)};
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
    const bool more_bits = spec.more_bits_type != GgmlType::kF32 && synthetic_use_more_bits(l, n_layers);
    if (phi3) {
      tensor(p + "attn_qkv.weight", matrix_type, {h, qd + 2 * kvd}, unit(h));
    } else {
      tensor(p + "attn_q.weight", matrix_type, {h, qd}, unit(h));
      tensor(p + "attn_k.weight", matrix_type, {h, kvd}, unit(h));
      tensor(p + "attn_v.weight", more_bits ? spec.more_bits_type : matrix_type, {h, kvd}, unit(h));
    }
    tensor(p + "attn_output.weight", matrix_type, {qd, h}, unit(qd));
    if (qwen2) {
      tensor(p + "attn_q.bias", GgmlType::kF32, {qd}, 0.5f);
      tensor(p + "attn_k.bias", GgmlType::kF32, {kvd}, 0.5f);
      tensor(p + "attn_v.bias", GgmlType::kF32, {kvd}, 0.5f);
    }
    if (qk_norm) {
      norm(p + "attn_q_norm.weight", head_dim);
      norm(p + "attn_k_norm.weight", head_dim);
    }
    if (gemma3) {
      norm(p + "post_attention_norm.weight");
      norm(p + "post_ffw_norm.weight");
    }
    norm(p + "ffn_norm.weight");
    if (phi3) {
      tensor(p + "ffn_up.weight", matrix_type, {h, 2 * f}, unit(h));
    } else {
      tensor(p + "ffn_gate.weight", matrix_type, {h, f}, unit(h));
      tensor(p + "ffn_up.weight", matrix_type, {h, f}, unit(h));
    }
    tensor(p + "ffn_down.weight", more_bits ? spec.more_bits_type : matrix_type, {f, h}, unit(f));
  }
  norm("output_norm.weight");
  if (!tied) tensor("output.weight", output_type, {h, static_cast<uint64_t>(vocab)}, unit(h));
  return b.build();
}

}  // namespace flashscope::model

namespace flashscope {

bool synthetic_use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

namespace {

// ne[0] of a matrix of `type` must be whole blocks.
Status check_row(const char* what, int cols, GgmlType type) {
  const char* name = ggml_type_name(type);
  if (name == nullptr || !cpu::matmul_supports(type)) {
    return invalid_argument(std::string(what) + ": type " + (name ? name : "(unknown)") +
                            " is not one the engine multiplies (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, "
                            "q3_k, q4_k, q5_k, q6_k)");
  }
  const int64_t block = ggml_block_size(type);
  if (block < 1 || cols % block != 0) {
    return invalid_argument(std::string(what) + ": rows of " + std::to_string(cols) + " elements are not whole " +
                            name + " blocks of " + std::to_string(block));
  }
  return Status::ok_status();
}

Status check_spec(const SyntheticModelSpec& s) {
  if (s.n_layers < 1 || s.hidden < 1 || s.n_heads < 1 || s.n_kv_heads < 1 || s.ffn < 1 || s.context < 1)
    return invalid_argument("synthetic model: layers, dim, heads, kv-heads, ffn and context must be >= 1");
  if (s.architecture != "llama" && s.architecture != "qwen2" && s.architecture != "qwen3" &&
      s.architecture != "gemma3" && s.architecture != "phi3")
    return invalid_argument("synthetic model: architecture '" + s.architecture +
                            "' is not one of llama, qwen2, qwen3, gemma3, phi3");
  if (s.sliding_window < 0 || s.sliding_window > s.context || (s.sliding_window > 0 && s.architecture != "gemma3"))
    return invalid_argument("synthetic model: sliding_window is for gemma3 only, in [0, context]");
  if (s.vocab < 3) return invalid_argument("synthetic model: vocab must be >= 3 (the special tokens)");
  if (!supported_head_dim(s.head_dim))
    return invalid_argument("synthetic model: head_dim " + std::to_string(s.head_dim) +
                            " is not supported (32, 64, 80, 96, 128, 256)");
  if (s.n_heads % s.n_kv_heads != 0)
    return invalid_argument("synthetic model: heads (" + std::to_string(s.n_heads) + ") must be a multiple of kv-heads (" +
                            std::to_string(s.n_kv_heads) + ")");
  const int rope = s.rope_dim > 0 ? s.rope_dim : s.head_dim;
  if (rope % 2 != 0 || rope > s.head_dim || s.rope_dim < 0)
    return invalid_argument("synthetic model: rope_dim must be even and at most head_dim");
  if (!(s.rope_base > 0.0f) || !(s.rms_eps > 0.0f))
    return invalid_argument("synthetic model: rope base and rms eps must be > 0");
  const int64_t qd = int64_t{s.n_heads} * s.head_dim;
  if (qd > (int64_t{1} << 30) || int64_t{s.hidden} * s.ffn > (int64_t{1} << 34))
    return invalid_argument("synthetic model: too large");
  const bool mix = s.more_bits_type != GgmlType::kF32;
  auto row_type = [&](int cols, GgmlType type) { return model::synthetic_mix_row_type(type, cols, mix); };
  FLASHSCOPE_RETURN_IF_ERROR(check_row("dim (attention and FFN inputs)", s.hidden, row_type(s.hidden, s.matrix_type)));
  FLASHSCOPE_RETURN_IF_ERROR(check_row("heads x head_dim (attn_output input)", static_cast<int>(qd),
                                       row_type(static_cast<int>(qd), s.matrix_type)));
  FLASHSCOPE_RETURN_IF_ERROR(check_row("ffn (ffn_down input)", s.ffn, row_type(s.ffn, s.matrix_type)));
  if (mix) {
    FLASHSCOPE_RETURN_IF_ERROR(
        check_row("dim (attn_v rows, more bits)", s.hidden, row_type(s.hidden, s.more_bits_type)));
    FLASHSCOPE_RETURN_IF_ERROR(check_row("ffn (ffn_down rows, more bits)", s.ffn, row_type(s.ffn, s.more_bits_type)));
  }
  FLASHSCOPE_RETURN_IF_ERROR(check_row("dim (token_embd rows)", s.hidden, row_type(s.hidden, s.embd_type)));
  if (!s.tied)
    FLASHSCOPE_RETURN_IF_ERROR(check_row("dim (output rows)", s.hidden, row_type(s.hidden, s.output_type)));
  return Status::ok_status();
}

}  // namespace

Result<std::vector<uint8_t>> build_synthetic_model(const SyntheticModelSpec& spec) {
  FLASHSCOPE_RETURN_IF_ERROR(check_spec(spec));
  try {
    return model::build_synthetic_llama(spec);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "synthetic model: cannot allocate the file");
  }
}

Status write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path) {
  auto bytes = build_synthetic_model(spec);
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status(StatusCode::kIoError, "cannot open " + path + " for writing");
  out.write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return Status(StatusCode::kIoError, "cannot write " + path);
  return Status::ok_status();
}

}  // namespace flashscope
