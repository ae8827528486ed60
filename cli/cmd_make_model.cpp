// `flashscope-cli make-model`: writes a small GGUF (llama, qwen2, qwen3, gemma3) with random weights
// of any shape and weight types (flashscope::build_synthetic_model), for
// tests and GPU runs without downloading a model: every engine path
// (each head_dim, any GQA ratio, each weight type) on any size, and the
// shapes of the models the benchmarks name (--preset).
#include <cctype>
#include <cstdio>
#include <string>
#include <utility>

#include "args.hpp"
#include "commands.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/synthetic_model.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli make-model --out FILE [--preset NAME] [--layers N] [--dim D] [--heads H]\n"
    "                                 [--kv-heads HK] [--head-dim D] [--ffn F] [--vocab V] [--context C]\n"
    "                                 [--rope-dim R] [--rope-base B] [--type T] [--embd-type T] [--output-type T]\n"
    "                                 [--untied] [--seed S] [--arch llama|qwen2|qwen3|gemma3|phi3] [--window W]\n"
    "  --preset              tiny (default: 2 layers, dim 64, 4/2 heads, D64, ffn 96, vocab 100, context 512)\n"
    "                        or smollm2-135m (30 layers, dim 576, 9/3 heads, D64, ffn 1536, vocab 49152,\n"
    "                        context 8192, rope base 100000), llama3.2-1b (16 layers, dim 2048, 32/8 heads, D64,\n"
    "                        ffn 8192, vocab 128256, rope base 500000), qwen3-1.7b (qwen3: 28 layers, dim 2048,\n"
    "                        16/8 heads, D128, ffn 6144, vocab 151936, QK-norm, rope base 1000000, rms eps 1e-6),\n"
    "                        qwen3-0.6b (qwen3: 28 layers, dim 1024, 16/8 heads, D128, ffn 3072, vocab 151936,\n"
    "                        QK-norm, rope base 1000000, rms eps 1e-6) or gemma3-270m (gemma3: 18\n"
    "                        layers, dim 640, 4/1 heads, D256, ffn 2048, vocab 262144, window 512 on 5 of 6\n"
    "                        layers, rope base 1000000, rms eps 1e-6), all with context 8192; the flags below\n"
    "                        override it\n"
    "  --head-dim D          32, 64, 80, 96, 128 or 256 (the CPU and CUDA run each)\n"
    "  --type T              attention and FFN matrices: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k\n"
    "                        (default q4_1), or a llama.cpp mix: q4_k_m / q5_k_m (Q4_K / Q5_K matrices, Q6_K for\n"
    "                        attn_v and ffn_down of the layers llama.cpp gives more bits, Q6_K embeddings and\n"
    "                        output); --embd-type (default q8_0), --output-type (default q8_0, with --untied)\n"
    "  --untied              write output.weight (default: the LM head is token_embd)\n"
    "  --rope-dim R          rotated dims per head (default: head_dim)\n"
    "  --seed S              weights' seed (default 1): the same flags always write the same file\n"
    "  --arch A              llama (default), qwen2 (Q/K/V biases), qwen3 (QK-norm), gemma3 (QK-norm, post-norms),\n"
    "                        phi3 (fused QKV and gate-up)\n"
    "  --window W            gemma3's sliding window (default: none)\n"
    "The model loads with Model::load and `generate -m FILE`; its vocabulary spells ASCII bytes.\n";

bool parse_type(const std::string& text, GgmlType* out) {
  std::string upper;
  for (char ch : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (uint32_t id = 0; id < 64; ++id) {
    const char* name = ggml_type_name(static_cast<GgmlType>(id));
    if (name != nullptr && upper == name) {
      *out = static_cast<GgmlType>(id);
      return true;
    }
  }
  return false;
}

}  // namespace

int cmd_make_model(int argc, char** argv) {
  Args args(argc, argv,
            {"out", "preset", "layers", "dim", "heads", "kv-heads", "head-dim", "ffn", "vocab", "context", "rope-dim",
             "rope-base", "type", "embd-type", "output-type", "seed", "arch", "window"},
            {"untied", "help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!args.ok() || !args.has("out") || !args.positional().empty()) {
    std::fprintf(stderr, "flashscope-cli make-model: %s\n%s",
                 !args.ok() ? args.error().c_str()
                            : (!args.has("out") ? "--out FILE is required" : "unexpected positional argument"),
                 kUsage);
    return 2;
  }
  SyntheticModelSpec spec;
  const std::string preset = args.get("preset", "tiny");
  if (preset == "smollm2-135m") {
    spec.n_layers = 30;
    spec.hidden = 576;
    spec.n_heads = 9;
    spec.n_kv_heads = 3;
    spec.head_dim = 64;
    spec.ffn = 1536;
    spec.vocab = 49152;
    spec.context = 8192;
    spec.rope_base = 100000.0f;
  } else if (preset == "llama3.2-1b") {
    spec.n_layers = 16;
    spec.hidden = 2048;
    spec.n_heads = 32;
    spec.n_kv_heads = 8;
    spec.head_dim = 64;
    spec.ffn = 8192;
    spec.vocab = 128256;
    spec.context = 8192;
    spec.rope_base = 500000.0f;
  } else if (preset == "qwen3-1.7b") {
    spec.architecture = "qwen3";
    spec.n_layers = 28;
    spec.hidden = 2048;
    spec.n_heads = 16;
    spec.n_kv_heads = 8;
    spec.head_dim = 128;
    spec.ffn = 6144;
    spec.vocab = 151936;
    spec.context = 8192;
    spec.rope_base = 1000000.0f;
    spec.rms_eps = 1e-6f;
  } else if (preset == "qwen3-0.6b") {
    spec.architecture = "qwen3";
    spec.n_layers = 28;
    spec.hidden = 1024;
    spec.n_heads = 16;
    spec.n_kv_heads = 8;
    spec.head_dim = 128;
    spec.ffn = 3072;
    spec.vocab = 151936;
    spec.context = 8192;
    spec.rope_base = 1000000.0f;
    spec.rms_eps = 1e-6f;
  } else if (preset == "gemma3-270m") {
    spec.architecture = "gemma3";
    spec.n_layers = 18;
    spec.hidden = 640;
    spec.n_heads = 4;
    spec.n_kv_heads = 1;
    spec.head_dim = 256;
    spec.ffn = 2048;
    spec.vocab = 262144;
    spec.context = 8192;
    spec.sliding_window = 512;
    spec.rope_base = 1000000.0f;
    spec.rms_eps = 1e-6f;
  } else if (preset != "tiny") {
    std::fprintf(stderr,
                 "flashscope-cli make-model: --preset must be tiny, smollm2-135m, llama3.2-1b, qwen3-1.7b, "
                 "qwen3-0.6b or gemma3-270m\n");
    return 2;
  }
  spec.n_layers = static_cast<int>(args.get_int("layers", spec.n_layers));
  spec.hidden = static_cast<int>(args.get_int("dim", spec.hidden));
  spec.n_heads = static_cast<int>(args.get_int("heads", spec.n_heads));
  spec.n_kv_heads = static_cast<int>(args.get_int("kv-heads", spec.n_kv_heads));
  spec.head_dim = static_cast<int>(args.get_int("head-dim", spec.head_dim));
  spec.ffn = static_cast<int>(args.get_int("ffn", spec.ffn));
  spec.vocab = static_cast<int>(args.get_int("vocab", spec.vocab));
  spec.context = static_cast<int>(args.get_int("context", spec.context));
  spec.rope_dim = static_cast<int>(args.get_int("rope-dim", 0));
  spec.rope_base = static_cast<float>(args.get_double("rope-base", spec.rope_base));
  spec.seed = static_cast<uint64_t>(args.get_int("seed", 1));
  spec.tied = !args.has("untied");
  spec.architecture = args.get("arch", spec.architecture);
  spec.sliding_window = static_cast<int>(args.get_int("window", spec.sliding_window));
  if (!args.ok()) {
    std::fprintf(stderr, "flashscope-cli make-model: %s\n%s", args.error().c_str(), kUsage);
    return 2;
  }
  // llama.cpp's *_K_M mixes: the embeddings (the tied LM head) and output in Q6_K.
  if (args.get("type") == "q4_k_m" || args.get("type") == "q5_k_m") {
    spec.matrix_type = args.get("type") == "q4_k_m" ? GgmlType::kQ4_K : GgmlType::kQ5_K;
    spec.more_bits_type = GgmlType::kQ6_K;
    spec.embd_type = GgmlType::kQ6_K;
    spec.output_type = GgmlType::kQ6_K;
  }
  for (auto [flag, field] : {std::pair<const char*, GgmlType*>{"type", &spec.matrix_type},
                             {"embd-type", &spec.embd_type},
                             {"output-type", &spec.output_type}}) {
    if (spec.more_bits_type != GgmlType::kF32 && std::string(flag) == "type") continue;  // a mix, set above
    if (args.has(flag) && !parse_type(args.get(flag), field)) {
      std::fprintf(stderr, "flashscope-cli make-model: --%s: unknown type '%s'\n", flag, args.get(flag).c_str());
      return 2;
    }
  }

  const std::string out = args.get("out");
  const Status written = write_synthetic_model(spec, out);
  if (!written.ok()) {
    std::fprintf(stderr, "flashscope-cli make-model: %s\n", written.to_string().c_str());
    return written.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string head =
      spec.tied ? "tied LM head" : std::string("untied ") + ggml_type_name(spec.output_type) + " LM head";
  // In a mix, rows that are not whole 256-element super-blocks take llama.cpp's fallback types.
  const bool fallback = spec.more_bits_type != GgmlType::kF32 &&
                        (spec.hidden % 256 != 0 || spec.ffn % 256 != 0 || spec.n_heads * spec.head_dim % 256 != 0);
  const std::string matrices =
      std::string(ggml_type_name(spec.matrix_type)) +
      (spec.more_bits_type != GgmlType::kF32
           ? std::string(" (") + ggml_type_name(spec.more_bits_type) + " attn_v/ffn_down in llama.cpp's layers)"
           : std::string());
  std::printf("wrote %s: %d layers, dim %d, %d/%d heads x %d, ffn %d, vocab %d, context %d, %s matrices, %s "
              "embeddings, %s, seed %llu%s%s\n",
              out.c_str(), spec.n_layers, spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.ffn,
              spec.vocab, spec.context, matrices.c_str(), ggml_type_name(spec.embd_type), head.c_str(),
              static_cast<unsigned long long>(spec.seed),
              spec.architecture == "llama" ? "" : (", " + spec.architecture).c_str(),
              fallback ? "; rows that are not whole super-blocks in llama.cpp's Q5_0/Q5_1/Q8_0" : "");
  return 0;
}

}  // namespace flashscope::cli
